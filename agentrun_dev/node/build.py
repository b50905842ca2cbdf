"""The real node's binaries: kubelet, kube-scheduler, a static ``pause`` and containerd 2 (with its runc shim
and ``ctr``), built and cached like the control plane.

Same recipe as :mod:`agentrun_dev.controlplane` (a wrapper Go module over ``k8s.io/kubernetes`` at the dev
cluster's version, ``go build -trimpath``), into ``<cache>/node/<k8s version>/`` (containerd's into
``<cache>/node/containerd-<its version>/``): a binary is built in a
temporary directory and renamed into place, so it is whole or absent; a lock file serialises builds.
``pause`` (the pod sandbox's process) is a 20-line static Go program (``gomod.PAUSE_GO``): it only waits for
SIGTERM and reaps orphans, which is all the sandbox needs, and needs no C toolchain. The build runs under
``nice`` because the machine is shared; with Go's caches warm from the control-plane build it takes ~1.5 min.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import TextIO

from agentrun_dev import controlplane, gomod, state
from agentrun_dev import settings as settings_mod

NAMES = ("kubelet", "kube-scheduler", "pause", *gomod.CONTAINERD_TARGETS)


@dataclasses.dataclass(frozen=True)
class Binaries:
    kubelet: Path
    kube_scheduler: Path
    pause: Path
    containerd: Path
    ctr: Path

    @property
    def containerd_dir(self) -> Path:
        """Where containerd finds its shim (``containerd-shim-runc-v2``): first on its ``PATH``."""
        return self.containerd.parent


def bin_dir(s: settings_mod.Settings) -> Path:
    return s.cache_dir / "node" / s.k8s_version


def _path(s: settings_mod.Settings, name: str) -> Path:
    """Where binary ``name`` is cached: containerd's by its own version, the rest by Kubernetes'."""
    if name in gomod.CONTAINERD_TARGETS:
        return s.cache_dir / "node" / f"containerd-{gomod.CONTAINERD_VERSION}" / name
    return bin_dir(s) / name


def locate(s: settings_mod.Settings) -> Binaries | None:
    if not all(_path(s, n).is_file() and os.access(_path(s, n), os.X_OK) for n in NAMES):
        return None
    return Binaries(*(_path(s, n) for n in ("kubelet", "kube-scheduler", "pause", "containerd", "ctr")))


def _nice_env() -> dict[str, str]:
    env = controlplane._go_env()
    # Static: the binaries run on the host and pause inside an image with no libc.
    env["CGO_ENABLED"] = "0"
    return env


def _build_pause(p: controlplane._Progress, work: Path, env: dict[str, str], out: Path, go: str) -> None:
    src = work / "pause"
    src.mkdir()
    (src / "go.mod").write_text(gomod.pause_gomod(go))
    (src / "main.go").write_text(gomod.PAUSE_GO)
    cmd = ["nice", "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", str(out / "pause"), "."]
    p.run("compile pause", cmd, src, work / "pause-build.log", env)


def _build_containerd(
    p: controlplane._Progress, work: Path, env: dict[str, str], out: Path, go: str, names: list[str]
) -> None:
    src = work / "containerd"
    src.mkdir()
    (src / "go.mod").write_text(gomod.containerd_gomod(go))
    module = f"{gomod.CONTAINERD_MODULE}@{gomod.CONTAINERD_VERSION}"
    p.run("download containerd", ["go", "get", module], src, work / "containerd-get.log", env)
    pkgs = [f"{gomod.CONTAINERD_MODULE}/{gomod.CONTAINERD_TARGETS[n]}" for n in names]
    # -mod=mod: the wrapper has no source importing these, so go.sum is completed by the build itself.
    cmd = ["nice", "go", "build", "-mod=mod", "-trimpath", "-ldflags", "-s -w", "-o", str(out) + "/", *pkgs]
    p.run(f"compile {', '.join(names)}", cmd, src, work / "containerd-build.log", env)


def ensure(s: settings_mod.Settings, out: TextIO = sys.stderr) -> Binaries:
    """The node binaries, building what is missing. Raises controlplane.BuildError (with a hint)."""
    found = locate(s)
    if found is not None:
        return found
    with state.flocked(bin_dir(s).parent / ".build.lock"):
        dest = bin_dir(s)
        missing = [n for n in NAMES if not _path(s, n).is_file()]
        if not missing:
            result = locate(s)
            assert result is not None
            return result
        p = controlplane._Progress(out)
        p.say(f"building {', '.join(missing)} (k8s {s.k8s_version}) into {dest.parent}")
        dest.mkdir(parents=True, exist_ok=True)
        for old in dest.parent.glob(".build-*"):
            shutil.rmtree(old, ignore_errors=True)
        work = Path(tempfile.mkdtemp(prefix=".build-", dir=dest.parent))
        out_dir = work / "bin"
        out_dir.mkdir()
        env = _nice_env()
        go_version = controlplane._go_version(p, work, env)
        k8s = [n for n in missing if n in gomod.K8S_TARGETS]
        if k8s:
            controlplane._build_k8s(s, k8s, p, work, env, out_dir, nice=True)
        if "pause" in missing:
            _build_pause(p, work, env, out_dir, go_version.removeprefix("go"))
        runtime = [n for n in missing if n in gomod.CONTAINERD_TARGETS]
        if runtime:
            _build_containerd(p, work, env, out_dir, go_version.removeprefix("go"), runtime)
        built = {"go": go_version, "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        for name in missing:
            _path(s, name).parent.mkdir(parents=True, exist_ok=True)
            os.replace(out_dir / name, _path(s, name))
        for directory in {_path(s, name).parent for name in missing}:
            (directory / "build.json").write_text(json.dumps(built, indent=2) + "\n")
        shutil.rmtree(work, ignore_errors=True)
        p.say(f"done: {dest}")
    result = locate(s)
    assert result is not None
    return result
