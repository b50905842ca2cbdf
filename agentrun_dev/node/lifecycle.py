"""``agentrun dev node up|down|status``: a real node (kubelet, containerd, runc, CNI) and kube-scheduler.

Processes, in start order (each a dev-cluster daemon with a pid file and a log under ``<state>/logs``):

* ``node-holder`` — ``unshare --mount --net`` running :func:`config.holder_script`: owns the node's mount and
  network namespaces (no ``ip netns`` bind mount on the host); everything below joins them with ``nsenter``;
* ``node-forward`` — :mod:`agentrun_dev.node.forward`: API server, Postgres, SMTP sink into the node's netns;
* ``node-containerd`` and ``node-kubelet`` — inside the holder's namespaces; containers' cgroups under
  :func:`host.node_cgroup_root`;
* ``kube-scheduler`` — in the host's namespace, on loopback like the rest of the control plane.

Which Pods run where: the node is tainted ``agentrun.dev/real-node=true:NoSchedule`` and labelled
``agentrun.dev/real-node=true``. The Python pod runtime binds only Pods whose nodeSelector matches its own
labels, so a Pod selecting the real node is left to kube-scheduler; Pods without a selector keep running on
the pod runtime (kube-scheduler, which respects the taint, would bind them there too). ``make e2e`` puts its
namespaces on the real node with the upstream admission plugins PodNodeSelector and PodTolerationRestriction
(namespace annotations, :data:`NAMESPACE_ANNOTATIONS`), so deploy/ is applied unchanged.

``down`` kills every process in the node's mount namespace and cgroups, after which the namespaces and every
mount in them vanish with their last process; then it removes the cgroup directories it created.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TextIO

from agentrun_dev import cluster, components, identities, pki, procs, state
from agentrun_dev import settings as settings_mod
from agentrun_dev.node import build, config, host, ociimage

HOLDER, FORWARD, CONTAINERD, KUBELET, SCHEDULER = (
    "node-holder", "node-forward", "node-containerd", "node-kubelet", "kube-scheduler",
)  # fmt: skip
PARTS = (HOLDER, FORWARD, CONTAINERD, KUBELET, SCHEDULER)
NAMESPACE_ANNOTATIONS = {
    "scheduler.alpha.kubernetes.io/node-selector": f"{config.LABEL}=true",
    "scheduler.alpha.kubernetes.io/defaultTolerations": (
        f'[{{"key":"{config.TAINT_KEY}","operator":"Equal","value":"true","effect":"NoSchedule"}}]'
    ),
}


@dataclasses.dataclass(frozen=True)
class PartStatus:
    name: str
    pid: int | None
    healthy: bool


def node_id(s: settings_mod.Settings) -> str:
    return hashlib.sha256(str(s.state_dir).encode()).hexdigest()[:8]


def paths(s: settings_mod.Settings) -> config.Paths:
    return config.Paths(s.state_dir / "node")


def cgroup_root(s: settings_mod.Settings) -> str:
    """The node's cgroup root: as recorded by ``up`` (``down`` may run from a process in another cgroup),
    else derived from this process's cgroup."""
    recorded = paths(s).root / "cgroup-root"
    if recorded.exists():
        return recorded.read_text().strip()
    return host.node_cgroup_root(node_id(s))


def _say(out: TextIO, t0: float, msg: str) -> None:
    print(f"[node {time.monotonic() - t0:5.1f}s] {msg}", file=out, flush=True)


def _marker(s: settings_mod.Settings, name: str) -> str:
    p = paths(s)
    return {
        HOLDER: f"agentrun-node-holder-{node_id(s)}",
        FORWARD: "agentrun_dev.node.forward",
        CONTAINERD: f"--config={p.root / 'containerd.toml'}",
        KUBELET: f"--root-dir={p.kubelet_dir}",
        SCHEDULER: f"--cert-dir={p.root / 'scheduler'}",
    }[name]


def _pid(s: settings_mod.Settings, name: str) -> int | None:
    return procs.running_pid(s, name, _marker(s, name))


