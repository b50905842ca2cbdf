"""Step events and the current step: one statement per flush; async/exit flush at most once per interval."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from agent_worker import steps
from agentrun_core import store

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


class Saver:
    def __init__(self, timed: set[str]) -> None:
        self.timed = timed

    def write_seconds(self, checkpoint_id: str) -> float | None:
        return 0.001 if checkpoint_id in self.timed else None


def _recorder(monkeypatch: pytest.MonkeyPatch, batch: float, timed: set[str]) -> tuple[Any, list[Any]]:
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(store, "record_steps", lambda conn, **kw: calls.append(kw) or True)
    rec = steps.StepRecorder(
        None,  # type: ignore[arg-type]
        run_id="r",
        attempt=1,
        saver=Saver(timed),  # type: ignore[arg-type]
        epoch=3,
        batch_seconds=batch,
    )
    return rec, calls


def _add(rec: steps.StepRecorder, n: int) -> None:
    rec.add(
        step=f"s:{n}",
        checkpoint_id=f"cp{n}",
        started_at=NOW,
        duration_seconds=0.0,
        effect_keys=[],
        current_step=f"s{n}",
    )


def test_sync_writes_each_step_in_one_statement(monkeypatch: pytest.MonkeyPatch) -> None:
    rec, calls = _recorder(monkeypatch, 0.0, {"cp1", "cp2"})
    for n in (1, 2):
        _add(rec, n)
        rec.flush(final=False)
    assert [([e["step"] for e in c["events"]], c["current_step"], c["epoch"]) for c in calls] == [
        (["s:1"], "s1", 3),
        (["s:2"], "s2", 3),
    ]


def test_async_and_exit_batch_until_the_interval_or_the_end(monkeypatch: pytest.MonkeyPatch) -> None:
    rec, calls = _recorder(monkeypatch, steps.BATCH_SECONDS["exit"], {"cp3"})  # exit: only the last is timed
    for n in (1, 2, 3):
        _add(rec, n)
        rec.flush(final=False)
    assert calls == []  # no round trip per step
    rec.flush(final=True)
    (call,) = calls
    assert [(e["step"], e["checkpoint_seconds"]) for e in call["events"]] == [
        ("s:1", None),
        ("s:2", None),
        ("s:3", 0.001),
    ]
    assert call["current_step"] == "s3"
    rec.flush(final=True)
    assert len(calls) == 1  # nothing new: no statement
