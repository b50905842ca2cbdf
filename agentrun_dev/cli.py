"""``agentrun dev …``: the local development cluster's command line."""

from __future__ import annotations

import argparse
import importlib
import shlex
import sys
import time
from pathlib import Path
from types import ModuleType

from agentrun_dev import cluster, controlplane, identities, procs, second_apiserver
from agentrun_dev import settings as settings_mod


def _usage_after_up(s: settings_mod.Settings) -> str:
    return (
        "\nUse it from a shell:\n"
        '  eval "$(agentrun dev env)"        # KUBECONFIG, AGENTRUN_DSN, AGENTRUN_SMTP_*, AGENTRUN_DEV_HOME\n'
        "  kubectl get nodes,ns\n"
        "  agentrun dev status | logs POD [-n NS] [-c C] [-f] | down [--purge]\n"
        f"State and logs: {s.state_dir}   Binaries: {s.controlplane_dir}\n"
    )


def _cmd_up(s: settings_mod.Settings, args: argparse.Namespace) -> int:
    t0 = time.monotonic()
    try:
        cluster.up(s)
        if getattr(args, "node", "local") == "real":
            _real_node().up(s)
    except controlplane.BuildError as exc:
        print(exc, file=sys.stderr)
        return 1
    except RuntimeError as exc:
        print(f"agentrun dev up: {exc}", file=sys.stderr)
        return 1
    print(f"dev cluster up in {time.monotonic() - t0:.1f}s", file=sys.stderr)
    print(_usage_after_up(s), file=sys.stderr)
    return 0


def _cmd_restart(s: settings_mod.Settings, args: argparse.Namespace) -> int:
    known = {p.name for p in cluster.parts(s)}
    unknown = set(args.parts) - known
    if unknown:
        print(
            f"unknown part(s) {', '.join(sorted(unknown))}; parts: {', '.join(sorted(known))}",
            file=sys.stderr,
        )
        return 2
    cluster.stop_parts(s, args.parts or sorted(known))
    return _cmd_up(s, args)


def _cmd_build(s: settings_mod.Settings, args: argparse.Namespace) -> int:
    try:
        b = controlplane.ensure(s, force=args.force)
    except controlplane.BuildError as exc:
        print(exc, file=sys.stderr)
        return 1
    for path in (b.etcd, b.kube_apiserver, b.kube_controller_manager):
        print(path)
    return 0


def _cmd_env(s: settings_mod.Settings, _: argparse.Namespace) -> int:
    for key, value in cluster.env(s).items():
        print(f"export {key}={shlex.quote(value)}")
    return 0


def _cmd_status(s: settings_mod.Settings, _: argparse.Namespace) -> int:
    rows = cluster.status(s)
    print(f"{'PART':<26}{'PID':>8}  {'PORT':>6}  HEALTHY")
    for r in rows:
        print(f"{r.name:<26}{r.pid or '-':>8}  {r.port or '-':>6}  {'yes' if r.healthy else 'NO'}")
    return 0 if all(r.healthy for r in rows) else 1


def _real_node() -> ModuleType:
    # Imported on use: the real node's module pulls in nothing the rest of the CLI needs.
    return importlib.import_module("agentrun_dev.node.lifecycle")


def _cmd_real_node(s: settings_mod.Settings, args: argparse.Namespace) -> int:
    lifecycle = _real_node()
    host = importlib.import_module("agentrun_dev.node.host")
    if args.action == "up":
        try:
            lifecycle.up(s)
        except (host.HostError, controlplane.BuildError, RuntimeError) as exc:
            print(f"agentrun dev real-node up: {exc}", file=sys.stderr)
            return 1
        return 0
    if args.action == "down":
        lifecycle.down(s)
        return 0
    if args.action in ("partition", "heal"):
        try:
            getattr(lifecycle, args.action)(s)
        except RuntimeError as exc:
            print(f"agentrun dev real-node {args.action}: {exc}", file=sys.stderr)
            return 1
        return 0
    rows = lifecycle.status(s)
    print(f"{'PART':<26}{'PID':>8}  HEALTHY")
    for r in rows:
        print(f"{r.name:<26}{r.pid or '-':>8}  {'yes' if r.healthy else 'NO'}")
    return 0 if all(r.healthy for r in rows) else 1


def _cmd_down(s: settings_mod.Settings, args: argparse.Namespace) -> int:
    if (s.state_dir / "node").exists():
        # The real node first (its namespaces, mounts, cgroups, processes), while the API server still runs.
        _real_node().down(s)
    second_apiserver.down(s)  # `agentrun dev apiserver up`'s, before the etcd they share
    cluster.down(s, purge=args.purge)
    return 0


def _cmd_logs(s: settings_mod.Settings, args: argparse.Namespace) -> int:
    pod_dir = s.pods_dir / args.namespace / args.pod
    logs = sorted(pod_dir.glob("*.log"))
    if args.container:
        path = pod_dir / f"{args.container}.log"
    elif len(logs) == 1:
        path = logs[0]
    elif not logs:
        print(f"no logs for pod {args.namespace}/{args.pod} (looked in {pod_dir})", file=sys.stderr)
        return 1
    else:
        names = ", ".join(p.stem for p in logs)
        print(
            f"pod {args.namespace}/{args.pod} has several containers; pick one with -c: {names}",
            file=sys.stderr,
        )
        return 2
    return _print_log(path, follow=args.follow)


