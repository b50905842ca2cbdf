"""agent_operator.decide.schedule_plan.decide: every case of a schedule's reconcile, without I/O."""

from __future__ import annotations

import dataclasses
import datetime

import pytest

from agent_operator.decide import schedule_plan as plan
from agentrun_core.api import schedules

UTC = datetime.UTC


def at(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text + "+00:00")


CREATED = at("2026-01-01T00:00:30")
T1 = at("2026-01-01T00:01:00")
T2 = at("2026-01-01T00:02:00")
VIEW = plan.View(name="nightly", schedule="* * * * *", created=CREATED)


def run(name: str, phase: str = "Running", finished: str | None = None, **kw: object) -> plan.OwnedRun:
    return plan.OwnedRun(
        name=name,
        phase=phase,
        created=CREATED,
        finished=at(finished) if finished else None,
        **kw,  # type: ignore[arg-type]
    )


def tick_name(t: datetime.datetime) -> str:
    return schedules.tick_run_name("nightly", t)


def test_nothing_due_sleeps_until_the_next_tick() -> None:
    d = plan.decide(VIEW, at("2026-01-01T00:00:40"), [])
    assert d.create is None and d.record is None and d.events == ()
    assert d.next_tick == T1
    assert d.wake_after == pytest.approx(20.05)


def test_a_due_tick_creates_its_run_named_for_the_tick() -> None:
    d = plan.decide(VIEW, at("2026-01-01T00:01:00.5"), [])
    assert d.create == "nightly-29453761" == tick_name(T1)
    assert d.record == d.tick == T1
    assert d.active == ("nightly-29453761",)
    assert d.next_tick == T2
    assert d.events == ()


def test_the_last_recorded_tick_is_not_due_again() -> None:
    view = dataclasses.replace(VIEW, last_schedule=T1)
    d = plan.decide(view, at("2026-01-01T00:01:30"), [run(tick_name(T1))])
    assert d.create is None and d.record is None


def test_a_run_that_exists_already_is_recorded_not_created() -> None:
    # the operator died after creating it (or another replica created it): no second run, no cancel
    for policy in plan.POLICIES:
        view = dataclasses.replace(VIEW, policy=policy)
        d = plan.decide(view, at("2026-01-01T00:01:05"), [run(tick_name(T1)), run("nightly-manual-abcd")])
        assert d.create is None and d.cancel == () and d.record == T1, policy


def test_missed_ticks_only_the_latest_runs_with_a_warning() -> None:
    d = plan.decide(VIEW, at("2026-01-01T00:05:10"), [])
    assert d.create == tick_name(at("2026-01-01T00:05:00"))
    assert [(e.type, e.reason) for e in d.events] == [("Warning", "MissedSchedule")]
    assert "4 earlier tick(s)" in d.events[0].message


def test_past_the_starting_deadline_the_tick_is_skipped_and_recorded_as_skipped() -> None:
    view = dataclasses.replace(VIEW, starting_deadline=30)
    d = plan.decide(view, at("2026-01-01T00:01:31"), [])
    assert d.create is None and d.record is None and d.skipped == T1
    assert [(e.reason, e.key) for e in d.events] == [("MissedSchedule", "late:2026-01-01T00:01:00Z")]
    assert "31s late" in d.events[0].message
    # within the deadline it runs, late
    d = plan.decide(view, at("2026-01-01T00:01:30"), [])
    assert d.create == tick_name(T1)
    # once skipped, the same tick is not looked at again
    d = plan.decide(dataclasses.replace(view, last_skipped=T1), at("2026-01-01T00:01:40"), [])
    assert d.create is None and d.skipped is None and d.events == ()


def test_deadline_zero_means_on_time_or_never() -> None:
    view = dataclasses.replace(VIEW, starting_deadline=0)
    assert plan.decide(view, T1, []).create == tick_name(T1)
    assert plan.decide(view, at("2026-01-01T00:01:01"), []).skipped == T1


def test_allow_starts_alongside_an_active_run() -> None:
    d = plan.decide(VIEW, at("2026-01-01T00:01:01"), [run("nightly-manual-abcd")])
    assert d.create == tick_name(T1) and d.cancel == ()
    assert d.active == ("nightly-manual-abcd", tick_name(T1))


@pytest.mark.parametrize("phase", ["", "Pending", "Running", "WaitingApproval", "Suspended"])
def test_forbid_waits_while_a_run_is_active(phase: str) -> None:
    view = dataclasses.replace(VIEW, policy="Forbid")
    d = plan.decide(view, at("2026-01-01T00:01:01"), [run("nightly-manual-abcd", phase)])
    assert d.create is None and d.record is None and d.skipped is None
    assert [e.reason for e in d.events] == ["RunAlreadyActive"]
    assert d.wake_after == pytest.approx(59.05)  # the next tick (or the run's end wakes it)


