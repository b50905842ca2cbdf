"""Lease arithmetic on plain data: observed-time expiry, renew schedule, epochs."""

from __future__ import annotations

import datetime

import pytest

from agentrun_core import kube, lease_math
from agentrun_core.lease_math import LeaseObserver, LeaseState, LeaseSummary


def held(holder: str = "pod-a", rv: str = "1", renew: str = "t1", duration: float = 10.0) -> LeaseSummary:
    return LeaseSummary(
        holder=holder, transitions=3, duration_seconds=duration, renew_time=renew, resource_version=rv
    )


def test_schedule_fractions() -> None:
    assert lease_math.renew_interval(15) == pytest.approx(5.0)
    assert lease_math.renew_deadline(15) == pytest.approx(10.0)
    # The deadline leaves at least a full renew interval of margin before anyone may take the Lease.
    for d in (1, 2, 3, 15, 60):
        assert lease_math.renew_interval(d) < lease_math.renew_deadline(d) < d
        assert d - lease_math.renew_deadline(d) >= lease_math.renew_interval(d) - 1e-9
        assert lease_math.retry_delay(d) < lease_math.renew_deadline(d) - lease_math.renew_interval(d)


def test_may_act_window() -> None:
    assert not lease_math.may_act(None, 100.0, 15)
    assert lease_math.may_act(100.0, 100.0, 15)
    assert lease_math.may_act(100.0, 109.9, 15)
    assert not lease_math.may_act(100.0, 110.0, 15)
    assert not lease_math.presumed_lost(100.0, 114.9, 15)
    assert lease_math.presumed_lost(100.0, 115.0, 15)


def test_expiry_is_judged_by_observed_time_not_renew_time() -> None:
    # renewTime from a holder whose clock is a year behind ours: irrelevant, only our observations count.
    obs = LeaseObserver()
    ancient = held(renew="2025-01-01T00:00:00.000000Z")
    assert obs.observe(ancient, now=1000.0) == LeaseState.HELD
    assert obs.observe(ancient, now=1009.9) == LeaseState.HELD
    assert obs.observe(ancient, now=1010.0) == LeaseState.HELD  # strictly longer than the duration
    assert obs.observe(ancient, now=1010.1) == LeaseState.EXPIRED
    assert obs.state(1010.1) == "expired"


def test_any_change_restarts_the_timer() -> None:
    obs = LeaseObserver()
    assert obs.observe(held(rv="1", renew="t1"), now=0.0) == LeaseState.HELD
    assert obs.observe(held(rv="2", renew="t2"), now=9.0) == LeaseState.HELD  # a renewal
    assert obs.observe(held(rv="2", renew="t2"), now=18.0) == LeaseState.HELD  # 9 s since the renewal
    assert obs.unchanged_for(18.0) == pytest.approx(9.0)
    assert obs.expires_in(18.0) == pytest.approx(1.0)
    # A write that is not a renewal (a label edit: same renewTime, new resourceVersion) also restarts it:
    assert obs.observe(held(rv="3", renew="t2"), now=19.5) == LeaseState.HELD
    assert obs.observe(held(rv="3", renew="t2"), now=29.6) == LeaseState.EXPIRED


def test_a_new_holder_restarts_the_timer() -> None:
    obs = LeaseObserver()
    obs.observe(held(holder="pod-a", rv="1"), now=0.0)
    assert obs.observe(held(holder="pod-a", rv="1"), now=11.0) == LeaseState.EXPIRED
    assert obs.observe(held(holder="pod-b", rv="2"), now=11.5) == LeaseState.HELD


def test_fresh_observer_waits_a_full_duration() -> None:
    # A second observer (e.g. a restarted operator) starts from scratch even though the first one
    # already watched the same version for a long time.
    first, second = LeaseObserver(), LeaseObserver()
    lease = held()
    first.observe(lease, now=0.0)
    assert first.observe(lease, now=50.0) == LeaseState.EXPIRED
    assert second.observe(lease, now=50.0) == LeaseState.HELD
    assert second.observe(lease, now=60.5) == LeaseState.EXPIRED


def test_free_and_absent() -> None:
    obs = LeaseObserver()
    assert obs.observe(None, now=0.0) == LeaseState.FREE
    assert obs.expires_in(0.0) is None
    released = LeaseSummary(
        holder="", transitions=4, duration_seconds=10, renew_time="t", resource_version="9"
    )
    assert obs.observe(released, now=1.0) == LeaseState.FREE
    assert obs.observe(released, now=100.0) == LeaseState.FREE


def test_duration_comes_from_the_lease_else_default() -> None:
    obs = LeaseObserver(default_duration_seconds=5.0)
    no_duration = LeaseSummary(holder="pod-a", transitions=1, resource_version="1")
    obs.observe(no_duration, now=0.0)
    assert obs.duration() == 5.0
    assert obs.state(5.1) == LeaseState.EXPIRED
    obs2 = LeaseObserver(default_duration_seconds=5.0)
    obs2.observe(held(duration=30.0), now=0.0)
    assert obs2.state(29.0) == LeaseState.HELD


def test_summary_from_json_body() -> None:
    body = {
        "metadata": {"name": "agentrun-x", "resourceVersion": "412"},
        "spec": {
            "holderIdentity": "pod-a",
            "leaseDurationSeconds": 15,
            "leaseTransitions": 7,
            "renewTime": "2026-12-02T17:16:01.000000Z",
        },
    }
    s = LeaseSummary.from_body(body)
    assert s == LeaseSummary("pod-a", 7, 15.0, "2026-12-02T17:16:01.000000Z", "412")
    assert not s.free
    empty = LeaseSummary.from_body({"metadata": {}, "spec": {"holderIdentity": ""}})
    assert empty.free and empty.transitions == 0 and empty.duration_seconds is None


@pytest.mark.parametrize(
    ("current", "me", "min_epoch", "expected"),
    [
        (None, "a", 0, 1),  # created: epoch 1, never the database default 0
        (LeaseSummary("", 0), "a", 0, 1),  # free, never held
        (LeaseSummary("", 4), "a", 0, 5),  # released by someone (or by us): a change of holder
        (LeaseSummary("b", 4), "a", 0, 5),  # expired holder b
        (LeaseSummary("a", 4), "a", 0, 4),  # already ours: no transition
        (LeaseSummary("a", 4), "a", 5, 5),  # ... unless the caller demands a fresh epoch
        (None, "a", 8, 8),  # re-created Lease must not reuse epochs the run already saw
        (LeaseSummary("b", 2), "a", 8, 8),
    ],
)
def test_next_transitions(current: LeaseSummary | None, me: str, min_epoch: int, expected: int) -> None:
    assert lease_math.next_transitions(current, me, min_epoch) == expected


def test_micro_time_always_has_six_fraction_digits() -> None:
    # MicroTime parsing on the API server wants exactly six digits; isoformat() drops them at .000000.
    whole = datetime.datetime(2026, 12, 2, 17, 16, 1, tzinfo=datetime.UTC)
    assert kube.micro_time(whole) == "2026-12-02T17:16:01.000000Z"
    east = datetime.timezone(datetime.timedelta(hours=2))
    assert (
        kube.micro_time(datetime.datetime(2026, 1, 1, 2, 0, 0, 5, tzinfo=east))
        == "2026-01-01T00:00:00.000005Z"
    )
