"""step_packing: the stored form of a batch of step events (migration 22), pure. That it matches the SQL
twin, agentrun_pack_steps, is tested against Postgres (tests/integration/test_step_batches.py)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from agentrun_core.store import step_packing

T0 = datetime.datetime(2026, 12, 5, 6, 0, tzinfo=datetime.UTC)
US = datetime.timedelta(microseconds=1)


@pytest.mark.parametrize(
    ("step", "split"),
    [
        ("turn:17", ("turn", 17)),
        ("a:b:3", ("a:b", 3)),
        (":5", ("", 5)),
        ("x:0", ("x", 0)),
        ("x:-1", ("x", -1)),
        ("x:-999999999", ("x", -999999999)),
        ("x:007", ("x:007", None)),  # not canonical: kept whole, so it round-trips
        ("y:-0", ("y:-0", None)),
        ("n:9999999999", ("n:9999999999", None)),  # past an integer
        ("x:", ("x:", None)),
        ("x:1e3", ("x:1e3", None)),
        ("x:١٢", ("x:١٢", None)),  # non-ASCII digits are not a number here, as in SQL
        ("plain", ("plain", None)),
        ("", ("", None)),
    ],
)
def test_a_step_name_splits_only_at_a_canonical_trailing_number(
    step: str, split: tuple[str, int | None]
) -> None:
    assert step_packing.split_step(step) == split
    node, number = split
    assert (node if number is None else f"{node}:{number}") == step


def _event(step: str, start_us: int, duration_us: int, **extra: Any) -> dict[str, Any]:
    return {
        "step": step,
        "started_at": T0 + start_us * US,
        "duration_seconds": duration_us / 1e6,
        "checkpoint_id": None,
        "checkpoint_seconds": None,
        "effect_keys": [],
        **extra,
    }


def test_numbers_become_differences_and_starts_gaps() -> None:
    events = [
        _event("turn:4", 0, 300),
        _event("plain", 310, 5),  # no number: the next difference counts from 4
        _event("turn:6", 300, 1_000),  # starts before the one before it ended: a negative gap
        _event("turn:5", 2_000, 0),
    ]
    (batch,) = step_packing.pack(events)
    assert batch["nodes"] == ["turn", "plain", "turn", "turn"]
    assert batch["step_deltas"] == [4, None, 2, -1]
    assert batch["first_started_at"] == T0
    assert batch["gaps_us"] == [0, 10, -15, 700]
    assert batch["duration_us"] == [300, 5, 1_000, 0]
    # Arrays no event needs are not sent.
    assert batch["checkpoint_ids"] is None and batch["checkpoint_us"] is None and batch["effect_keys"] is None


def test_checkpoints_and_effect_keys_are_kept_per_event_when_any_has_one() -> None:
    events = [
        _event("a:1", 0, 1),
        _event("a:2", 1, 1, checkpoint_id="cp", checkpoint_seconds=0.0004567891, effect_keys=("k",)),
    ]
    (batch,) = step_packing.pack(events)
    assert batch["checkpoint_ids"] == [None, "cp"]
    assert batch["checkpoint_us"] == [None, 457]
    assert batch["effect_keys"].obj == [[], ["k"]]


def test_more_events_than_a_batch_holds_become_batches_packed_each_on_its_own() -> None:
    n = step_packing.MAX_EVENTS + 2
    events = [_event(f"s:{i}", 20 * i, 10) for i in range(n)]
    first, second = step_packing.pack(events)
    assert len(first["nodes"]) == step_packing.MAX_EVENTS and len(second["nodes"]) == 2
    assert second["step_deltas"] == [step_packing.MAX_EVENTS, 1]  # counted from 0 again
    assert (
        second["gaps_us"] == [0, 10] and second["first_started_at"] == T0 + 20 * step_packing.MAX_EVENTS * US
    )
    assert step_packing.pack([]) == []


def test_no_batch_has_the_columns_of_a_batch() -> None:
    (batch,) = step_packing.pack([_event("a:1", 0, 1)])
    assert step_packing.no_batch().keys() == batch.keys()
    assert step_packing.no_batch()["nodes"] == []