def _start(
    s: settings_mod.Settings,
    name: str,
    argv: list[str],
    out: TextIO,
    t0: float,
    path_first: Path | None = None,
) -> int:
    pid = _pid(s, name)
    if pid is not None and procs.recorded_argv(s, name) == argv:
        return pid
    if pid is not None:
        procs.stop(s, name, _marker(s, name))
    env = dict(os.environ)
    # The venv's bin (the forwarder's interpreter); ``path_first`` before it: containerd looks its runc shim
    # up on PATH, and it must find the one built with it, not a system package's.
    first = [str(path_first)] if path_first is not None else []
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([*first, venv_bin, env.get("PATH", "/usr/bin:/bin")])
    new = procs.start(s, name, argv, env=env)
    _say(out, t0, f"started {name} (pid {new})")
    return new


def _wait(
    s: settings_mod.Settings, name: str, check: object, timeout: float = 120, pid: int | None = None
) -> None:
    # ``pid``: the process just started. Looking it up by its marker instead can miss it while it is inside
    # execve (its /proc cmdline reads empty for a moment), which would read as "exited" at once.
    pid = pid if pid is not None else _pid(s, name)
    procs.wait_until(
        f"{name} did not become ready",
        check,  # type: ignore[arg-type]
        timeout,
        s,
        name,
        alive=lambda: pid is not None and state.pid_alive(pid),
    )


def _kubeconfig(s: settings_mod.Settings, dest: Path, server: str, user: str, groups: list[str]) -> None:
    cert, key = pki.issue_client(s, user, groups)
    ca = (s.pki_dir / "ca.crt").read_bytes()
    doc = identities.kubeconfig_dict(server, ca, cert, key, user)
    dest.write_text(config.dump_yaml(doc))
    dest.chmod(0o600)


def _write_files(s: settings_mod.Settings, tools: host.Tools, cgroup_root: str) -> None:
    p = paths(s)
    for d in (p.root, p.containerd_root, p.containerd_state, p.kubelet_dir, p.pod_logs, p.cni_conf,
              p.cni_data, p.sysctl_dir, p.root / "scheduler"):  # fmt: skip
        d.mkdir(parents=True, exist_ok=True)
    p.root.chmod(0o700)
    for name, value in config.KUBELET_SYSCTLS.items():
        (p.sysctl_dir / name.replace("/", ".")).write_text(value + "\n")
    (p.root / "containerd.toml").write_text(config.containerd_toml(p, tools.runc, tools.cni_bin))
    (p.cni_conf / "10-agentrun.conflist").write_text(config.dump_json(config.cni_conflist(p)))
    kcfg = config.kubelet_config(p, cgroup_root, s.pki_dir / "ca.crt")
    (p.root / "kubelet.yaml").write_text(config.dump_yaml(kcfg))
    (p.root / "holder.sh").write_text(config.holder_script(p))
    if not (p.root / "kubelet.kubeconfig").exists():
        server = f"https://{config.SERVICE_IP}:443"
        user = f"system:node:{config.NODE_NAME}"
        _kubeconfig(s, p.root / "kubelet.kubeconfig", server, user, ["system:nodes"])
    if not (p.root / "scheduler.kubeconfig").exists():
        _kubeconfig(s, p.root / "scheduler.kubeconfig", identities.server_url(s), "system:kube-scheduler", [])


