"""The one Lease engine (``agentrun_core.lease`` + ``lease_cas``) against an in-memory Lease store, as the
worker holds a run's Lease and as the operator holds leadership (``agent_operator.serve.leader``).

The store stands in for ``agentrun_core.kube``'s Lease calls (monkeypatched there, so these tests also show
that the operator's leader election goes through the core client, not an adapter of its own) and applies
``resourceVersion`` compare-and-swap like the API server. The real API server:
tests/integration/test_lease.py.
"""

from __future__ import annotations

import asyncio
import copy
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from agent_operator import settings
from agent_operator.serve import leader
from agentrun_core import kube, lease
from tests.support.waiting import wait_for


class FakeLeases:
    """Leases by name, with the API server's CAS rules. ``fail`` makes every call raise it instead."""

    def __init__(self) -> None:
        self.items: dict[str, dict[str, Any]] = {}
        self.version = 0
        self.calls: list[str] = []
        self.fail: kube.KubeError | None = None
        self.lock = threading.Lock()

    def _check(self, call: str) -> None:
        self.calls.append(call)
        if self.fail is not None:
            raise self.fail

    def _stored(self, body: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        body = copy.deepcopy(body)
        body.setdefault("metadata", {})["resourceVersion"] = str(self.version)
        self.items[body["metadata"]["name"]] = body
        return copy.deepcopy(body)

    def get(self, api: Any, namespace: str, name: str, *, timeout: float | None = None) -> dict[str, Any]:
        with self.lock:
            self._check("get")
            if name not in self.items:
                raise kube.NotFound("404", 404)
            return copy.deepcopy(self.items[name])

    def create(
        self, api: Any, namespace: str, body: dict[str, Any], *, timeout: float | None = None
    ) -> dict[str, Any]:
        with self.lock:
            self._check("create")
            if body["metadata"]["name"] in self.items:
                raise kube.AlreadyExists("409", 409, "AlreadyExists")
            return self._stored(body)

    def replace(
        self, api: Any, namespace: str, name: str, body: dict[str, Any], *, timeout: float | None = None
    ) -> dict[str, Any]:
        with self.lock:
            self._check("replace")
            if name not in self.items:
                raise kube.NotFound("404", 404)
            if body["metadata"].get("resourceVersion") != self.items[name]["metadata"]["resourceVersion"]:
                raise kube.Conflict("409", 409, "Conflict")
            return self._stored(body)

    def edit(self, name: str, **spec: Any) -> None:
        """Somebody else's write (kubectl): a new version, spec fields changed as given."""
        with self.lock:
            body = copy.deepcopy(self.items[name])
            body["spec"].update(spec)
            self._stored(body)


@pytest.fixture
def leases(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLeases]:
    fake = FakeLeases()
    monkeypatch.setattr(kube, "get_lease", fake.get)
    monkeypatch.setattr(kube, "create_lease", fake.create)
    monkeypatch.setattr(kube, "replace_lease", fake.replace)
    yield fake


def _keeper(holder: str, duration: float = 15, **kw: Any) -> lease.LeaseKeeper:
    labels = {"agentrun.dev/run": "r"}
    cfg = lease.LeaseConfig("ns", "agentrun-r", holder, duration_seconds=duration, labels=labels)
    return lease.LeaseKeeper(None, cfg, **kw)  # type: ignore[arg-type]  # the fake ignores the client


def test_worker_acquire_epochs_and_release(leases: FakeLeases) -> None:
    a = _keeper("pod-a")
    assert a.acquire(wait_seconds=0) == 1
    stored = leases.items["agentrun-r"]
    assert stored["metadata"]["labels"] == {"agentrun.dev/run": "r"}
    assert stored["spec"]["holderIdentity"] == "pod-a" and stored["spec"]["leaseDurationSeconds"] == 15
    with pytest.raises(lease.LeaseHeld) as err:
        _keeper("pod-b").acquire(wait_seconds=0)
    assert err.value.holder == "pod-a"
    assert a.may_act() and a.release()
    assert not a.may_act() and leases.items["agentrun-r"]["spec"]["holderIdentity"] == ""
    b = _keeper("pod-b")
    assert b.acquire(wait_seconds=0, min_epoch=5) == 5  # never below min_epoch
    assert b.acquire(wait_seconds=0) == 5  # already ours: same epoch


def test_renewal_adopts_a_write_that_kept_us_as_holder(leases: FakeLeases) -> None:
    a = _keeper("pod-a", duration=0.6)
    a.acquire(wait_seconds=0)
    leases.edit("agentrun-r", leaseDurationSeconds=1)  # a foreign write, still ours at our epoch
    outcome = a._renew_once(time.monotonic())
    assert outcome.written is None and outcome.adopt is not None and outcome.lost is None
    assert a._renew_once(time.monotonic()).written is not None  # retried on the adopted version
    assert a.renewals == 1


def test_a_renewal_applied_although_its_answer_was_lost_counts_from_when_it_was_sent(
    leases: FakeLeases, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under load a renewal can outlive its request timeout yet be applied. The next renewal conflicts
    with it; the re-read shows our own renewTime: the Lease was renewed when that write was sent."""
    real_replace = leases.replace

    def answer_lost(api: Any, namespace: str, name: str, body: dict[str, Any], **kw: Any) -> dict[str, Any]:
        real_replace(api, namespace, name, body, **kw)  # applied...
        raise kube.KubeError("read timed out")  # ...but the client never hears so

    a = _keeper("pod-a", duration=60)
    a.acquire(wait_seconds=0)
    acquired = a.last_renewed
    assert acquired is not None
    monkeypatch.setattr(kube, "replace_lease", answer_lost)
    sent_at = time.monotonic()
    lost_answer = a._renew_once(sent_at)
    assert lost_answer.error and lost_answer.sent and a.last_renewed == acquired  # not known yet
    monkeypatch.setattr(kube, "replace_lease", real_replace)
    conflicted = a._renew_once(time.monotonic())
    assert conflicted.adopt is not None and conflicted.written is None
    assert a.last_renewed == sent_at and a.renewals == 1  # counted from when it was sent
    assert a._renew_once(time.monotonic()).written is not None  # and renewing goes on from there

    # Not ours: a timed-out write that did not take, then somebody else's write (our renewTime absent).
    def not_applied(api: Any, namespace: str, name: str, body: dict[str, Any], **kw: Any) -> dict[str, Any]:
        raise kube.KubeError("read timed out")

    before = a.last_renewed
    monkeypatch.setattr(kube, "replace_lease", not_applied)
    assert a._renew_once(time.monotonic()).error
    monkeypatch.setattr(kube, "replace_lease", real_replace)
    leases.edit("agentrun-r", renewTime="someone else's")
    assert a._renew_once(time.monotonic()).adopt is not None
    assert a.last_renewed == before and a.renewals == 2


def test_a_new_acquisition_starts_its_own_count_and_forgets_a_lost_answer(
    leases: FakeLeases, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``renewals`` counts since acquisition, and a renewal answer lost under an earlier acquisition is not
    carried into the next one (it would be compared with that acquisition's Lease)."""
    real_replace = leases.replace

    def answer_lost(api: Any, namespace: str, name: str, body: dict[str, Any], **kw: Any) -> dict[str, Any]:
        real_replace(api, namespace, name, body, **kw)
        raise kube.KubeError("read timed out")

    a = _keeper("pod-a", duration=60)
    a.acquire(wait_seconds=0)
    assert a._renew_once(time.monotonic()).written is not None and a.renewals == 1
    monkeypatch.setattr(kube, "replace_lease", answer_lost)
    assert a._renew_once(time.monotonic()).sent is not None and a._unconfirmed is not None
    monkeypatch.setattr(kube, "replace_lease", real_replace)
    assert a.release()
    a.acquire(wait_seconds=0)
    assert a.renewals == 0 and a._unconfirmed is None


def test_conflicting_renewals_are_bounded_and_end_in_loss(
    leases: FakeLeases, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that conflicts every renewal (but keeps us as holder) cannot make renewal loop without end:
    one PUT and one re-read per attempt, attempts on the retry schedule, loss after a full duration."""
    real_replace = leases.replace

    def always_conflict(
        api: Any, namespace: str, name: str, body: dict[str, Any], **kw: Any
    ) -> dict[str, Any]:
        leases.edit(name, renewTime="someone else's")
        return real_replace(api, namespace, name, body, **kw)

    lost: list[str] = []
    a = _keeper("pod-a", duration=0.6, on_lost=lost.append)
    a.acquire(wait_seconds=0)
    monkeypatch.setattr(kube, "replace_lease", always_conflict)
    leases.calls.clear()
    a.start()
    wait_for(lambda: bool(lost), 10.0, interval=0.01)
    a.stop()
    assert "no successful renewal for a full lease duration" in lost[0]
    # 0.6 s at one attempt per retry_delay (0.05 s) at most, two requests each, after the first third.
    assert len(leases.calls) <= 2 * (0.6 / 0.05 + 2)


def test_deposed_holder_is_lost_at_once(leases: FakeLeases) -> None:
    lost: list[str] = []
    a = _keeper("pod-a", duration=0.6, on_lost=lost.append)
    a.acquire(wait_seconds=0)
    leases.edit("agentrun-r", holderIdentity="pod-b", leaseTransitions=2)
    a.start()
    wait_for(lambda: bool(lost), 10.0, interval=0.01)
    assert "now held by 'pod-b' at epoch 2" in lost[0]
    with pytest.raises(lease.LeaseLost):
        a.check()
    assert not a.release()  # nothing of ours to release
    assert leases.items["agentrun-r"]["spec"]["holderIdentity"] == "pod-b"


def _elector(duration: float = 3.0, identity: str = "op-1") -> leader.Elector:
    cfg = settings.LeaderSettings(
        namespace="sys", name="agentrun-operator", duration_seconds=duration, identity=identity
    )
    return leader.Elector(None, cfg)  # type: ignore[arg-type]


def test_leader_elects_through_the_core_client(leases: FakeLeases) -> None:
    one, two = _elector(identity="op-1"), _elector(identity="op-2")
    assert one.try_acquire() and one.may_act()
    body = leases.items["agentrun-operator"]
    assert body["spec"]["holderIdentity"] == "op-1" and body["spec"]["leaseTransitions"] == 1
    assert body["metadata"]["labels"] == {"app.kubernetes.io/name": "agentrun-operator"}
    assert not two.try_acquire() and not two.may_act()  # held: the standby waits
    one.release()
    assert not one.may_act()
    assert two.try_acquire() and leases.items["agentrun-operator"]["spec"]["leaseTransitions"] == 2


def test_leader_standby_waits_then_takes_a_released_lease(leases: FakeLeases) -> None:
    one, two = _elector(duration=1.0, identity="op-1"), _elector(duration=1.0, identity="op-2")
    assert one.try_acquire()
    threading.Timer(0.3, one.release).start()
    asyncio.run(asyncio.wait_for(leader.acquire(two), timeout=10))
    assert leases.items["agentrun-operator"]["spec"]["holderIdentity"] == "op-2"


def test_leader_fractional_duration_is_written_rounded(leases: FakeLeases) -> None:
    e = _elector(duration=1.4)
    assert e.try_acquire()
    assert leases.items["agentrun-operator"]["spec"]["leaseDurationSeconds"] == 1
    assert e.keeper.duration == pytest.approx(1.4)  # the timing keeps the setting itself


def test_deposed_leader_calls_on_lost(leases: FakeLeases) -> None:
    e = _elector(duration=1.0)
    assert e.try_acquire()
    lost: list[tuple[leader.Elector, str]] = []
    keeper = leader.Keeper(e, on_lost=lambda el, why: lost.append((el, why))).start()
    leases.edit("agentrun-operator", holderIdentity="usurper")
    wait_for(lambda: bool(lost), 10.0, interval=0.01)
    keeper.stop()
    assert lost[0][0] is e and "usurper" in lost[0][1]


def test_leader_is_lost_at_the_renew_deadline_not_after_a_full_duration(leases: FakeLeases) -> None:
    """Unreachable API server: the leader gives up once may_act() turns False (2/3 of the duration), where
    a worker would keep trying until a full duration passed. A 6 s Lease: the third between the deadline (4 s)
    and a full duration leaves a loaded machine 2 s to schedule the keeper's thread."""
    e = _elector(duration=6.0)
    assert e.try_acquire()
    acquired = time.monotonic()
    lost: list[float] = []
    reasons: list[str] = []

    def on_lost(el: leader.Elector, why: str) -> None:
        reasons.append(why)
        lost.append(time.monotonic())

    keeper = leader.Keeper(e, on_lost=on_lost).start()
    leases.fail = kube.Unavailable("connection refused")
    wait_for(lambda: bool(lost), 10.0, interval=0.01)
    keeper.stop()
    assert "within the renew deadline" in reasons[0]
    assert 4.0 <= lost[0] - acquired < 6.0
