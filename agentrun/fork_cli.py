"""``agentrun fork NAME (--step STEP | --checkpoint ID) --name NEW [--set PATH=TEXT] [--set-json PATH=JSON]``.

Rule: a fork is a new AgentRun created as the user (``create`` in the namespace; the admission policy
agentrun-fork also requires ``get`` on the source), with the source's spec and ``spec.forkOf`` naming the
source (name and uid), the checkpoint and the edits. The operator resolves all of it in Postgres, in the same
namespace only, and admits the fork with a copy of that checkpoint, or refuses it (``ForkRefused``: no such
checkpoint or step, an edit of a key the state does not have). This command waits for that verdict: refused,
it deletes the fork it created (nothing ran) and prints why; admitted, it prints where the fork starts.

Past a gate: a fork with edits, or from a checkpoint written after one of the source's approvals was decided,
sends what no approver saw unless its creator approves it: ``spec.forkOf.approve`` (``--approve``; edits
imply it), which the admission policy admits only with the RBAC verb ``approve`` on the source. Without it
the operator refuses a fork from after a decided approval; a fork from before the approval asks again.

Edits: ``--set draft.body=TEXT`` sets a string at a dotted state path; ``--set-json options.pause={"x":1}``
sets any JSON value. The fork's first worker applies them with LangGraph's ``update_state``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from typing import Any

from agentrun import cluster, stamps
from agentrun_core import kube
from agentrun_core.api import limits
from agentrun_core.api import status as api_status

NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,48}[a-z0-9])?$")  # AgentRun names: at most 50 (the CRD's rule)
PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*([.][A-Za-z_][A-Za-z0-9_]*){0,7}$")
CHECKPOINT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,63}$")
STEP = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]{0,127}$")
# Spec fields a fork does not inherit: steering of the source is not the fork's history.
NOT_INHERITED = ("retryGeneration", "cancel", "suspend", "forkOf")


def _edits(pairs: list[str], as_json: bool) -> dict[str, str]:
    """``PATH=VALUE`` pairs as the spec stores them (strings; JSON text for --set-json). Pure."""
    flag = "--set-json" if as_json else "--set"
    out: dict[str, str] = {}
    for pair in pairs:
        path, sep, value = pair.partition("=")
        if not sep:
            raise cluster.CliError(f"{flag} {pair!r}: expected PATH=VALUE (e.g. draft.body=Hello)")
        if not PATH.match(path):
            raise cluster.CliError(
                f"{flag} {path!r}: a state path is identifiers joined by dots (e.g. draft.body)"
            )
        if path in out:
            raise cluster.CliError(f"{flag} {path!r} given twice")
        if as_json:
            try:
                json.loads(value)
            except ValueError as exc:
                raise cluster.CliError(f"{flag} {path}: the value is not JSON: {exc}") from exc
        if len(value) > limits.FORK_VALUE_MAX_CHARS:
            raise cluster.CliError(
                f"{flag} {path}: the value is longer than {limits.FORK_VALUE_MAX_CHARS} characters"
            )
        out[path] = value
    return out


def fork_body(
    source: dict[str, Any],
    new_name: str,
    *,
    checkpoint: str | None,
    step: str | None,
    sets: dict[str, str],
    set_json: dict[str, str],
    approve: bool = False,
) -> dict[str, Any]:
    """The fork's AgentRun: the source's spec (minus its steering) and ``spec.forkOf``. Pure."""
    meta = source.get("metadata") or {}
    if not NAME.match(new_name):
        raise cluster.CliError(
            f"--name {new_name!r}: an AgentRun name is lower-case letters, digits and '-' (at most 50)"
        )
    if new_name == meta.get("name"):
        raise cluster.CliError("--name must name a new AgentRun, not the source")
    if checkpoint is not None and not CHECKPOINT.match(checkpoint):
        raise cluster.CliError(f"--checkpoint {checkpoint!r} is not a checkpoint id (see `agentrun trace`)")
    if step is not None and not STEP.match(step):
        raise cluster.CliError(f"--step {step!r} is not a step name (see `agentrun trace`)")
    both = sorted(set(sets) & set(set_json))
    if both:
        raise cluster.CliError(f"{', '.join(both)}: given with both --set and --set-json")
    spec = {k: v for k, v in (source.get("spec") or {}).items() if k not in NOT_INHERITED}
    fork: dict[str, Any] = {"run": meta.get("name"), "runUid": meta.get("uid")}
    fork.update({"checkpoint": checkpoint} if checkpoint is not None else {"step": step})
    if sets:
        fork["set"] = sets
    if set_json:
        fork["setJson"] = set_json
    if approve or sets or set_json:
        fork["approve"] = (
            True  # edits are the forker's decision: the admission policy wants `approve` for them
        )
    spec["forkOf"] = fork
    return {
        "apiVersion": f"{cluster.GROUP}/{cluster.VERSION}",
        "kind": "AgentRun",
        "metadata": {"name": new_name, "namespace": meta.get("namespace")},
        "spec": spec,
    }


def verdict(obj: dict[str, Any]) -> tuple[bool, str] | None:
    """(admitted, message) once the operator decided on the fork, else None. Pure."""
    status = obj.get("status") or {}
    if status.get("forkOf"):
        return True, str(status.get("message") or "admitted")
    for cond in status.get("conditions") or ():
        if cond.get("type") == api_status.FAILED and cond.get("status") == "True":
            return False, str(cond.get("message") or status.get("message") or "refused")
    return None


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="agentrun fork", description=__doc__.split("\n\n")[0])
    p.add_argument("name", help="the source AgentRun")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--checkpoint", help="a root checkpoint id of the source (agentrun trace)")
    where.add_argument("--step", help="fork after the latest completed step of this name")
    # --name, not --as: --as is kubectl's impersonation, a global option of the CLI (agentrun.cli).
    p.add_argument("--name", dest="new_name", required=True, help="the new AgentRun's name")
    p.add_argument("--set", action="append", default=[], metavar="PATH=TEXT", help="set a string")
    p.add_argument("--set-json", action="append", default=[], metavar="PATH=JSON", help="set a JSON value")
    p.add_argument(
        "--approve",
        action="store_true",
        help="approve what the fork carries: the source's decisions before the checkpoint, and the edits "
        "(implied by --set/--set-json; needs the RBAC verb approve on the source)",
    )
    p.add_argument("--timeout", type=float, default=120, help="seconds to wait for the operator's verdict")
    p.add_argument("-n", "--namespace", help="namespace (default: the kubeconfig context's)")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    p.add_argument("--context", help="kubeconfig context")
    args = p.parse_args(argv)
    try:
        return _fork(args)
    except cluster.CliError as exc:
        print(f"agentrun: {exc}", file=sys.stderr)
        return 1


def _fork(args: argparse.Namespace) -> int:
    sets, set_json = _edits(args.set, False), _edits(args.set_json, True)
    api, default_ns = cluster.connect(args.kubeconfig, args.context)
    ns = args.namespace or default_ns
    source = cluster.get_run(api, ns, args.name)
    body = fork_body(
        source,
        args.new_name,
        checkpoint=args.checkpoint,
        step=args.step,
        sets=sets,
        set_json=set_json,
        approve=args.approve,
    )
    body = stamps.created(body, cluster.identity(api))
    with cluster.translated(f"create agentrun {args.new_name} (a fork of {args.name})", ns):
        kube.runs.create(api, ns, body)
    deadline = time.monotonic() + args.timeout
    while True:
        decided = verdict(cluster.get_run(api, ns, args.new_name))
        if decided is not None:
            break
        if time.monotonic() >= deadline:
            print(
                f"agentrun/{args.new_name} created; the operator has not admitted it within "
                f"{args.timeout:g}s (see `kubectl describe ar/{args.new_name}`)",
                file=sys.stderr,
            )
            return 4
        time.sleep(0.5)
    admitted, message = decided
    if not admitted:
        with cluster.translated(f"delete agentrun {args.new_name}", ns, args.new_name):
            kube.runs.delete(api, ns, args.new_name, propagation=None)
        print(f"agentrun: {message} (the fork {args.new_name} was deleted: nothing ran)", file=sys.stderr)
        return 1
    start = args.checkpoint or f"after step {args.step}"
    edits = sorted([*sets, *set_json])
    print(
        f"agentrun/{args.new_name} forked from {args.name} ({start})"
        + (f" with edits {', '.join(edits)}" if edits else "")
        + "; it runs under its own run id (its own effects)"
    )
    return 0
