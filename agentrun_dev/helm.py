"""Helm v4, built from its Go module and cached like the control plane: ``python -m agentrun_dev.helm``.

The chart in ``deploy/helm/agentrun`` is linted and rendered by the tests (tests/integration/
test_deploy_helm.py) with a real ``helm``. It comes from the Go module proxy like every other binary of the
dev setup (no release tarball from another site): ``go install helm.sh/helm/v4/cmd/helm@<version>`` (helm's
go.mod has no ``replace`` lines, so no wrapper module is needed) into a temporary directory, renamed into
``<cache>/helm/<version>/helm`` — whole or absent — under a lock. ~2 min cold on 2 cores; instant once cached.
``scripts/bootstrap`` calls it after the control plane.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TextIO

from agentrun_dev import controlplane, state
from agentrun_dev import settings as settings_mod

VERSION = "v4.3.2"
MODULE = "helm.sh/helm/v4"


def ldflags(version: str) -> str:
    """Stamp the version ``helm version`` reports (helm's Makefile does the same)."""
    pkg = f"{MODULE}/internal/version"
    return f"-s -w -X {pkg}.version={version} -X {pkg}.gitTreeState=clean"


def path(s: settings_mod.Settings, version: str = VERSION) -> Path:
    return s.cache_dir / "helm" / version / "helm"


def locate(s: settings_mod.Settings, version: str = VERSION) -> Path | None:
    p = path(s, version)
    return p if p.is_file() and os.access(p, os.X_OK) else None


def ensure(s: settings_mod.Settings, out: TextIO = sys.stderr, version: str = VERSION) -> Path:
    """The helm binary, built when missing. Raises controlplane.BuildError (with a fix hint) on failure."""
    found = locate(s, version)
    if found is not None:
        return found
    target = path(s, version)
    with state.flocked(target.parent.parent / ".build.lock"):
        found = locate(s, version)  # another process may have built it while we waited
        if found is not None:
            return found
        target.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=".build-", dir=target.parent.parent))
        p = controlplane._Progress(out)
        env = controlplane._go_env()
        env["GOBIN"] = str(work / "bin")
        env["CGO_ENABLED"] = "0"  # a static binary; no C toolchain needed
        p.say(f"building helm {version} from {MODULE} into {target.parent} (once; later runs reuse it)")
        cmd = ["nice", "go", "install", "-trimpath", "-ldflags", ldflags(version)]
        p.run("compile helm", [*cmd, f"{MODULE}/cmd/helm@{version}"], work, work / "helm-build.log", env)
        p.run("check helm", [str(work / "bin" / "helm"), "version"], work, work / "helm-version.log", env)
        os.replace(work / "bin" / "helm", target)  # atomic: whole or absent
        shutil.rmtree(work, ignore_errors=True)
        p.say(f"done: {target}")
    return target


def main() -> int:
    try:
        print(ensure(settings_mod.from_env()))
    except controlplane.BuildError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
