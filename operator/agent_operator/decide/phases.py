"""Phases, conditions (Kubernetes API conventions) and the status patch. Pure."""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from agentrun_core.api import limits
from agentrun_core.api import status as api_status

# The status vocabulary is the API's (agentrun_core.api.status); these names are how the operator reads it.

# Condition types always present (True/False), in this order; extra ones appear only while True.
# Finished is True for every final phase (reason = the outcome): `kubectl wait --for=condition=Finished`.

# Failure reasons (condition Failed, reason).

# Error texts/status reasons of the worker that mean "the spec cannot run" rather than "the graph failed".
_INVALID_SPEC_MARKERS = (
    "graphloaderror",  # agent_worker: a graph that cannot be loaded (fenced finish_run)
    "invalid_spec",
    "invalidspec",
    "unknown graph",
    "unknown_graph",
    "cannot import",
    "no module named",
    "has no attribute",
    "not a graph",
    "invalid graph",
)

# Bounds of spec.input, checked before admission (docs/operator.md): the API server accepts objects nested
# ~10,000 deep and ~1.4 MiB large, which the operator must survive but never runs; msgpack (checkpoints)
# refuses integers beyond 64 bits, so those are refused here rather than failing inside the graph.
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1


def iso(when: datetime.datetime | None) -> str | None:
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return when.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: object) -> datetime.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def is_invalid_spec(status_reason: str | None, error: str | None) -> bool:
    text = f"{status_reason or ''} {error or ''}".lower()
    return any(marker in text for marker in _INVALID_SPEC_MARKERS)


def conditions(
    previous: Sequence[Mapping[str, Any]] | None,
    desired: Mapping[str, tuple[bool, str, str]],
    generation: int,
    now: datetime.datetime,
) -> list[dict[str, Any]]:
    """Conditions from ``desired`` (type -> (status, reason, message)).

    ``lastTransitionTime`` changes only when a condition's status changes, as the conventions say;
    reason/message/observedGeneration are refreshed every time.
    """
    before = {str(c.get("type")): c for c in previous or () if c.get("type")}
    out: list[dict[str, Any]] = []
    for type_, (state, reason, message) in desired.items():
        status = "True" if state else "False"
        old = before.get(type_)
        if old is not None and old.get("status") == status and old.get("lastTransitionTime"):
            changed_at = str(old["lastTransitionTime"])
        else:
            changed_at = iso(now) or ""
        out.append(
            {
                "type": type_,
                "status": status,
                "reason": reason,
                "message": message,
                "observedGeneration": generation,
                "lastTransitionTime": changed_at,
            }
        )
    return out


def desired_conditions(
    phase: str,
    reason: str,
    message: str,
    *,
    admitted: bool,
    escalated: bool,
    read_only: bool,
) -> dict[str, tuple[bool, str, str]]:
    """The condition set for a phase. ``reason``/``message`` describe the phase's own condition."""
    running = phase == api_status.RUNNING
    waiting = phase == api_status.WAITING_APPROVAL
    desired: dict[str, tuple[bool, str, str]] = {
        api_status.ADMITTED: (
            admitted,
            api_status.ADMITTED if admitted else api_status.NOT_ADMITTED,
            "admission row written" if admitted else "waiting for admission",
        ),
        api_status.RUNNING: (running, reason if running else phase, message if running else f"phase {phase}"),
        api_status.WAITING_APPROVAL: (
            waiting,
            reason if waiting else api_status.NO_PENDING_APPROVAL,
            message if waiting else "",
        ),
        api_status.SUCCEEDED: (
            phase == api_status.SUCCEEDED,
            reason if phase == api_status.SUCCEEDED else phase,
            message if phase == api_status.SUCCEEDED else "",
        ),
        api_status.FAILED: (
            phase == api_status.FAILED,
            reason if phase == api_status.FAILED else phase,
            message if phase == api_status.FAILED else "",
        ),
    }
    final = phase in api_status.FINAL_PHASES
    desired[api_status.FINISHED_CONDITION] = (
        final,
        phase if final else api_status.NOT_FINISHED,
        message if final else f"phase {phase}",
    )
    if phase == api_status.CANCELLED:
        desired[api_status.CANCELLED] = (True, reason, message)
    if phase == api_status.SUSPENDED:
        desired[api_status.SUSPENDED] = (True, reason, message)
    if escalated and waiting:
        desired[api_status.APPROVAL_ESCALATED] = (
            True,
            api_status.DEADLINE_PASSED,
            "the pending approval is past its deadline",
        )
    if read_only:
        desired[api_status.READ_ONLY] = (
            True,
            api_status.APPROVAL_EXPIRED,
            "effects are refused: an approval expired (readOnly)",
        )
    return desired


def jsonable(value: Any) -> Any:
    """Datetimes → RFC 3339 strings, recursively; what the API server accepts in status."""
    if isinstance(value, datetime.datetime):
        return iso(value)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def status_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any] | None:
    """A JSON merge patch turning ``old`` into ``new`` at the top level; None when nothing changed.

    Keys gone from ``new`` become null (merge-patch deletion). Nested objects are replaced whole, which is
    right here: the operator is the only writer of status and always computes all of it.
    """
    patch: dict[str, Any] = {}
    for key, value in new.items():
        if old.get(key) != value:
            patch[key] = value
    for key in old:
        if key not in new:
            patch[key] = None
    return patch or None


# Valid JSON that the API server accepts, but neither Postgres's jsonb nor its text can hold (issue 35).
NUL_IN_INPUT = "spec.input holds the character U+0000 (NUL) in a string or a key, which Postgres cannot store"


def input_problem(value: Any) -> str | None:
    """Why ``spec.input`` cannot run (too deep, too large, an integer msgpack cannot carry, a character
    Postgres cannot store), or None.

    Iterative (an explicit stack), so a hostile depth costs memory, never a RecursionError.
    """
    stack: list[tuple[Any, int]] = [(value, 1)]
    size = 0
    while stack:
        item, depth = stack.pop()
        if depth > limits.INPUT_MAX_DEPTH:
            return f"spec.input is nested deeper than {limits.INPUT_MAX_DEPTH} levels"
        if isinstance(item, Mapping):
            if any("\x00" in str(k) for k in item):
                return NUL_IN_INPUT
            size += 2 + sum(len(str(k)) + 4 for k in item)
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list | tuple):
            size += 2 + len(item)
            stack.extend((v, depth + 1) for v in item)
        elif isinstance(item, bool) or item is None:
            size += 5
        elif isinstance(item, int):
            if not _INT_MIN <= item <= _INT_MAX:
                return f"spec.input holds an integer outside the 64-bit range: {str(item)[:40]}..."
            size += 20
        else:
            if isinstance(item, str) and "\x00" in item:
                return NUL_IN_INPUT
            size += len(str(item)) + 2
        if size > limits.INPUT_MAX_BYTES:
            return f"spec.input is larger than {limits.INPUT_MAX_BYTES // 1024} KiB"
    return None
