"""Step events packed into the stored form of ``agentrun_step_batches`` (migration 22): pure, no I/O.

Rule: this is the twin of the SQL function ``agentrun_pack_steps`` and must give the same arrays for the same
events (``tests/integration/test_step_batches.py`` pins them equal). The worker packs here, off the
database: ``record_steps`` then sends the arrays as they are stored, so the server neither parses JSON nor
sorts, aggregates or packs (the table's trigger packs only what is written in the plain form: the view's
insert, earlier releases' workers). Events are in step order; a batch holds at most ``MAX_EVENTS`` (the
view's id is batch id x 65,536 + position), so larger lists become several batches, each packed on its own
(its first gap 0, its numbers counted from 0).

Per event i: ``nodes[i]`` the step's name without a trailing ``:<integer>`` (written canonically, so the name
round-trips; else the whole name), ``step_deltas[i]`` its number minus the last number before it in the
batch (``None``: no number), ``gaps_us[i]`` microseconds from the end of event i-1 to the start of event i
(0 for the first; ``first_started_at`` is its start), durations and checkpoint write times in whole
microseconds. Arrays no event of the batch needs are ``None``.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Sequence
from typing import Any

from psycopg.types.json import Jsonb

MAX_EVENTS = 65536
_NUMBER = re.compile(r"0|-?[1-9][0-9]{0,8}")  # as agentrun_pack_steps: canonical, fits an integer
_US = datetime.timedelta(microseconds=1)


def split_step(step: str) -> tuple[str, int | None]:
    """'turn:17' -> ('turn', 17); a name without a canonical trailing number -> (name, None)."""
    node, colon, tail = step.rpartition(":")
    if colon and _NUMBER.fullmatch(tail):
        return node, int(tail)
    return step, None


def micros(seconds: float) -> int:
    """Seconds as whole microseconds (as the SQL side's ``round(s * 1e6)``)."""
    return round(seconds * 1e6)


def no_batch() -> dict[str, Any]:
    """The columns of a batch with no events (``record_steps`` then inserts none: the current step alone)."""
    return {"nodes": [], **dict.fromkeys(_OTHER_COLUMNS)}


_OTHER_COLUMNS = (  # what _pack_one returns beside "nodes"
    "step_deltas",
    "first_started_at",
    "gaps_us",
    "duration_us",
    "checkpoint_ids",
    "checkpoint_us",
    "effect_keys",
)


def pack(events: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The batches (column -> value) for ``events``, dicts of ``record_step_event``'s fields in step order."""
    return [_pack_one(events[i : i + MAX_EVENTS]) for i in range(0, len(events), MAX_EVENTS)]


def _pack_one(events: Sequence[dict[str, Any]]) -> dict[str, Any]:
    nodes: list[str] = []
    deltas: list[int | None] = []
    gaps: list[int] = []
    durations: list[int] = []
    last_number = 0
    previous_end: datetime.datetime | None = None
    for event in events:
        node, number = split_step(event["step"])
        nodes.append(node)
        if number is None:
            deltas.append(None)
        else:
            deltas.append(number - last_number)
            last_number = number
        started_at: datetime.datetime = event["started_at"]
        duration = micros(event["duration_seconds"])
        gaps.append(0 if previous_end is None else (started_at - previous_end) // _US)
        durations.append(duration)
        previous_end = started_at + duration * _US
    checkpoint_ids = [e.get("checkpoint_id") for e in events]
    checkpoint_seconds = [e.get("checkpoint_seconds") for e in events]
    effect_keys = [list(e.get("effect_keys") or []) for e in events]
    return {
        "nodes": nodes,
        "step_deltas": deltas,
        "first_started_at": events[0]["started_at"],
        "gaps_us": gaps,
        "duration_us": durations,
        "checkpoint_ids": checkpoint_ids if any(c is not None for c in checkpoint_ids) else None,
        "checkpoint_us": (
            [None if s is None else micros(s) for s in checkpoint_seconds]
            if any(s is not None for s in checkpoint_seconds)
            else None
        ),
        "effect_keys": Jsonb(effect_keys) if any(effect_keys) else None,
    }
