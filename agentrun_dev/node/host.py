"""What the real node needs from the host, checked before anything is started; and the node's cgroup root.

The rule for cgroups (the machine is shared): every cgroup of the node and its containers nests under the
cgroup of the process that starts it, never at a hierarchy root, so the machine's own accounting covers
them. On cgroup v1 each controller has its own path (here memory sits in ``/process_api/<id>`` while cpu is at
``/``); the node's root is the deepest of those paths plus ``agentrun-node-<id>``, which lies under every
controller's own path as long as they form a chain (checked). ``ensure_cgroup_root`` records each directory it
creates, so ``remove_cgroup_root`` removes exactly those, deepest first.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from pathlib import Path

CGROUP_FS = Path("/sys/fs/cgroup")
CNI_BIN_DIRS = (Path("/usr/lib/cni"), Path("/opt/cni/bin"))
# containerd itself is built from its Go module (agentrun_dev.node.build): Debian bookworm's 1.6 is outside
# Kubernetes' support range since 1.36.
PACKAGES = "runc containernetworking-plugins"
TOOLS = {
    "runc": "runc",
    "nsenter": "util-linux",
    "unshare": "util-linux",
    "ip": "iproute2",
}


class HostError(RuntimeError):
    """The host lacks something the real node needs; the message says what and how to get it."""


@dataclasses.dataclass(frozen=True)
class Tools:
    runc: str
    cni_bin: Path


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """Pure: ``/proc/self/cgroup`` -> {controller: path}; v1 lines only (``0::/`` is the v2 one)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or parts[0] == "0":
            continue
        for ctrl in parts[1].split(","):
            if ctrl:
                out[ctrl] = parts[2]
    return out


def deepest_common(paths: dict[str, str]) -> str:
    """Pure: the deepest path that lies under every controller's path; HostError if they do not nest."""
    ordered = sorted(set(paths.values()), key=lambda p: p.rstrip("/").count("/"))
    deepest = ordered[-1] if ordered else "/"
    for p in ordered:
        prefix = p.rstrip("/") + "/"
        if not (deepest.rstrip("/") + "/").startswith(prefix):
            raise HostError(
                f"this process's cgroups do not nest ({paths}): the node cannot be placed under all of them"
            )
    return deepest


def node_cgroup_root(node_id: str, proc_cgroup: str | None = None) -> str:
    text = proc_cgroup if proc_cgroup is not None else Path("/proc/self/cgroup").read_text()
    base = deepest_common(parse_proc_cgroup(text))
    return base.rstrip("/") + f"/agentrun-node-{node_id}"


def hierarchies() -> dict[str, Path]:
    """Mounted v1 hierarchies we place the node in: {controller: mount point}."""
    out: dict[str, Path] = {}
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[2] == "cgroup":
            for opt in fields[3].split(","):
                # name=systemd too: kubelet insists the cgroup root exists in every mounted hierarchy.
                if opt in ("cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "blkio", "pids",
                           "name=systemd"):  # fmt: skip
                    out[opt] = Path(fields[1])
    return out


def unified() -> Path | None:
    """The cgroup2 mount of the hybrid layout (``/sys/fs/cgroup/unified``), where runc also makes cgroups."""
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[2] == "cgroup2":
            return Path(fields[1])
    return None


def _all_mounts() -> list[Path]:
    return sorted({*hierarchies().values(), *([u] if (u := unified()) else [])})


def ensure_cgroup_root(root: str, record: Path) -> None:
    """mkdir ``root`` in every hierarchy (kubelet wants it to exist), recording each directory created.

    Also in the hybrid layout's cgroup2 hierarchy, where runc creates the containers' cgroups too: made here
    first, every directory on the way is recorded, so ``down`` knows which of them are ours to remove."""
    created: list[str] = json.loads(record.read_text()) if record.exists() else []
    for mount in _all_mounts():
        d = mount
        for part in root.strip("/").split("/"):
            d = d / part
            if not d.exists():
                d.mkdir()
                created.append(str(d))
                if (d / "cpuset.cpus").exists():
                    # A new cpuset cgroup is empty (no CPUs, no memory nodes) until given its parent's.
                    for f in ("cpuset.cpus", "cpuset.mems"):
                        (d / f).write_text((d.parent / f).read_text())
    record.write_text(json.dumps(created))


def cgroup_pids(root: str) -> set[int]:
    pids: set[int] = set()
    for mount in _all_mounts():
        base = mount / root.strip("/")
        if not base.exists():
            continue
        for procs in base.rglob("cgroup.procs"):
            try:
                pids.update(int(x) for x in procs.read_text().split())
            except (OSError, ValueError):
                continue
    return pids


def remove_cgroup_root(root: str, record: Path, timeout_s: float = 30.0) -> list[str]:
    """rmdir every cgroup under ``root`` (deepest first) and the directories we created; returns leftovers."""
    deadline = time.monotonic() + timeout_s
    leftovers: list[str] = []
    for mount in _all_mounts():
        base = mount / root.strip("/")
        if not base.exists():
            continue
        dirs = sorted((p for p in base.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
        for d in [*dirs, base]:
            while True:
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        leftovers.append(str(d))
                        break
                    time.sleep(0.2)  # its last process is still exiting
    created: list[str] = json.loads(record.read_text()) if record.exists() else []
    for name in sorted(created, key=lambda p: -len(Path(p).parts)):
        try:
            Path(name).rmdir()
        except FileNotFoundError:
            pass
        except OSError:
            leftovers.append(name)
    record.unlink(missing_ok=True)
    return leftovers


def preflight() -> Tools:
    """Fail early, with the fix, where the host cannot run a node."""
    if os.geteuid() != 0:
        raise HostError("the real node needs root (kubelet, containerd and runc create cgroups and mounts)")
    if "overlay" not in Path("/proc/filesystems").read_text():
        raise HostError("the kernel has no overlayfs (containerd's snapshotter): `modprobe overlay`")
    enabled = {
        f[0]: f[3] == "1"
        for f in (ln.split() for ln in Path("/proc/cgroups").read_text().splitlines()[1:])
        if len(f) >= 4
    }
    if not enabled.get("memory"):
        raise HostError("the cgroup memory controller is not enabled (boot with cgroup_enable=memory)")
    if "memory" not in hierarchies():
        raise HostError(
            "no cgroup v1 memory hierarchy is mounted under /sys/fs/cgroup: this node supports the hybrid "
            "(v1) layout of this machine only"
        )
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        pkgs = " ".join(sorted({TOOLS[t] for t in missing}))
        raise HostError(f"missing {', '.join(missing)}: apt-get update && apt-get install -y {pkgs}")
    cni = next((d for d in CNI_BIN_DIRS if (d / "bridge").is_file() and (d / "host-local").is_file()), None)
    if cni is None:
        raise HostError("no CNI plugins (bridge, host-local): apt-get install -y containernetworking-plugins")
    return Tools(runc=shutil.which("runc") or "runc", cni_bin=cni)
