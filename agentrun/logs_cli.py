"""``agentrun logs NAME [-f] [--attempt N]`` (also ``kubectl agentrun logs``): a worker Pod's log.

Rule: the log comes from the API server (``pods/log``, the same request ``kubectl logs`` makes, so RBAC on
``pods/log`` decides who may read it), never from a node or a file. Each attempt of a run is its own Pod
(``<name>-<attempt>``, labelled ``agentrun.dev/run`` and ``agentrun.dev/attempt``); without ``--attempt`` the
newest attempt's Pod is shown. A Pod that is gone (garbage-collected, TTL) has no log left: the trace
(``agentrun trace NAME``) still tells what that attempt did.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from agentrun import cluster
from agentrun_core import kube, protocol

CONTAINER = "worker"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="agentrun logs", description="print the worker Pod's log of an attempt (newest by default)"
    )
    p.add_argument("name", help="the AgentRun's name")
    p.add_argument("-f", "--follow", action="store_true", help="stream the log until the worker exits")
    p.add_argument("--attempt", type=int, help="the attempt number (agentrun trace NAME lists them)")
    p.add_argument("--tail", type=int, help="only the last N lines")
    p.add_argument("-n", "--namespace", help="namespace (default: the kubeconfig context's)")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    p.add_argument("--context", help="kubeconfig context")
    return p


def attempt_pods(pods: list[dict[str, Any]], run_uid: str) -> dict[int, str]:
    """attempt -> Pod name, for the Pods of this run's uid (a deleted and recreated run of the same name
    has other Pods). Pure."""
    found: dict[int, str] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        owners = {o.get("uid") for o in meta.get("ownerReferences") or ()}
        if run_uid not in owners and labels.get(protocol.LABEL_RUN_UID) != run_uid:
            continue
        try:
            found[int(labels.get(protocol.LABEL_ATTEMPT, ""))] = str(meta["name"])
        except ValueError:
            continue
    return found


def choose(found: dict[int, str], attempt: int | None, name: str) -> str:
    if not found:
        raise cluster.CliError(f"AgentRun {name} has no worker Pod (not started yet, or its Pods are gone)")
    if attempt is None:
        return found[max(found)]
    if attempt not in found:
        have = ", ".join(str(a) for a in sorted(found))
        raise cluster.CliError(f"AgentRun {name} has no Pod for attempt {attempt} (Pods exist for: {have})")
    return found[attempt]


def run(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    api, default_ns = cluster.connect(args.kubeconfig, args.context)
    namespace = args.namespace or default_ns
    run_obj = cluster.get_run(api, namespace, args.name)
    listed = cluster.call(
        f"list the Pods of agentrun {args.name}",
        lambda: kube.pods.list_(api, namespace, label_selector=f"{protocol.LABEL_RUN}={args.name}"),
    )
    pod = choose(attempt_pods(listed.get("items") or [], run_obj["metadata"]["uid"]), args.attempt, args.name)
    resp = cluster.call(
        f"read the log of pod {pod}",
        lambda: kube.pods.log(api, namespace, pod, CONTAINER, follow=args.follow, tail=args.tail),
    )
    try:
        # Streamed as it arrives: with -f the worker's lines show while it runs.
        for chunk in resp.stream(4096):
            sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
    finally:
        resp.release_conn()
    return 0


def main(argv: list[str]) -> int:
    try:
        return run(argv)
    except cluster.CliError as exc:
        print(f"agentrun: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # ^C ends a follow, as with kubectl logs -f
        return 130