def _ctr(s: settings_mod.Settings, bins: build.Binaries, *args: str) -> subprocess.CompletedProcess[str]:
    sock = str(paths(s).containerd_sock)
    return subprocess.run(
        [str(bins.ctr), "--address", sock, "--namespace", "k8s.io", *args],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def import_image(s: settings_mod.Settings, archive: Path) -> None:
    """Import an image archive (docker-archive or OCI) into the node's containerd."""
    res = _ctr(s, build.ensure(s), "images", "import", "--snapshotter", "overlayfs", str(archive))
    if res.returncode != 0:
        raise RuntimeError(f"ctr images import {archive} failed:\n{res.stderr or res.stdout}")


def _node_ready(s: settings_mod.Settings) -> bool:
    out = cluster.kubectl(
        s, "get", "node", config.NODE_NAME, "-o",
        "jsonpath={.status.conditions[?(@.type=='Ready')].status}", check=False, timeout=20,
    )  # fmt: skip
    return out.strip() == "True"


def up(s: settings_mod.Settings | None = None, out: TextIO = sys.stderr) -> None:
    s = s or settings_mod.from_env()
    t0 = time.monotonic()
    tools = host.preflight()
    for private in ("/run", "/var/log", "/var/lib"):
        if str(s.state_dir).startswith(private + "/"):
            raise host.HostError(
                f"AGENTRUN_DEV_HOME={s.state_dir} is under {private}, which the node's mount namespace "
                "replaces with a private tmpfs: put the dev state elsewhere"
            )
    cluster.up(s, out)
    bins = build.ensure(s, out)
    p = paths(s)
    root = cgroup_root(s)
    with state.locked(s):
        _write_files(s, tools, root)
        (p.root / "cgroup-root").write_text(root + "\n")
        host.ensure_cgroup_root(root, p.cgroup_record)
        holder_argv = [
            "unshare", "--mount", "--net", "--propagation", "private", "--",
            "bash", "-c", f"bash {p.root / 'holder.sh'} && exec -a {_marker(s, HOLDER)} sleep infinity",
        ]  # fmt: skip
        (p.root / "holder.sh").chmod(0o755)
        holder = _start(s, HOLDER, holder_argv, out, t0)
        # Set up once bash has exec'd the named sleep (argv[0] is the marker), not while holder.sh runs.
        _wait(s, HOLDER, lambda: procs._cmdline(holder)[:1] == [_marker(s, HOLDER)], 30, pid=holder)
        (p.root / "holder.mntns").write_text(os.readlink(f"/proc/{holder}/ns/mnt"))
        # The egress proxy (agentrun_dev.egress) dials kubelets from inside this holder's network namespace.
        (p.root / "holder.pid").write_text(f"{holder}\n")
        ports = cluster.ports(s)
        maps = [
            f"{config.SERVICE_IP}:443=127.0.0.1:{ports.apiserver}",
            f"{config.NODE_IP}:{ports.postgres}=127.0.0.1:{ports.postgres}",
            f"{config.NODE_IP}:{ports.smtp}=127.0.0.1:{ports.smtp}",
            f"{config.NODE_IP}:{ports.smtp_api}=127.0.0.1:{ports.smtp_api}",
        ]
        fwd_argv = [components.python(), "-m", "agentrun_dev.node.forward", "--netns",
                    f"/proc/{holder}/ns/net", *maps]  # fmt: skip
        _start(s, FORWARD, fwd_argv, out, t0)
        heal(s)  # left stopped by an interrupted partition(): the node would stay cut off
        enter = ["nsenter", "-t", str(holder), "-m", "-n", "--"]
        containerd_argv = config.containerd_argv(str(bins.containerd), p.root / "containerd.toml")
        containerd = _start(
            s, CONTAINERD, [*enter, *containerd_argv], out, t0, path_first=bins.containerd_dir
        )
        _wait(s, CONTAINERD, lambda: _ctr(s, bins, "version").returncode == 0, 60, pid=containerd)
        if config.PAUSE_IMAGE not in _ctr(s, bins, "images", "ls", "-q").stdout.split():
            archive = ociimage.write_pause(bins.pause, p.root / "pause.tar", config.PAUSE_IMAGE)
            import_image(s, archive)
            _say(out, t0, f"imported {config.PAUSE_IMAGE}")
        kubelet_argv = config.kubelet_argv(
            bins.kubelet, p, p.root / "kubelet.yaml", p.root / "kubelet.kubeconfig"
        )
        kubelet = _start(s, KUBELET, [*enter, *kubelet_argv], out, t0)
        sched_port = state.port(s, "kube-scheduler")
        sched = components.scheduler(
            bins.kube_scheduler, p.root / "scheduler.kubeconfig", sched_port, p.root / "scheduler"
        )
        scheduler = _start(s, SCHEDULER, sched, out, t0)
        _wait(s, KUBELET, lambda: _node_ready(s), 180, pid=kubelet)
        _wait(
            s, SCHEDULER,
            lambda: procs.http_ok(f"https://127.0.0.1:{sched_port}/healthz", procs.insecure_context()), 60,
            pid=scheduler,
        )  # fmt: skip
    _say(out, t0, f"node {config.NODE_NAME} is Ready (cgroup root {root})")


def status(s: settings_mod.Settings | None = None) -> list[PartStatus]:
    s = s or settings_mod.from_env()
    rows = []
    for name in PARTS:
        pid = _pid(s, name)
        ok = pid is not None
        if name == KUBELET and ok:
            ok = _node_ready(s)
        rows.append(PartStatus(name, pid, ok))
    return rows


def partition(s: settings_mod.Settings | None = None) -> int:
    """Cut the node off from the API server, Postgres and the SMTP sink; its processes keep running.

    The node's network namespace reaches the dev cluster only through ``node-forward``, so stopping that
    process (SIGSTOP) is a black-hole partition of the whole node — kubelet and every Pod: connections stay
    open and new ones are accepted by the kernel (listen backlog), but no byte crosses until :func:`heal`,
    which lets what was queued through late, as a healed network would. Not cut: the API server's own
    dials to the kubelet (``kubectl logs``, through the egress proxy). Returns the forwarder's pid."""
    s = s or settings_mod.from_env()
    pid = _pid(s, FORWARD)
    if pid is None:
        raise RuntimeError("node-forward is not running: agentrun dev up --node=real")
    os.kill(pid, signal.SIGSTOP)
    return pid


def heal(s: settings_mod.Settings | None = None) -> None:
    """End :func:`partition` (SIGCONT of the forwarder); a no-op when it is not stopped."""
    s = s or settings_mod.from_env()
    pid = _pid(s, FORWARD)
    if pid is not None:
        os.kill(pid, signal.SIGCONT)


def _mnt_ns_pids(ns: str) -> set[int]:
    out: set[int] = set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(d / "ns" / "mnt") == ns:
                    out.add(int(d.name))
    return out


def down(s: settings_mod.Settings | None = None, out: TextIO = sys.stderr) -> None:
    """Stop every process of the node and remove what it made (idempotent; also after a crash)."""
    s = s or settings_mod.from_env()
    p = paths(s)
    if not p.root.exists():
        return
    with state.locked(s):
        heal(s)  # a partitioned (stopped) forwarder would not answer its SIGTERM
        for name in (SCHEDULER, KUBELET):
            if procs.stop(s, name, _marker(s, name)):
                print(f"stopped {name}", file=out)
        root = cgroup_root(s)
        ns_file = p.root / "holder.mntns"
        ns = ns_file.read_text().strip() if ns_file.exists() else ""
        # Containers, shims, containerd: everything in the node's cgroups or its mount namespace.
        for _ in range(50):
            victims = host.cgroup_pids(root) | (_mnt_ns_pids(ns) if ns else set())
            victims.discard(os.getpid())
            if not victims:
                break
            for pid in victims:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
        for name in (CONTAINERD, HOLDER, FORWARD):
            if procs.stop(s, name, _marker(s, name), grace_s=5):
                print(f"stopped {name}", file=out)
        left = host.remove_cgroup_root(root, p.cgroup_record)
        if left:
            print(f"warning: cgroups not removed: {', '.join(left)}", file=out)
        ns_file.unlink(missing_ok=True)
        (p.root / "holder.pid").unlink(missing_ok=True)
        (p.root / "cgroup-root").unlink(missing_ok=True)
    if s.ports_file.exists() and state.port_is_listening(state.port(s, "apiserver")):
        cluster.kubectl(s, "delete", "node", config.NODE_NAME, "--ignore-not-found", "--wait=false",
                        check=False, timeout=30)  # fmt: skip
    print("node down", file=out)
