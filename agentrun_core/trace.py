"""A run's timeline, built from plain data (the AgentRun's status and its Postgres rows); ``gather`` reads
those rows, everything else does no I/O. The CLI (with a DSN) and the operator's read API (as the namespace's
tenant role) build the same data.

The interesting part is re-runs: a step that ran in more than one attempt (a worker killed after the step's
effects but before its checkpoint, or code before an ``interrupt()`` re-running on resume). The ledger makes
its effects safe when the step asks for the same effects again (same idempotency keys: keys name an
effect's position, not its arguments). When the later attempt asked a position with other arguments
(``agentrun_effects.divergences``: the stored result was returned, nothing repeated), or asked for other
effects altogether (different keys), the step *diverged* from its earlier attempt, and the trace says which
keys and which arguments changed.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from agentrun_core import budget, store
from agentrun_core.store import connect


@dataclasses.dataclass(frozen=True)
class Inputs:
    resource: Mapping[str, Any]  # the AgentRun object as the API server returned it
    run: store.Run | None
    attempts: Sequence[store.Attempt]
    steps: Sequence[store.StepEvent]
    effects: Sequence[store.Effect]
    approvals: Sequence[store.Approval]
    interventions: Sequence[store.Intervention] = ()  # retries and resolved effects: who, when
    forks: Sequence[Mapping[str, Any]] = ()  # runs forked from this one (store.list_forks)
    # spec.budget: (attempt, node:step) -> (what its model calls spent, how many) (store.model_usage_by_step)
    usage: Mapping[tuple[int, str], tuple[budget.Usage, int]] = dataclasses.field(default_factory=dict)


def gather(resource: Mapping[str, Any], dsn: str, *, read_only: bool = False) -> Inputs:
    """The run's rows, read with ``dsn``'s role (RLS decides what it sees). ``read_only``: the session can
    write nothing (the read API's tenant connections). Raises ``connect.Error``."""
    run_id = str(resource["metadata"]["uid"])
    if read_only:
        dsn = connect.with_server_option(dsn, "-c default_transaction_read_only=on")
    with connect.connect(dsn, timeout_seconds=5) as conn:
        return Inputs(
            resource=resource,
            run=store.get_run(conn, run_id),
            attempts=store.list_attempts(conn, run_id),
            steps=store.list_step_events(conn, run_id),
            effects=store.list_effects(conn, run_id),
            approvals=store.list_approvals(conn, run_id),
            interventions=store.list_interventions(conn, run_id),
            forks=store.list_forks(conn, run_id),
            usage=store.model_usage_by_step(conn, run_id),
        )


@dataclasses.dataclass(frozen=True)
class Rerun:
    step: str
    attempts: list[int]  # attempts the step ran in, in order
    diverged: bool
    only_earlier: list[str]  # effect keys the earlier attempt asked for and the later did not
    only_later: list[str]
    arg_changes: list[dict[str, Any]]  # {action, occurrence, field, earlier, later}


def reruns(steps: Sequence[store.StepEvent], effects: Sequence[store.Effect]) -> list[Rerun]:
    by_step: dict[str, list[store.StepEvent]] = {}
    for ev in sorted(steps, key=lambda e: e.id):
        by_step.setdefault(ev.step, []).append(ev)
    by_key = {e.idempotency_key: e for e in effects}
    out = []
    for step, events in by_step.items():
        attempts = sorted({e.attempt for e in events})
        if len(attempts) < 2:
            continue
        first = set(events[0].effect_keys)
        only_earlier: set[str] = set()
        only_later: set[str] = set()
        shared: set[str] = set()
        for later in events[1:]:
            if later.attempt == events[0].attempt:
                continue
            keys = set(later.effect_keys)
            only_earlier |= first - keys
            only_later |= keys - first
            shared |= first & keys
        # Same position asked with other arguments: the row counted it and kept the later arguments.
        same_key = [by_key[k] for k in sorted(shared) if k in by_key and by_key[k].divergences]
        changes = arg_changes(
            [by_key[k] for k in sorted(only_earlier) if k in by_key],
            [by_key[k] for k in sorted(only_later) if k in by_key],
        )
        for e in same_key:
            changes += arg_changes([e], [dataclasses.replace(e, args=e.diverged_args)])
        out.append(
            Rerun(
                step=step,
                attempts=attempts,
                diverged=bool(only_earlier or only_later or same_key),
                only_earlier=sorted(only_earlier),
                only_later=sorted(only_later),
                arg_changes=changes,
            )
        )
    return out


def arg_changes(earlier: Sequence[store.Effect], later: Sequence[store.Effect]) -> list[dict[str, Any]]:
    """Pair effects of the same action and occurrence across the two sides and list the argument fields
    that differ (top level of the canonical arguments)."""
    changes = []
    for old in earlier:
        for new in later:
            if (old.action, old.occurrence) != (new.action, new.occurrence):
                continue
            a = old.args if isinstance(old.args, dict) else {"": old.args}
            b = new.args if isinstance(new.args, dict) else {"": new.args}
            for field in sorted(set(a) | set(b)):
                if a.get(field) != b.get(field):
                    changes.append(
                        {
                            "action": old.action,
                            "occurrence": old.occurrence,
                            "field": field,
                            "earlier": a.get(field),
                            "later": b.get(field),
                        }
                    )
    return changes


def _ts(value: datetime.datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def build(inp: Inputs) -> dict[str, Any]:
    """The whole trace as JSON-ready data (``--output json`` prints exactly this)."""
    meta = inp.resource.get("metadata", {})
    status = inp.resource.get("status", {}) or {}
    status_approvals = {a.get("id"): a for a in status.get("approvals", []) or []}
    return {
        "run": {
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "phase": status.get("phase"),
            "currentStep": status.get("currentStep"),
            "attempts": status.get("attempts"),
            "workerPod": status.get("workerPod"),
            "lease": status.get("lease"),
            "pendingApproval": status.get("pendingApproval"),
            "ledgerStatus": inp.run.status if inp.run else None,
            "error": inp.run.error if inp.run else None,
            "statusReason": inp.run.status_reason if inp.run else None,
            "admittedAt": _ts(inp.run.admitted_at) if inp.run else None,
            "finishedAt": _ts(inp.run.finished_at) if inp.run else None,
        },
        "attempts": [
            {
                "attempt": a.attempt,
                "pod": a.pod,
                "epoch": a.epoch,
                "startReason": a.start_reason,
                "startedAt": _ts(a.started_at),
                "endedAt": _ts(a.ended_at),
                "outcome": a.outcome,
                "detail": a.detail,
                # Lost to the control plane (API server, operator, Postgres), not counted in maxAttempts.
                "controlPlane": a.control_plane,
            }
            for a in sorted(inp.attempts, key=lambda a: a.attempt)
        ],
        "steps": [
            {
                "attempt": s.attempt,
                "step": s.step,
                "checkpointId": s.checkpoint_id,
                "startedAt": _ts(s.started_at),
                "durationSeconds": s.duration_seconds,
                "checkpointSeconds": s.checkpoint_seconds,  # timed by the saver around its write (steps.py)
                "effectKeys": list(s.effect_keys),
                **step_usage(inp.usage, s.attempt, s.step),
            }
            for s in sorted(inp.steps, key=lambda s: s.id)
        ],
        **total_usage(inp.usage),
        "effects": [
            effect_json(e) for e in sorted(inp.effects, key=lambda e: (e.created_at, e.idempotency_key))
        ],
        "approvals": [
            {
                "id": a.approval_id,
                "requestedAt": _ts(a.requested_at),
                "deadline": _ts(a.deadline),
                "decision": a.status,
                "by": a.decided_by or status_approvals.get(a.approval_id, {}).get("by"),
                "at": _ts(a.decided_at) or status_approvals.get(a.approval_id, {}).get("at"),
                "comment": a.comment,
                "deadlineAction": a.deadline_action,
                "prompt": a.prompt,
                "payload": a.payload,  # what the graph resumed with (type accept | edit | response | ignore)
            }
            for a in sorted(inp.approvals, key=lambda a: a.requested_at)
        ],
        "lineage": lineage(inp),
        "reruns": [dataclasses.asdict(r) for r in reruns(inp.steps, inp.effects)],
        "interventions": [
            {
                "kind": i.kind,
                "by": i.by,
                "at": _ts(i.at),
                "key": i.effect_key,
                "generation": i.generation,
                "fromStatus": i.from_status,
            }
            for i in inp.interventions
        ],
    }


def _usage_json(usage: budget.Usage, calls: int) -> dict[str, Any]:
    return {"calls": calls, **usage.to_json()}


def step_usage(
    usage: Mapping[tuple[int, str], tuple[budget.Usage, int]], attempt: int, step: str
) -> dict[str, Any]:
    """``{"modelUsage": ...}`` of a step event (``a,b:3`` sums ``a:3`` and ``b:3``); {} when none."""
    names, _, number = step.rpartition(":")
    found = [
        usage[(attempt, f"{n}:{number}")] for n in names.split(",") if (attempt, f"{n}:{number}") in usage
    ]
    if not found:
        return {}
    total = sum((u for u, _ in found), budget.Usage())
    return {"modelUsage": _usage_json(total, sum(c for _, c in found))}


def total_usage(usage: Mapping[tuple[int, str], tuple[budget.Usage, int]]) -> dict[str, Any]:
    """``{"modelUsage": ...}`` of the whole run, including calls of steps that never completed (a node killed,
    or parked at a limit, and re-run); {} when the run counted none."""
    if not usage:
        return {}
    total = sum((u for u, _ in usage.values()), budget.Usage())
    return {"modelUsage": _usage_json(total, sum(c for _, c in usage.values()))}


def lineage(inp: Inputs) -> dict[str, Any]:
    """Forks: where this run was forked from (``agentrun_runs.fork_of``) and the runs forked from it."""
    fork_of = inp.run.fork_of if inp.run else None
    return {
        "forkedFrom": {
            "run": fork_of.get("name"),
            "runUid": fork_of.get("run_id"),
            "checkpointId": fork_of.get("checkpoint_id"),
            "step": fork_of.get("step"),
            "set": sorted(fork_of.get("set") or {}),
        }
        if fork_of
        else None,
        "forks": [
            {
                "run": f["name"],
                "runUid": f["run_id"],
                "checkpointId": (f.get("fork_of") or {}).get("checkpoint_id"),
                "step": (f.get("fork_of") or {}).get("step"),
                "admittedAt": _ts(f.get("admitted_at")),
            }
            for f in inp.forks
        ],
    }


def effect_json(e: store.Effect) -> dict[str, Any]:
    return {
        "key": e.idempotency_key,
        "step": e.step,
        "action": e.action,
        "tool": e.tool,
        "occurrence": e.occurrence,
        "status": e.status,
        "needsHuman": e.needs_human,
        "notPerformed": e.not_performed,  # failed: the failure proves nothing was performed (retry re-keys)
        "attempts": e.attempts,
        "duplicatesPrevented": e.duplicates_prevented,
        "providerRef": e.provider_ref,
        "epoch": e.epoch,
        "argsHash": e.args_hash,
        "args": e.args,
        "keyVersion": e.key_version,
        "divergences": e.divergences,
        "divergedArgsHash": e.diverged_args_hash,
        "divergedArgs": e.diverged_args,
        "callDeadline": _ts(e.call_deadline),
        "error": e.error,
        "createdAt": _ts(e.created_at),
        "sentAt": _ts(e.sent_at),
        "confirmedAt": _ts(e.confirmed_at),
    }