def test_forbid_starts_the_waiting_tick_once_the_active_run_ended() -> None:
    view = dataclasses.replace(VIEW, policy="Forbid", starting_deadline=40)
    ended = [run("nightly-manual-abcd", "Succeeded", "2026-01-01T00:01:20")]
    assert plan.decide(view, at("2026-01-01T00:01:20"), ended).create == tick_name(T1)
    # a waiting tick wakes at its deadline, and past it is skipped
    waiting = plan.decide(view, at("2026-01-01T00:01:10"), [run("nightly-manual-abcd")])
    assert waiting.wake_after == pytest.approx(30.05)
    assert plan.decide(view, at("2026-01-01T00:01:41"), ended).skipped == T1


@pytest.mark.parametrize("phase", ["Succeeded", "Failed", "Cancelled"])
def test_forbid_and_replace_ignore_finished_runs(phase: str) -> None:
    for policy in ("Forbid", "Replace"):
        view = dataclasses.replace(VIEW, policy=policy)
        d = plan.decide(view, at("2026-01-01T00:01:01"), [run("old", phase, "2026-01-01T00:00:50")])
        assert d.create == tick_name(T1) and d.cancel == ()


def test_replace_cancels_the_active_runs_and_starts_the_tick() -> None:
    view = dataclasses.replace(VIEW, policy="Replace")
    runs = [
        run("a"),
        run("b", "WaitingApproval"),
        run("c", cancel_requested=True),
        run("d", "Failed", "2026-01-01T00:00:50"),
    ]
    d = plan.decide(view, at("2026-01-01T00:01:01"), runs)
    assert d.cancel == ("a", "b")  # c is being cancelled already, d ended
    assert d.create == tick_name(T1) and d.record == T1


def test_suspend_starts_nothing_and_resume_runs_the_latest_missed_tick() -> None:
    view = dataclasses.replace(VIEW, suspend=True)
    d = plan.decide(view, at("2026-01-01T00:03:01"), [])
    assert d.create is None and d.record is None and d.events == ()
    assert d.wake_after == plan.MAX_SLEEP_SECONDS and d.next_tick == at("2026-01-01T00:04:00")
    resumed = plan.decide(dataclasses.replace(view, suspend=False), at("2026-01-01T00:03:01"), [])
    assert resumed.create == tick_name(at("2026-01-01T00:03:00"))


def test_history_limits_delete_the_oldest_finished_runs() -> None:
    view = dataclasses.replace(VIEW, successful_limit=2, failed_limit=1, last_schedule=T1)
    runs = [
        run("s1", "Succeeded", "2026-01-01T00:00:10"),
        run("s2", "Succeeded", "2026-01-01T00:00:20"),
        run("s3", "Succeeded", "2026-01-01T00:00:30"),
        run("f1", "Failed", "2026-01-01T00:00:10"),
        run("c1", "Cancelled", "2026-01-01T00:00:20"),
        run("r1", "Running"),
    ]
    d = plan.decide(view, at("2026-01-01T00:01:30"), runs)
    assert d.delete == ("f1", "s1")
    assert d.last_successful == at("2026-01-01T00:00:30")
    zero = dataclasses.replace(view, successful_limit=0, failed_limit=0)
    assert plan.decide(zero, at("2026-01-01T00:01:30"), runs).delete == ("c1", "f1", "s1", "s2", "s3")


def test_last_successful_time_survives_the_history_limit() -> None:
    view = dataclasses.replace(VIEW, last_successful=at("2026-01-01T00:00:50"), last_schedule=T1)
    assert plan.decide(view, at("2026-01-01T00:01:30"), []).last_successful == at("2026-01-01T00:00:50")


@pytest.mark.parametrize(("expr", "zone"), [("61 * * * *", ""), ("* * * * *", "Nowhere/Atlantis")])
def test_an_invalid_schedule_starts_nothing_and_says_why(expr: str, zone: str) -> None:
    view = dataclasses.replace(VIEW, schedule=expr, time_zone=zone)
    d = plan.decide(view, at("2026-01-01T00:05:00"), [run("x", "Succeeded", "2026-01-01T00:00:50")] * 0)
    assert d.invalid and d.create is None and d.next_tick is None
    assert [(e.type, e.reason) for e in d.events] == [("Warning", "InvalidSchedule")]
    assert d.wake_after == plan.MAX_SLEEP_SECONDS


def test_the_time_zone_decides_the_tick() -> None:
    view = dataclasses.replace(VIEW, schedule="0 9 * * *", time_zone="Asia/Tokyo")  # 00:00 UTC
    d = plan.decide(view, at("2026-01-02T00:00:01"), [])
    assert d.create == tick_name(at("2026-01-02T00:00:00"))
    assert d.next_tick == at("2026-01-03T00:00:00")


def test_a_clock_far_behind_the_creation_never_looks_before_it() -> None:
    d = plan.decide(VIEW, at("2025-12-31T23:59:59"), [])
    assert d.create is None and d.next_tick == at("2026-01-01T00:00:00")


def test_never_sleeps_longer_than_an_hour() -> None:
    view = dataclasses.replace(VIEW, schedule="@yearly")
    assert plan.decide(view, at("2026-01-01T00:05:00"), []).wake_after == plan.MAX_SLEEP_SECONDS
