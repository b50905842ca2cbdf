"""``agentrun wait | retry | resolve | cancel | suspend | resume NAME`` (also ``kubectl agentrun …``):
steering runs as the user.

Rule: every verb is an ordinary API request made with the user's own credentials (KUBECONFIG): the API server
decides who may do it (RBAC verbs ``retry`` / ``resolve``, checked by
deploy/admission/steer-validating-policy.yaml)
and stamps who did; the operator applies the change once (Postgres decides) and records it. Nothing here
talks to Postgres.

Exit codes of ``wait``: 0 Succeeded · 1 Failed · 3 Cancelled · 4 timed out · 5 the CLI could not tell (the
run does not exist, access refused, the API server unreachable until the timeout) · 2 usage, as everywhere.
``wait`` rides out transient API errors (unreachable, 429, 5xx) until its timeout; a script can tell "the
run failed" from "we could not find out".
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from typing import Any

from agentrun import cluster
from agentrun_core.api import limits, meta
from agentrun_core.api import status as api_status

MULTI_COMMAND = True

_KEY = re.compile(r"^[a-z0-9][a-z0-9-]{0,127}$")
EXIT_FAILED, EXIT_CANCELLED, EXIT_TIMEOUT, EXIT_UNKNOWN = 1, 3, 4, 5


def _parser(verb: str, help_: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"agentrun {verb}", description=help_)
    p.add_argument("name", help="the AgentRun's name")
    p.add_argument("-n", "--namespace", help="namespace (default: the kubeconfig context's)")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    p.add_argument("--context", help="kubeconfig context")
    return p


def finished(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The Finished condition when True for the run's current generation (a retry just requested makes the
    old outcome stale until the operator has seen it), else None. Pure."""
    generation = int((obj.get("metadata") or {}).get("generation") or 0)
    for cond in (obj.get("status") or {}).get("conditions") or ():
        current = int(cond.get("observedGeneration") or 0) >= generation
        if cond.get("type") == api_status.FINISHED_CONDITION and cond.get("status") == "True" and current:
            return dict(cond)
    return None


def wait_exit_code(reason: str) -> int:
    return {api_status.SUCCEEDED: 0, api_status.CANCELLED: EXIT_CANCELLED}.get(reason, EXIT_FAILED)


