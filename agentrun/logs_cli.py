"""``agentrun logs NAME [-f] [--attempt N]`` (also ``kubectl agentrun logs``): a worker Pod's log.

Rule: the log comes from the API server (``pods/log``, the same request ``kubectl logs`` makes, so RBAC on
``pods/log`` decides who may read it), never from a node or a file. Each attempt of a run is its own Pod
(``<name>-<attempt>``, labelled ``agentrun.dev/run`` and ``agentrun.dev/attempt``); without ``--attempt`` the
newest attempt's Pod is shown. A Pod that is gone (garbage-collected, TTL) has no log left: the trace
(``agentrun trace NAME``) still tells what that attempt did.

``-f`` without ``--attempt`` follows the run, not one Pod: when an attempt's worker exits and the operator
starts the next one by itself (after an eviction, an OOM kill, a lost Lease), the next attempt's log follows,
announced on stderr. It ends when no attempt will come without a human: the run finished, is suspended, or
waits for an approval.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from agentrun import cluster
from agentrun_core import kube
from agentrun_core.api import protocol
from agentrun_core.api import status as api_status

CONTAINER = "worker"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="agentrun logs", description="print the worker Pod's log of an attempt (newest by default)"
    )
    p.add_argument("name", help="the AgentRun's name")
    p.add_argument(
        "-f", "--follow", action="store_true", help="stream it, then the next attempts', until the run stops"
    )
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


# Phases in which the operator starts no further attempt by itself: a follow across attempts ends there.
_NO_NEXT_ATTEMPT = protocol.FINAL_PHASES | {api_status.SUSPENDED, api_status.WAITING_APPROVAL}


def next_attempt(found: dict[int, str], after: int, phase: str) -> tuple[int, str] | bool:
    """What a follow does after attempt ``after`` ended: the next attempt's (number, Pod) once it exists,
    False when none will come without a human (``phase``), True to look again. Pure."""
    newer = sorted(a for a in found if a > after)
    if newer:
        return newer[0], found[newer[0]]
    return phase not in _NO_NEXT_ATTEMPT


def _pods(api: kube.ApiClient, namespace: str, name: str, uid: str) -> dict[int, str]:
    listed = cluster.call(
        f"list the Pods of agentrun {name}",
        lambda: kube.pods.list_(api, namespace, label_selector=f"{protocol.LABEL_RUN}={name}"),
    )
    return attempt_pods(listed.get("items") or [], uid)


def _stream(
    api: kube.ApiClient, namespace: str, pod: str, *, follow: bool, tail: int | None, wait_for_start: float
) -> None:
    """Copy the log to stdout as it arrives. A Pod that is just starting has no log to serve yet (400 while
    its container waits, 404 before its log exists, a 5xx while its node has nothing to answer): asked again
    until ``wait_for_start`` seconds have passed (a follow into the next attempt)."""
    deadline = time.monotonic() + wait_for_start
    while True:
        try:
            resp = cluster.call(
                f"read the log of pod {pod}",
                lambda: kube.pods.log(api, namespace, pod, CONTAINER, follow=follow, tail=tail),
            )
            break
        except cluster.CliError as exc:
            starting = exc.status in (400, 404) or cluster.transient(exc)
            if not starting or time.monotonic() >= deadline:
                raise
            time.sleep(1.0)
    try:
        for chunk in resp.stream(4096):
            sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
    finally:
        resp.release_conn()


def run(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    api, default_ns = cluster.connect(args.kubeconfig, args.context)
    namespace = args.namespace or default_ns
    uid = cluster.get_run(api, namespace, args.name)["metadata"]["uid"]
    found = _pods(api, namespace, args.name, uid)
    pod = choose(found, args.attempt, args.name)
    attempt, tail, wait_for_start = next(a for a, p in found.items() if p == pod), args.tail, 0.0
    while True:
        _stream(api, namespace, pod, follow=args.follow, tail=tail, wait_for_start=wait_for_start)
        if not args.follow or args.attempt is not None:
            return 0
        while (step := _after(api, namespace, args.name, uid, attempt)) is True:
            time.sleep(1.0)
        if step is False:
            return 0
        attempt, pod = step
        tail, wait_for_start = None, 120.0
        print(f"agentrun: following attempt {attempt} (pod {pod})", file=sys.stderr, flush=True)


def _after(api: kube.ApiClient, namespace: str, name: str, uid: str, attempt: int) -> tuple[int, str] | bool:
    phase = str(
        (cluster.get_run(api, namespace, name).get("status") or {}).get("phase") or api_status.PENDING
    )
    step = next_attempt(_pods(api, namespace, name, uid), attempt, phase)
    if step is False:
        print(f"agentrun: {name} is {phase}: no further attempt starts by itself", file=sys.stderr)
    return step


def main(argv: list[str]) -> int:
    try:
        return run(argv)
    except cluster.CliError as exc:
        print(f"agentrun: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # ^C ends a follow, as with kubectl logs -f
        return 130
