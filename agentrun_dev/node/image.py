"""``make image``: the project's image, built from the unchanged Dockerfile without a registry.

1. **Base image** (the Dockerfile's ``PYTHON_IMAGE``): Debian bookworm by ``debootstrap`` (Python 3.11, pip),
   cached as a root-filesystem tar in ``<cache>/base-image/<key>/`` where the key hashes every input (suite,
   mirror, packages, this recipe's version); a changed input makes a new key, an unchanged one is not rebuilt.
2. **agentrun image**: ``buildah bud --build-arg PYTHON_IMAGE=localhost/agentrun-base:<key>``, tagged
   ``agentrun:0.1.0`` (what deploy/ names), exported as a docker-archive to ``<state>/images/``.
3. **Load**: ``ctr images import`` into the real node's containerd (when it is up).

Host hygiene: debootstrap runs in a private mount namespace (its /proc and /sys mounts die with it); buildah
uses the ``vfs`` driver (no overlay mounts) with storage under the cache, and ``chroot`` isolation (no
cgroups, no network namespace: RUN steps reach PyPI through the host's network). Quirks, as settings:
build steps get the host's CA bundle (TLS to PyPI may be intercepted by a proxy whose CA only the host
trusts), an open-files limit within the host's hard limit, and Debian's "externally managed" marker is removed
from the base so ``pip install`` works as in the official python images.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TextIO

from agentrun_dev import settings as settings_mod

REPO_ROOT = Path(__file__).resolve().parents[2]
RECIPE_VERSION = "1"
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
PACKAGES = ("python3", "python3-pip", "python-is-python3", "ca-certificates", "passwd")
IMAGE = "agentrun:0.1.0"
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")


def base_key() -> str:
    inputs = {"suite": SUITE, "mirror": MIRROR, "packages": sorted(PACKAGES), "recipe": RECIPE_VERSION}
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:12]


def base_ref() -> str:
    return f"localhost/agentrun-base:{base_key()}"


def _run(cmd: list[str], out: TextIO, what: str, **kw: object) -> float:
    t0 = time.monotonic()
    print(f"[image] {what}: {' '.join(cmd)}", file=out, flush=True)
    res = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False, **kw)  # type: ignore[call-overload]
    if res.returncode != 0:
        tail = "\n".join((res.stdout + res.stderr).splitlines()[-30:])
        raise RuntimeError(f"{what} failed (exit {res.returncode}):\n{tail}")
    took = time.monotonic() - t0
    print(f"[image]   {what} done in {took:.0f}s", file=out, flush=True)
    return took


def _nofile() -> str:
    # The hard limit cannot be raised here (20000 on this kind of machine): stay within it.
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    n = 16384 if hard == resource.RLIM_INFINITY else min(16384, hard)
    return f"nofile={n}:{n}"


def ensure_rootfs(s: settings_mod.Settings, out: TextIO) -> Path:
    """The base root filesystem tar, debootstrapped once per key."""
    d = s.cache_dir / "base-image" / base_key()
    tar = d / "rootfs.tar"
    if tar.exists():
        return tar
    if shutil.which("debootstrap") is None:
        raise RuntimeError("debootstrap is missing: apt-get update && apt-get install -y debootstrap")
    d.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".rootfs-", dir=d))
    try:
        root = work / "root"
        _run(
            ["nice", "unshare", "--mount", "--propagation", "private", "--",
             "debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE, str(root), MIRROR],
            out, "debootstrap",
        )  # fmt: skip
        # Debian marks its Python "externally managed" (PEP 668); an image's Python is ours to pip into.
        for marker in root.glob("usr/lib/python3*/EXTERNALLY-MANAGED"):
            marker.unlink()
        shutil.rmtree(root / "var/lib/apt/lists", ignore_errors=True)
        shutil.rmtree(root / "var/cache/apt/archives", ignore_errors=True)
        _run(["tar", "-C", str(root), "--numeric-owner", "-cf", str(work / "rootfs.tar"), "."], out, "pack")
        os.replace(work / "rootfs.tar", tar)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return tar


def _containers_conf(s: settings_mod.Settings) -> None:
    """buildah's own containers.conf (``CONTAINERS_CONF``): its network backend would otherwise create
    /etc/cni/net.d on the host even though build steps use the host network."""
    store = s.cache_dir / "buildah"
    (store / "cni").mkdir(parents=True, exist_ok=True)
    conf = store / "containers.conf"
    conf.write_text(f'[network]\nnetwork_config_dir = "{store / "cni"}"\n')
    os.environ["CONTAINERS_CONF"] = str(conf)


def buildah(s: settings_mod.Settings) -> list[str]:
    store = s.cache_dir / "buildah"
    _containers_conf(s)
    if shutil.which("buildah") is None:
        raise RuntimeError("buildah is missing: apt-get update && apt-get install -y buildah")
    # A private mount namespace with a tmpfs on /var/lib: buildah keeps a blob-info cache in
    # /var/lib/containers/cache whatever its --root, and the host's disk is not ours to write.
    private = ["unshare", "--mount", "--propagation", "private", "--",
               "sh", "-c", 'mount -t tmpfs agentrun-buildah /var/lib && exec "$@"', "buildah"]  # fmt: skip
    return [*private, "buildah", "--root", str(store / "root"), "--runroot", str(store / "run"),
            "--storage-driver", "vfs"]  # fmt: skip


def ensure_base(s: settings_mod.Settings, out: TextIO) -> str:
    ref = base_ref()
    b = buildah(s)
    have = subprocess.run([*b, "images", "-q", ref], capture_output=True, text=True, check=False)
    if have.returncode == 0 and have.stdout.strip():
        return ref
    tar = ensure_rootfs(s, out)
    ctr = subprocess.run([*b, "from", "scratch"], capture_output=True, text=True, check=True).stdout.strip()
    try:
        _run([*b, "add", ctr, str(tar), "/"], out, "base: add rootfs")
        _run(
            [*b, "config", "--env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
             "--env", "LANG=C.UTF-8", "--cmd", "python3", ctr],
            out, "base: config",
        )  # fmt: skip
        _run([*b, "commit", "--rm", ctr, ref], out, "base: commit")
    except BaseException:
        subprocess.run([*b, "rm", ctr], capture_output=True, check=False)
        raise
    return ref


def build(s: settings_mod.Settings, out: TextIO = sys.stderr) -> Path:
    """Build the agentrun image and export it; returns the archive's path."""
    t0 = time.monotonic()
    base = ensure_base(s, out)
    b = buildah(s)
    _run(
        ["nice", *b, "bud", "--isolation", "chroot", "--ulimit", _nofile(), "--layers",
         "--build-arg", f"PYTHON_IMAGE={base}",
         "-v", f"{HOST_CA}:/etc/ssl/certs/ca-certificates.crt:ro",
         "-t", f"localhost/{IMAGE}", "-f", "Dockerfile", "."],
        out, "buildah bud", cwd=REPO_ROOT,
    )  # fmt: skip
    dest = s.state_dir / "images" / "agentrun.tar"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.unlink(missing_ok=True)
    _run([*b, "push", f"localhost/{IMAGE}", f"docker-archive:{dest}:{IMAGE}"], out, "export")
    print(f"[image] {IMAGE} in {dest} ({time.monotonic() - t0:.0f}s)", file=out, flush=True)
    return dest


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m agentrun_dev.node.image", description=__doc__.split("\n")[0])
    ap.add_argument(
        "action",
        choices=("build", "load"),
        help="build: base + buildah bud + export; "
        "load: import the exported archive into the real node's containerd",
    )
    args = ap.parse_args(argv)
    s = settings_mod.from_env()
    try:
        if args.action == "build":
            build(s)
        else:
            archive = s.state_dir / "images" / "agentrun.tar"
            if not archive.exists():
                raise RuntimeError(f"no image archive at {archive}: run `make image` first")
            from agentrun_dev.node import lifecycle

            t0 = time.monotonic()
            lifecycle.import_image(s, archive)
            print(
                f"[image] loaded {IMAGE} into the real node ({time.monotonic() - t0:.0f}s)", file=sys.stderr
            )
    except RuntimeError as exc:
        print(f"make image: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
