"""A run's timeline, built from plain data (the AgentRun's status and its Postgres rows). No I/O here.

The interesting part is re-runs: a step that ran in more than one attempt (a worker killed after the step's
effects but before its checkpoint, or code before an ``interrupt()`` re-running on resume). The ledger makes
its effects safe when the step asks for the same effects again (same idempotency keys); when it does not —
different keys, i.e. different arguments for the same action — the step *diverged* from its earlier attempt,
and the trace says which keys and which arguments changed.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from agent_worker import store


@dataclasses.dataclass(frozen=True)
class Inputs:
    resource: Mapping[str, Any]  # the AgentRun object as the API server returned it
    run: store.Run | None
    attempts: Sequence[store.Attempt]
    steps: Sequence[store.StepEvent]
    effects: Sequence[store.Effect]
    approvals: Sequence[store.Approval]


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
        for later in events[1:]:
            if later.attempt == events[0].attempt:
                continue
            keys = set(later.effect_keys)
            only_earlier |= first - keys
            only_later |= keys - first
        out.append(
            Rerun(
                step=step,
                attempts=attempts,
                diverged=bool(only_earlier or only_later),
                only_earlier=sorted(only_earlier),
                only_later=sorted(only_later),
                arg_changes=arg_changes(
                    [by_key[k] for k in sorted(only_earlier) if k in by_key],
                    [by_key[k] for k in sorted(only_later) if k in by_key],
                ),
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
                "checkpointSeconds": s.checkpoint_seconds,
                "effectKeys": list(s.effect_keys),
            }
            for s in sorted(inp.steps, key=lambda s: s.id)
        ],
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
            }
            for a in sorted(inp.approvals, key=lambda a: a.requested_at)
        ],
        "reruns": [dataclasses.asdict(r) for r in reruns(inp.steps, inp.effects)],
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
        "attempts": e.attempts,
        "duplicatesPrevented": e.duplicates_prevented,
        "providerRef": e.provider_ref,
        "epoch": e.epoch,
        "argsHash": e.args_hash,
        "args": e.args,
        "error": e.error,
        "createdAt": _ts(e.created_at),
        "sentAt": _ts(e.sent_at),
        "confirmedAt": _ts(e.confirmed_at),
    }