def wait(argv: list[str]) -> int:
    p = _parser("wait", "wait until the run finished; exit 0 when it Succeeded, non-zero otherwise")
    p.add_argument("--timeout", type=float, default=0, help="seconds to wait (default: forever)")
    p.add_argument("--interval", type=float, default=1.0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    api, default_ns = cluster.connect(args.kubeconfig, args.context)
    namespace = args.namespace or default_ns
    deadline = time.monotonic() + args.timeout if args.timeout > 0 else None
    while True:
        try:
            obj = cluster.get_run(api, namespace, args.name)
        except cluster.CliError as exc:
            if not cluster.transient(exc) or (deadline is not None and time.monotonic() >= deadline):
                print(f"agentrun: {exc}", file=sys.stderr)
                return EXIT_UNKNOWN
            print(f"agentrun: {exc}; retrying", file=sys.stderr)
            time.sleep(min(max(args.interval, 1.0) * 2, 10.0))
            continue
        cond = finished(obj)
        if cond is not None:
            reason = str(cond.get("reason") or "")
            status = obj.get("status") or {}
            failed_reason = next(
                (
                    c.get("reason")
                    for c in status.get("conditions") or ()
                    if c.get("type") == reason and c.get("status") == "True"
                ),
                None,
            )
            why = f" ({failed_reason})" if reason == api_status.FAILED and failed_reason else ""
            message = cond.get("message") or status.get("message") or ""
            out = sys.stdout if reason == api_status.SUCCEEDED else sys.stderr
            print(f"agentrun/{args.name} {reason}{why}: {message}".rstrip(": "), file=out)
            return wait_exit_code(reason)
        if deadline is not None and time.monotonic() >= deadline:
            phase = (obj.get("status") or {}).get("phase") or api_status.PENDING
            print(
                f"agentrun/{args.name}: timed out after {args.timeout:g}s; still {phase}: "
                f"{(obj.get('status') or {}).get('message') or ''}".rstrip(": "),
                file=sys.stderr,
            )
            return EXIT_TIMEOUT
        time.sleep(args.interval)


def retry_patch(obj: dict[str, Any]) -> dict[str, Any]:
    """The spec patch that retries a stopped run: the next retry generation (and cancel off). Pure."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    phase = status.get("phase") or api_status.PENDING
    name = (obj.get("metadata") or {}).get("name")
    if phase not in api_status.RETRYABLE_PHASES:
        raise cluster.CliError(
            f"AgentRun {name} is {phase}: only a Failed (including needs-human) or Cancelled run "
            "can be retried"
        )
    current = max(int(spec.get("retryGeneration") or 0), int(status.get("retryGeneration") or 0))
    patch: dict[str, Any] = {"retryGeneration": current + 1}
    if spec.get("cancel"):
        patch["cancel"] = False
    return {"spec": patch}


def applied_retry(obj: dict[str, Any], generation: int) -> dict[str, Any] | None:
    """The ``status.interventions`` entry of retry ``generation`` once the operator applied it. Pure."""
    for entry in (obj.get("status") or {}).get("interventions") or ():
        if entry.get("kind") == "retry" and int(entry.get("generation") or 0) == generation:
            return dict(entry)
    return None


def retry_report(name: str, entry: dict[str, Any]) -> list[str]:
    """What an applied retry did with the run's failed effects (``applied_retry``'s entry). Pure."""
    rekeyed, kept = list(entry.get("rekeyed") or ()), list(entry.get("kept") or ())
    head = f"agentrun/{name} retry generation {entry.get('generation')} applied"
    if not rekeyed and not kept:
        return [f"{head}: no failed effect (nothing re-keyed)"]
    lines = [f"{head}:"]
    if rekeyed:
        lines.append(
            "  re-keyed (its failure proves nothing was performed: performed again under a new key): "
            + ", ".join(rekeyed)
        )
    if kept:
        lines.append(
            "  kept under its key (it may have been performed: pending again, settled by the tool's lookup "
            "or a provider that dedupes by key, else the run stops for you): " + ", ".join(kept)
        )
        lines += [f"    agentrun resolve {name} {key} --sent|--not-sent" for key in kept]
    return lines


def retry(argv: list[str]) -> int:
    p = _parser("retry", "retry a Failed / needs-human / Cancelled run from its last checkpoint")
    p.add_argument(
        "--image",
        help="run the retry with this worker image (the fixed code); the run is pinned to it from then on",
    )
    p.add_argument(
        "--wait",
        type=float,
        default=15.0,
        metavar="SECONDS",
        help="wait this long for the operator to apply the retry and report which failed effects it "
        "re-keyed and which it kept (default 15; 0: do not wait)",
    )
    args = p.parse_args(argv)
    api, default_ns = cluster.connect(args.kubeconfig, args.context)
    namespace = args.namespace or default_ns
    patch = retry_patch(cluster.get_run(api, namespace, args.name))
    if args.image:
        # Only with a retry: the CRD refuses an image change of a run otherwise
        # (agent_operator.decide.imagepin).
        patch["spec"]["worker"] = {"image": args.image}
    cluster.patch_run(api, namespace, args.name, patch, what=f"retry agentrun {args.name}")
    print(
        f"agentrun/{args.name} retry generation {patch['spec']['retryGeneration']} requested: the run "
        "resumes "
        "from its last checkpoint (effects already sent are not repeated)"
    )
    generation = int(patch["spec"]["retryGeneration"])
    deadline = time.monotonic() + max(0.0, args.wait)
    while args.wait > 0:
        entry = applied_retry(cluster.get_run(api, namespace, args.name), generation)
        if entry is not None:
            print("\n".join(retry_report(args.name, entry)))
            return 0
        if time.monotonic() >= deadline:
            print(
                f"agentrun/{args.name}: the operator has not applied retry generation {generation} within "
                f"{args.wait:g}s; its Retried event (kubectl describe agentrun {args.name}) and "
                "status.interventions will say which failed effects it re-keyed",
                file=sys.stderr,
            )
            return 0
        time.sleep(0.5)
    return 0


def resolve_annotations(key: str, sent: bool, result: str | None) -> dict[str, str | None]:
    """The annotations of a resolve request (validated). Pure."""
    if not _KEY.match(key):
        raise cluster.CliError(f"{key!r} is not an effect key (see `agentrun ledger NAME` for the keys)")
    text: str | None = None
    if result is not None:
        if not sent:
            raise cluster.CliError("--result goes with --sent (the effect's result as the tool returned it)")
        try:
            text = json.dumps(json.loads(result), separators=(",", ":"), sort_keys=True)
        except ValueError as exc:
            raise cluster.CliError(f"--result is not JSON: {exc}") from exc
        if len(text.encode()) > limits.RESOLVE_RESULT_MAX_BYTES:
            raise cluster.CliError(f"--result is larger than {limits.RESOLVE_RESULT_MAX_BYTES} bytes")
    return {meta.RESOLVE: f"{key}={'sent' if sent else 'not-sent'}", meta.RESOLVE_RESULT: text}


def resolve(argv: list[str]) -> int:
    p = _parser("resolve", "tell the ledger whether an effect of unknown outcome happened")
    p.add_argument("key", help="the effect's idempotency key (agentrun ledger NAME)")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--sent", action="store_true", help="it happened: the graph gets --result as its return"
    )
    which.add_argument(
        "--not-sent", action="store_true", help="it did not: the next attempt performs it once"
    )
    p.add_argument("--result", help="JSON: the tool's return value (with --sent; default null)")
    args = p.parse_args(argv)
    annotations = resolve_annotations(args.key, bool(args.sent), args.result)
    api, default_ns = cluster.connect(args.kubeconfig, args.context)
    namespace = args.namespace or default_ns
    cluster.get_run(api, namespace, args.name)  # a clear "not found" before annotating
    cluster.annotate(api, namespace, args.name, annotations)
    verdict = "sent" if args.sent else "not sent"
    print(
        f"agentrun/{args.name} effect {args.key} resolved as {verdict} (the operator records it and a "
        "needs-human run continues from its checkpoint)"
    )
    return 0


def cancel(argv: list[str]) -> int:
    p = _parser("cancel", "stop the run at a step boundary and mark it Cancelled")
    args = p.parse_args(argv)
    api, default_ns = cluster.connect(args.kubeconfig, args.context)
    namespace = args.namespace or default_ns
    cluster.patch_run(
        api, namespace, args.name, {"spec": {"cancel": True}}, what=f"cancel agentrun {args.name}"
    )
    print(f"agentrun/{args.name} cancel requested: the worker stops at a step boundary")
    return 0


def _set_suspend(verb: str, argv: list[str], suspend: bool) -> int:
    """``spec.suspend``: the operator stops the worker at a step boundary (phase Suspended) and starts a new
    attempt from the checkpoint once it is false again (agent_operator.decide.reconcile, stop requests)."""
    help_ = (
        "stop the run's worker at a step boundary and start none until resumed (spec.suspend)"
        if suspend
        else "let a suspended run continue from its checkpoint (spec.suspend: false)"
    )
    args = _parser(verb, help_).parse_args(argv)
    api, default_ns = cluster.connect(args.kubeconfig, args.context)
    namespace = args.namespace or default_ns
    obj = cluster.get_run(api, namespace, args.name)
    phase = (obj.get("status") or {}).get("phase") or api_status.PENDING
    if phase in api_status.FINAL_PHASES:
        raise cluster.CliError(f"AgentRun {args.name} is {phase}: there is nothing to {verb}")
    if bool((obj.get("spec") or {}).get("suspend")) == suspend:
        state = "suspended" if suspend else "not suspended"
        print(f"agentrun/{args.name} is already {state} (phase {phase})")
        return 0
    cluster.patch_run(
        api, namespace, args.name, {"spec": {"suspend": suspend}}, what=f"{verb} agentrun {args.name}"
    )
    if suspend:
        print(f"agentrun/{args.name} suspend requested: the worker stops at a step boundary")
    else:
        print(f"agentrun/{args.name} resumed: a new attempt continues from the last checkpoint")
    return 0


def suspend(argv: list[str]) -> int:
    return _set_suspend("suspend", argv, True)


def resume(argv: list[str]) -> int:
    return _set_suspend("resume", argv, False)


VERBS = {
    "wait": wait,
    "retry": retry,
    "resolve": resolve,
    "cancel": cancel,
    "suspend": suspend,
    "resume": resume,
}


def main(argv: list[str]) -> int:
    failed = EXIT_UNKNOWN if argv[:1] == ["wait"] else 1  # wait's exit codes say how the run ended
    return cluster.dispatch(argv, VERBS, f"agentrun {'|'.join(VERBS)} NAME [...]", failed=failed)