def _print_log(path: Path, follow: bool) -> int:
    if not path.exists() and not follow:
        print(f"no log at {path}", file=sys.stderr)
        return 1
    while not path.exists():
        time.sleep(0.5)
    with open(path, "rb") as fh:
        while True:
            chunk = fh.read(65536)
            if chunk:
                sys.stdout.buffer.write(chunk)
                sys.stdout.buffer.flush()
                continue
            if not follow:
                return 0
            try:
                time.sleep(0.3)
            except KeyboardInterrupt:
                return 0


def _cmd_kubeconfig(s: settings_mod.Settings, args: argparse.Namespace) -> int:
    print(identities.kubeconfig_for(args.user, args.groups, s))
    return 0


def _cmd_apiserver(s: settings_mod.Settings, args: argparse.Namespace) -> int:
    """A second API server of another Kubernetes version (agentrun_dev.second_apiserver)."""
    if args.action == "down":
        second_apiserver.down(s)
        return 0
    if args.action == "build":
        try:
            print(controlplane.ensure_apiserver(s, args.version))
        except controlplane.BuildError as exc:
            print(exc, file=sys.stderr)
            return 1
        return 0
    try:
        path = second_apiserver.up(s, args.version)
    except (controlplane.BuildError, RuntimeError) as exc:
        print(exc, file=sys.stderr)
        return 1
    print(f"export KUBECONFIG={shlex.quote(str(path))}  # kube-apiserver {args.version}, admin")
    return 0


def _cmd_daemon_log(s: settings_mod.Settings, args: argparse.Namespace) -> int:
    return _print_log(procs.log_path(s, args.part), follow=args.follow)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="agentrun dev", description="The local development cluster.")
    sub = p.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser(
        "up", help="start (idempotently) etcd, kube-apiserver, controller-manager, Postgres, ..."
    )
    u.add_argument(
        "--node",
        choices=("local", "real"),
        default="local",
        help="real: also a real node (kubelet, containerd, runc, CNI), kube-scheduler; docs/dev/real-node.md",
    )
    rn = sub.add_parser(
        "real-node",
        help="the real node (kubelet, containerd, runc): up | down | status | partition | heal (a lost node)",
    )
    rn.add_argument("action", choices=("up", "down", "status", "partition", "heal"))
    r = sub.add_parser(
        "restart", help="restart some parts (e.g. pod-runtime after changing its code), or all"
    )
    r.add_argument("parts", nargs="*", metavar="PART")
    b = sub.add_parser("build", help="build (or locate) the control-plane binaries")
    b.add_argument("--force", action="store_true", help="rebuild even if cached")
    sub.add_parser("env", help='print shell exports (eval "$(agentrun dev env)")')
    sub.add_parser("status", help="each part: pid, port, healthy (exit 1 if any is not)")
    d = sub.add_parser("down", help="stop every part")
    d.add_argument("--purge", action="store_true", help="also delete all state (data, certs, logs)")
    lg = sub.add_parser("logs", help="a pod's container log, from the pod runtime")
    lg.add_argument("pod")
    lg.add_argument("-n", "--namespace", default="default")
    lg.add_argument("-c", "--container")
    lg.add_argument("-f", "--follow", action="store_true")
    k = sub.add_parser(
        "kubeconfig", help="mint a kubeconfig for USER in GROUPS (client cert from the dev CA)"
    )
    k.add_argument("user")
    k.add_argument("groups", nargs="*")
    dl = sub.add_parser("daemon-log", help="a dev-cluster process's own log (etcd, kube-apiserver, ...)")
    dl.add_argument("part")
    dl.add_argument("-f", "--follow", action="store_true")
    ap = sub.add_parser(
        "apiserver",
        help="a second kube-apiserver of another version (default "
        f"{second_apiserver.VERSION}) beside the dev cluster's, with deploy/admission-vap-only: "
        "build | up | down",
    )
    ap.add_argument("action", choices=("build", "up", "down"))
    ap.add_argument("--version", default=second_apiserver.VERSION, help="Kubernetes version, e.g. v1.34.4")
    sub.add_parser(
        "node", help="control the pod runtime's node (see `agentrun dev node --help`)", add_help=False
    )
    return p


_COMMANDS = {
    "up": _cmd_up, "restart": _cmd_restart, "build": _cmd_build, "env": _cmd_env, "status": _cmd_status,
    "down": _cmd_down, "real-node": _cmd_real_node, "logs": _cmd_logs, "kubeconfig": _cmd_kubeconfig,
    "daemon-log": _cmd_daemon_log, "apiserver": _cmd_apiserver,
}  # fmt: skip


def main(argv: list[str]) -> int:
    if argv and argv[0] == "node":
        # The pod runtime's own CLI (lost-node simulation etc.), owned by agentrun_dev.podruntime.
        control = importlib.import_module("agentrun_dev.podruntime.control")
        code: int = control.main(list(argv[1:]))
        return code
    args = _parser().parse_args(argv)
    return _COMMANDS[args.cmd](settings_mod.from_env(), args)
