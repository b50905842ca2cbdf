"""The real node leaves the shared machine as it found it: up -> a Pod runs -> down -> the host is unchanged.

Compared before and after (and, for the host's network and sysctls, also while the node is up): every
readable, writable sysctl (minus the few that other processes move on their own: those that differ between
two reads taken before), ``iptables -S`` of every table and ``nft list ruleset``, interfaces, addresses and
routes, the top of each cgroup hierarchy, the host's mount table, the well-known directories kubelet,
containerd and CNI would otherwise write (/run/netns, /var/lib/cni, /var/lib/kubelet, /opt/containerd, …),
and leftover processes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from agentrun_dev import settings as settings_mod
from agentrun_dev.node import config, host, lifecycle
from tests.e2e import realnode_support as rs

pytestmark = pytest.mark.e2e
WELL_KNOWN = ("/run/netns", "/var/run/netns", "/var/lib/cni", "/var/lib/kubelet", "/var/log/pods",
              "/var/log/containers", "/opt/containerd", "/opt/cni", "/etc/cni", "/run/containerd",
              "/var/lib/containerd", "/etc/kubernetes")  # fmt: skip


def _sysctls() -> dict[str, str]:
    out: dict[str, str] = {}
    for path in Path("/proc/sys").rglob("*"):
        # Settings only (writable entries): read-only ones are statistics (fs/quota/syncs, file-nr, …).
        # kernel/ns_last_pid is writable but moves with every fork on the machine.
        if str(path).endswith("kernel/ns_last_pid") or "/kernel/random/" in str(path):
            continue
        if path.is_file() and os.access(path, os.R_OK) and path.stat().st_mode & 0o200:
            with contextlib.suppress(OSError):
                out[str(path)] = path.read_text(errors="replace")
    return out


def _cmd(*argv: str) -> str:
    if shutil.which(argv[0]) is None:
        return f"({argv[0]} not installed)"
    res = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    return res.stdout + res.stderr


def _network() -> dict[str, Any]:
    tables = {t: _cmd("iptables", "-t", t, "-S") for t in ("filter", "nat", "mangle", "raw")}
    return {
        "iptables": tables,
        "nft": _cmd("nft", "list", "ruleset"),
        "links": sorted(line.split(":")[1].strip() for line in _cmd("ip", "-o", "link").splitlines()),
        "addrs": sorted(" ".join(line.split()[1:4]) for line in _cmd("ip", "-o", "addr").splitlines()),
        "routes": _cmd("ip", "route", "show", "table", "all"),
    }


def _rest() -> dict[str, Any]:
    cgroup_mounts = {*host.hierarchies().values(), *([u] if (u := host.unified()) else [])}
    roots: dict[str, list[str]] = {
        str(m): sorted(p.name for p in m.iterdir() if p.is_dir()) for m in cgroup_mounts
    }
    # Deeper down other processes' cgroups come and go: there, only the node's own are looked for.
    roots["agentrun-node cgroups"] = sorted(
        str(p) for m in cgroup_mounts for p in m.glob("**/agentrun-node-*") if p.is_dir()
    )
    mounts = sorted(Path("/proc/self/mounts").read_text().splitlines())
    return {"cgroup-roots": roots, "mounts": mounts, "paths": {p: os.path.exists(p) for p in WELL_KNOWN}}


def _diff(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    return [
        f"{k}:\n  before {a.get(k)!r}\n  after  {b.get(k)!r}"
        for k in sorted(set(a) | set(b))
        if a.get(k) != b.get(k)
    ]


def test_host_unchanged_after_node_up_and_down() -> None:
    s = settings_mod.from_env()
    lifecycle.down(s)
    first = _sysctls()
    time.sleep(1.0)
    second = _sysctls()
    stable = {k for k, v in second.items() if first.get(k) == v}
    before_sys = {k: second[k] for k in stable}
    before_net, before_rest = _network(), _rest()

    lifecycle.up(s)
    try:
        cgroup_root = lifecycle.cgroup_root(s)
        assert (host.hierarchies()["memory"] / cgroup_root.strip("/") / "kubepods").is_dir()
        # Nested under this process's cgroup in every controller, never at a hierarchy root.
        for ctrl, path in host.parse_proc_cgroup(Path("/proc/self/cgroup").read_text()).items():
            assert cgroup_root.startswith(path.rstrip("/") + "/"), (ctrl, path, cgroup_root)
        assert Path(cgroup_root).name.startswith("agentrun-node-")
        # A Pod on the node, in its own network namespace (the node's bridge), then gone.
        ns = f"e2e-host-{os.getpid()}"
        rs.kubectl(s, "create", "namespace", ns, check=False)
        rs.kubectl(s, "annotate", "namespace", ns, "--overwrite",
                   *(f"{k}={v}" for k, v in lifecycle.NAMESPACE_ANNOTATIONS.items()))  # fmt: skip
        rs.kubectl(s, "-n", ns, "run", "sandbox-only", f"--image={config.PAUSE_IMAGE}",
                   "--image-pull-policy=Never", "--restart=Never")  # fmt: skip
        rs.kubectl(s, "-n", ns, "wait", "--for=condition=Ready", "pod/sandbox-only", "--timeout=180s")
        pod = rs.get_json(s, "pod", "sandbox-only", "-n", ns)
        assert pod["spec"]["nodeName"] == config.NODE_NAME
        assert pod["status"]["podIP"].startswith("10.213.0."), pod["status"]
        during_net = _network()
        assert _diff(before_net, during_net) == [], "the host's network changed while the node is up"
        during_sys = {k: v for k, v in _sysctls().items() if k in stable}
        assert _diff(before_sys, during_sys) == [], "a host sysctl changed while the node is up"
        rs.kubectl(s, "delete", "namespace", ns, "--wait=false")
    finally:
        lifecycle.down(s)

    after_sys = {k: v for k, v in _sysctls().items() if k in stable}
    problems = _diff(before_sys, after_sys) + _diff(before_net, _network()) + _diff(before_rest, _rest())
    assert problems == [], "\n".join(problems)
    leftovers = [pid for pid in Path("/proc").iterdir() if str(s.state_dir / "node") in _cmdline(pid)]
    assert leftovers == [], f"processes of the node still running: {leftovers}"


def _cmdline(proc: Path) -> str:
    """A /proc entry's command line; "" for non-processes and for a process that exited since /proc was listed
    (other processes on this shared machine come and go while the test walks /proc)."""
    if not proc.name.isdigit():
        return ""
    try:
        return Path(proc, "cmdline").read_bytes().decode(errors="replace")
    except OSError:  # FileNotFoundError / ProcessLookupError: gone between listing and reading
        return ""
