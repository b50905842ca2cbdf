"""Run-deadline arithmetic on plain data: active time over attempts, progress, the verdict, the wake-up."""

from __future__ import annotations

import datetime

import pytest

from agentrun_core import deadline_math
from agentrun_core.api import status as api_status
from agentrun_core.deadline_math import Clock, Interval

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def test_active_time_excludes_gaps_between_attempts() -> None:
    # attempt 1 ran 10 s and parked; 100 s waiting for a human; attempt 2 runs since t=110
    attempts = [Interval(at(0), at(10)), Interval(at(110))]
    assert deadline_math.active_seconds(attempts, at(115)) == pytest.approx(15.0)
    assert deadline_math.active_seconds(attempts, at(5)) == pytest.approx(5.0)  # nothing counts past now
    assert deadline_math.active_seconds([], at(5)) == 0.0


def test_overlapping_attempts_count_once() -> None:
    # attempt 1's end was recorded after attempt 2 had started (the operator noticed the loss late)
    attempts = [Interval(at(0), at(12)), Interval(at(10), at(20))]
    assert deadline_math.active_seconds(attempts, at(30)) == pytest.approx(20.0)
    nested = [Interval(at(0), at(30)), Interval(at(5), at(10))]
    assert deadline_math.active_seconds(nested, at(40)) == pytest.approx(30.0)


def test_an_attempt_with_no_recorded_end_stops_counting_when_the_next_starts() -> None:
    # attempt 1's worker was killed before it could record its end; attempt 2 started at t=500: attempt 1
    # counts until then (never past it, never to now), attempt 2 from then
    attempts = [Interval(at(0)), Interval(at(500))]
    assert deadline_math.active_seconds(attempts, at(510)) == pytest.approx(510.0)
    assert deadline_math.active_seconds(attempts, at(300)) == pytest.approx(300.0)
    gap = [Interval(at(0)), Interval(at(500), at(520)), Interval(at(900))]
    assert deadline_math.active_seconds(gap, at(910)) == pytest.approx(500.0 + 20.0 + 10.0)


def test_reopening_restarts_the_count() -> None:
    attempts = [Interval(at(0), at(60)), Interval(at(100), reopens=True)]
    assert deadline_math.active_seconds(attempts, at(110)) == pytest.approx(10.0)
    verdict = deadline_math.check(Clock(at(110), tuple(attempts)), 30, None)
    assert verdict is None  # the first 60 s were the failed run's, before a human retried it


def test_active_deadline_verdict_and_wake() -> None:
    clock = Clock(at(25), (Interval(at(0), at(10)), Interval(at(20))))
    assert deadline_math.check(clock, 20, None) is None
    assert deadline_math.wake_in(clock, 20, None) == pytest.approx(5.0)  # 15 s counted, 5 s left
    late = Clock(at(30), clock.attempts)
    verdict = deadline_math.check(late, 20, None)
    assert verdict is not None and verdict.reason == api_status.DEADLINE_EXCEEDED
    assert "activeDeadlineSeconds=20" in verdict.message
    assert deadline_math.wake_in(late, 20, None) == 0.0


def test_no_clock_runs_while_no_attempt_does() -> None:
    parked = Clock(at(1000), (Interval(at(0), at(10)),), last_step_at=at(9))
    assert deadline_math.check(parked, 20, 5) is None  # parked 990 s: neither deadline counts it
    assert deadline_math.wake_in(parked, 20, 5) is None
    assert deadline_math.idle_seconds(parked) is None


def test_progress_counts_from_the_later_of_the_claim_and_last_step() -> None:
    # the attempt started at t=0, its worker claimed the run at t=12 (Pod start, imports), a step at t=40
    clock = Clock(at(50), (Interval(at(0)),), last_step_at=at(40), claimed_at=at(12))
    assert deadline_math.idle_seconds(clock) == pytest.approx(10.0)
    assert deadline_math.check(clock, None, 15) is None
    assert deadline_math.wake_in(clock, None, 15) == pytest.approx(5.0)
    stuck = Clock(at(56), clock.attempts, last_step_at=at(40), claimed_at=at(12))
    verdict = deadline_math.check(stuck, None, 15)
    assert verdict is not None and verdict.reason == api_status.PROGRESS_DEADLINE_EXCEEDED
    assert "progressDeadlineSeconds=15" in verdict.message
    # a step of an earlier attempt does not count against a new attempt (resumed after a park)
    resumed = Clock(
        at(230), (Interval(at(0), at(50)), Interval(at(200))), last_step_at=at(45), claimed_at=at(215)
    )
    assert deadline_math.idle_seconds(resumed) == pytest.approx(15.0)
    no_step = Clock(at(230), (Interval(at(200)),), claimed_at=at(203))
    assert deadline_math.idle_seconds(no_step) == pytest.approx(27.0)


def test_progress_is_not_measured_before_the_worker_claims_the_run() -> None:
    # a Pod that takes long to start is the start timeout's to judge, not the progress deadline's
    starting = Clock(at(100), (Interval(at(0)),))
    assert deadline_math.idle_seconds(starting) is None
    assert deadline_math.check(starting, None, 10) is None
    assert deadline_math.wake_in(starting, None, 10) is None
    # the claim of an earlier attempt does not count for the one starting now
    earlier = Clock(at(100), (Interval(at(0), at(50)), Interval(at(60))), claimed_at=at(5))
    assert deadline_math.idle_seconds(earlier) is None


def test_the_active_deadline_is_reported_first_and_wake_is_the_earliest() -> None:
    clock = Clock(at(100), (Interval(at(0)),), last_step_at=at(10), claimed_at=at(1))
    verdict = deadline_math.check(clock, 50, 30)
    assert verdict is not None and verdict.reason == api_status.DEADLINE_EXCEEDED
    running = Clock(at(20), (Interval(at(0)),), last_step_at=at(18), claimed_at=at(1))
    assert deadline_math.wake_in(running, 50, 30) == pytest.approx(28.0)  # progress: 30 - 2
    assert deadline_math.wake_in(running, 25, 30) == pytest.approx(5.0)  # active: 25 - 20


def test_no_deadline_no_verdict() -> None:
    clock = Clock(at(10**6), (Interval(at(0)),))
    assert deadline_math.check(clock, None, None) is None
    assert deadline_math.wake_in(clock, None, None) is None
