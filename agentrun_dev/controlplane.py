"""The control-plane binaries: etcd, kube-apiserver, kube-controller-manager.

From ``$KUBEBUILDER_ASSETS`` when set (envtest ships etcd and kube-apiserver, not the controller-manager: that
one is still built), else built once with the machine's Go toolchain from the Go module proxy into
``<cache>/controlplane/<k8s>-etcd<etcd>/``. Each binary is built in a temporary directory and renamed into
place, so an interrupted build never leaves a half-written binary that a later run would trust; a lock file
serialises concurrent builds. A cold build takes ~6 minutes on 2 cores (most of it compiling kube-apiserver);
with Go's module and build caches warm it takes well under a minute.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TextIO

from agentrun_dev import gomod, state
from agentrun_dev import settings as settings_mod

HEARTBEAT_S = 15.0
"""Seconds between progress lines while a long command runs."""

NAMES = ("etcd", "kube-apiserver", "kube-controller-manager")


@dataclasses.dataclass(frozen=True)
class Binaries:
    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path


class BuildError(RuntimeError):
    def __init__(self, what: str, command: list[str] | None, tail: str, hint: str) -> None:
        self.what, self.command, self.tail, self.hint = what, command, tail, hint
        cmd = f"\n  command: {' '.join(command)}" if command else ""
        super().__init__(
            f"control-plane build failed: {what}{cmd}\n--- last output ---\n{tail}\n"
            f"--- how to fix ---\n{hint}"
        )


def hint_for(output: str) -> str:
    """Pure: a likely fix for a failed go command, from its output."""
    low = output.lower()
    if (
        "requires go >=" in low
        or "go.mod requires go" in low
        or ("toolchain" in low and "not available" in low)
    ):
        return (
            "Your Go toolchain is too old for this Kubernetes version. Install a newer Go "
            "(https://go.dev/dl), "
            "or allow automatic toolchain download (unset GOTOOLCHAIN or set GOTOOLCHAIN=auto)."
        )
    if any(
        s in low
        for s in (
            "dial tcp",
            "i/o timeout",
            "no such host",
            "connection refused",
            "tls handshake",
            "proxyconnect",
            "403 forbidden",
            "404 not found",
            "410 gone",
        )
    ):
        return (
            "The Go module proxy could not be reached or did not have a module. Check network access to "
            f"GOPROXY={os.environ.get('GOPROXY', 'https://proxy.golang.org,direct')} "
            "(set GOPROXY to a reachable "
            "proxy), or set KUBEBUILDER_ASSETS to a directory with prebuilt etcd and kube-apiserver."
        )
    if "no space left" in low:
        return "The disk is full: free space for Go's caches (GOMODCACHE, GOCACHE) — the build needs ~4 GB."
    if "signal: killed" in low or "cannot allocate memory" in low:
        return "The compiler was killed (out of memory?): retry with fewer parallel jobs, e.g. GOFLAGS=-p=1."
    return "Read the output above, fix the cause, and rerun `agentrun dev build`."


def _cached(s: settings_mod.Settings) -> dict[str, Path]:
    """Binaries available without building: KUBEBUILDER_ASSETS first, then the build cache."""
    found: dict[str, Path] = {}
    for name in NAMES:
        for d in (s.kubebuilder_assets, s.controlplane_dir):
            if d is not None and (d / name).is_file() and os.access(d / name, os.X_OK):
                found[name] = d / name
                break
    return found


def locate(s: settings_mod.Settings) -> Binaries | None:
    found = _cached(s)
    if len(found) < len(NAMES):
        return None
    return Binaries(found["etcd"], found["kube-apiserver"], found["kube-controller-manager"])


def _build_lock(s: settings_mod.Settings) -> contextlib.AbstractContextManager[None]:
    return state.flocked(s.cache_dir / "controlplane" / ".build.lock")


class _Progress:
    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.t0 = time.monotonic()
        self.go_version = ""

    def elapsed(self) -> str:
        secs = int(time.monotonic() - self.t0)
        return f"{secs // 60}m{secs % 60:02d}s"

    def say(self, msg: str) -> None:
        print(f"[build {self.elapsed()}] {msg}", file=self.out, flush=True)

    def run(self, what: str, cmd: list[str], cwd: Path, log: Path, env: dict[str, str]) -> str:
        """Run ``cmd`` with output to ``log``, printing a heartbeat; return its output, raise BuildError."""
        self.say(f"{what}: {' '.join(cmd)}")
        started = time.monotonic()
        with open(log, "w") as fh:
            try:
                proc = subprocess.Popen(
                    cmd, cwd=cwd, env=env, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
                )
            except FileNotFoundError as exc:
                raise BuildError(
                    what,
                    cmd,
                    str(exc),
                    "Go is not installed or not on PATH: install Go >= 1.26 "
                    "(https://go.dev/dl), or set KUBEBUILDER_ASSETS to prebuilt binaries.",
                ) from exc
            last_beat = time.monotonic()
            while proc.poll() is None:
                time.sleep(0.5)
                if time.monotonic() - last_beat >= HEARTBEAT_S:
                    last_beat = time.monotonic()
                    step = int(time.monotonic() - started)
                    self.say(f"  … {what} still running ({step}s)")
        output = log.read_text(errors="replace")
        if proc.returncode != 0:
            tail = "\n".join(output.splitlines()[-25:])
            raise BuildError(f"{what} (exit {proc.returncode}; full log {log})", cmd, tail, hint_for(output))
        self.say(f"  {what} done in {int(time.monotonic() - started)}s")
        return output


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("GOFLAGS", "-buildvcs=false")  # the wrapper dir is not a VCS checkout
    # Go's official tarball lives in /usr/local/go, often not on PATH in non-login shells (CI, cron).
    if shutil.which("go", path=env.get("PATH")) is None:
        candidates = [Path(env["GOROOT"]) / "bin"] if env.get("GOROOT") else []
        for d in [*candidates, Path("/usr/local/go/bin"), Path.home() / "go" / "bin"]:
            if (d / "go").is_file():
                env["PATH"] = f"{d}{os.pathsep}{env.get('PATH', '')}"
                break
    return env


def _go_version(p: _Progress, work: Path, env: dict[str, str]) -> str:
    out = p.run("check Go", ["go", "version"], work, work / "go-version.log", env).strip()
    p.go_version = out.split()[2] if len(out.split()) > 2 else out
    return p.go_version


def _build_k8s(
    s: settings_mod.Settings,
    names: list[str],
    p: _Progress,
    work: Path,
    env: dict[str, str],
    out_dir: Path,
    *,
    nice: bool = False,
) -> None:
    src = work / "kubernetes"
    src.mkdir()
    dl = p.run(
        "download k8s.io/kubernetes",
        ["go", "mod", "download", "-json", f"k8s.io/kubernetes@{s.k8s_version}"],
        work,
        work / "download.log",
        env,
    )
    try:
        info = json.loads(dl)
        kube_gomod = Path(info["GoMod"]).read_text()
    except (ValueError, KeyError, OSError) as exc:
        raise BuildError("read kubernetes go.mod", None, dl[-2000:], hint_for(dl)) from exc
    _check_toolchain(p, kube_gomod, env)
    (src / "go.mod").write_text(gomod.kubernetes_wrapper(kube_gomod, s.k8s_version, s.staging_version))
    (src / "tools.go").write_text(gomod.tools_go([gomod.K8S_TARGETS[n] for n in names]))
    p.run("resolve modules (go mod tidy)", ["go", "mod", "tidy"], src, work / "k8s-tidy.log", env)
    cmd = [
        *(["nice"] if nice else []),  # the real node's build (agentrun_dev.node) yields to everyone else
        "go",
        "build",
        "-trimpath",
        "-ldflags",
        gomod.k8s_ldflags(s.k8s_version),
        "-o",
        str(out_dir) + "/",
        *(gomod.K8S_TARGETS[n] for n in names),
    ]
    p.run(f"compile {', '.join(names)}", cmd, src, work / "k8s-build.log", env)


def _check_toolchain(p: _Progress, kube_gomod: str, env: dict[str, str]) -> None:
    """Fail early when the local Go is older than kubernetes needs and may not fetch a newer one."""
    need = gomod.go_directive(kube_gomod)
    have = p.go_version
    if need is None or gomod.version_tuple(have) >= gomod.version_tuple(need):
        return
    if env.get("GOTOOLCHAIN", "auto").startswith("local"):
        raise BuildError(
            f"Go {have.removeprefix('go')} is older than the {need} that k8s.io/kubernetes needs",
            ["go", "version"],
            f"GOTOOLCHAIN={env.get('GOTOOLCHAIN')}",
            f"Install Go >= {need} (https://go.dev/dl), or unset GOTOOLCHAIN so Go downloads it.",
        )
    p.say(f"note: local Go {have} < required {need}; Go downloads a matching toolchain (GOTOOLCHAIN=auto)")


def _build_etcd(
    s: settings_mod.Settings, p: _Progress, work: Path, env: dict[str, str], out_dir: Path, go: str
) -> None:
    src = work / "etcd"
    src.mkdir()
    (src / "go.mod").write_text(gomod.etcd_wrapper(s.etcd_version, go))
    (src / "tools.go").write_text(gomod.tools_go([gomod.ETCD_MODULE]))
    p.run("resolve etcd modules (go mod tidy)", ["go", "mod", "tidy"], src, work / "etcd-tidy.log", env)
    p.run(
        "compile etcd",
        ["go", "build", "-trimpath", "-ldflags", "-s -w", "-o", str(out_dir / "etcd"), gomod.ETCD_MODULE],
        src,
        work / "etcd-build.log",
        env,
    )


def ensure(s: settings_mod.Settings, out: TextIO = sys.stderr, *, force: bool = False) -> Binaries:
    """The binaries, building whatever is missing. Raises BuildError (with a fix hint) on failure."""
    found = locate(s)
    if found is not None and not force:
        return found
    with _build_lock(s):
        have = {} if force else _cached(s)  # another process may have built while we waited for the lock
        missing = [n for n in NAMES if n not in have]
        if not missing:
            result = locate(s)
            assert result is not None
            return result
        p = _Progress(out)
        p.say(
            f"building {', '.join(missing)} (k8s {s.k8s_version}, etcd {s.etcd_version}) into "
            f"{s.controlplane_dir}; the first build takes several minutes, later ones reuse Go's caches"
        )
        s.controlplane_dir.mkdir(parents=True, exist_ok=True)
        for old in s.controlplane_dir.parent.glob(".build-*"):  # kept by failed builds for their logs
            shutil.rmtree(old, ignore_errors=True)
        work = Path(tempfile.mkdtemp(prefix=".build-", dir=s.controlplane_dir.parent))
        out_dir = work / "bin"
        out_dir.mkdir()
        env = _go_env()
        go_version = _go_version(p, work, env)
        k8s = [n for n in missing if n in gomod.K8S_TARGETS]
        if k8s:
            _build_k8s(s, k8s, p, work, env, out_dir)
        if "etcd" in missing:
            # `go mod tidy` raises the directive if etcd's dependencies need a newer Go.
            _build_etcd(s, p, work, env, out_dir, go_version.removeprefix("go"))
        for name in missing:
            p.run(
                f"check {name}", [str(out_dir / name), "--version"], work, work / f"{name}-version.log", env
            )
            os.replace(out_dir / name, s.controlplane_dir / name)  # atomic: a binary is whole or absent
        manifest = s.controlplane_dir / "build.json"
        old = json.loads(manifest.read_text()) if manifest.exists() else {}
        old.update(
            {
                n: {"go": go_version, "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
                for n in missing
            }
        )
        old.update(
            {
                "k8s_version": s.k8s_version,
                "staging_version": s.staging_version,
                "etcd_version": s.etcd_version,
            }
        )
        manifest.write_text(json.dumps(old, indent=2, sort_keys=True) + "\n")
        shutil.rmtree(work, ignore_errors=True)
        p.say(f"done: {s.controlplane_dir}")
    result = locate(s)
    assert result is not None
    return result


def apiserver_dir(s: settings_mod.Settings, version: str) -> Path:
    """Where kube-apiserver of another Kubernetes ``version`` is cached (alone: etcd is shared)."""
    return s.cache_dir / "controlplane" / f"{version}-apiserver"


def ensure_apiserver(s: settings_mod.Settings, version: str, out: TextIO = sys.stderr) -> Path:
    """kube-apiserver of Kubernetes ``version`` (e.g. ``v1.34.4``: the approval matrix against an API server
    without MutatingAdmissionPolicy v1), built like the default control plane but alone, into
    ``apiserver_dir``; never touches the default one's cache. Raises BuildError (with a fix hint)."""
    target = apiserver_dir(s, version) / "kube-apiserver"
    if target.is_file() and os.access(target, os.X_OK):
        return target
    major, minor, patch = gomod.version_tuple(version)
    if major != 1 or not version.startswith("v"):
        raise BuildError(f"not a Kubernetes version: {version!r}", None, "", "Give one like v1.34.4.")
    other = dataclasses.replace(s, k8s_version=version, staging_version=f"v0.{minor}.{patch}")
    with _build_lock(s):
        if target.is_file():  # built by another process while we waited for the lock
            return target
        p = _Progress(out)
        p.say(f"building kube-apiserver {version} into {target.parent} (a cold build takes 15-30 minutes)")
        target.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=".build-apiserver-", dir=target.parent.parent))
        out_dir = work / "bin"
        out_dir.mkdir()
        env = _go_env()
        go_version = _go_version(p, work, env)
        _build_k8s(other, ["kube-apiserver"], p, work, env, out_dir, nice=True)
        binary = out_dir / "kube-apiserver"
        p.run("check kube-apiserver", [str(binary), "--version"], work, work / "version.log", env)
        os.replace(out_dir / "kube-apiserver", target)  # atomic: a binary is whole or absent
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        built = {"k8s_version": version, "go": go_version, "built_at": now}
        (target.parent / "build.json").write_text(json.dumps(built, indent=2, sort_keys=True) + "\n")
        shutil.rmtree(work, ignore_errors=True)
        p.say(f"done: {target}")
    return target
