"""Pure lease arithmetic: expiry by locally observed time, renew schedule, acquisition decisions.

No I/O and no wall clock here. Every function takes ``now`` as a monotonic reading of the caller's own
clock; the holder's ``renewTime`` is never compared with it. ``renewTime`` is written by another machine
whose clock may be minutes off ours, so "renewTime + duration < our now" would let a skewed observer
declare a live holder dead. Instead an observer remembers *when it first saw* the current version of the
Lease and calls it expired once that version has stayed unchanged for longer than the holder's own
``leaseDurationSeconds`` (the scheme of client-go's leader election). Only clock *rates* need to agree,
never clock *values*.

Used by the worker (``agentrun_core.lease``) to decide when it may take a Lease, and by the operator to
notice a worker that stopped renewing (a hang its Pod status does not show).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

#: Fallback when a Lease does not say its duration (seconds). Matches the worker default.
DEFAULT_DURATION_SECONDS = 15.0


class LeaseState(enum.StrEnum):
    """What an observer believes about a Lease. A ``StrEnum`` so ``state == "held"`` reads naturally."""

    HELD = "held"  # a holder, and its Lease changed within the last leaseDurationSeconds we watched
    EXPIRED = "expired"  # a holder, but unchanged for longer than leaseDurationSeconds of our time
    FREE = "free"  # no holder (released, or the Lease does not exist)


@dataclasses.dataclass(frozen=True, slots=True)
class LeaseSummary:
    """The parts of a ``coordination.k8s.io/v1`` Lease that matter for ownership, as plain data."""

    holder: str  # "" when free
    transitions: int  # spec.leaseTransitions (0 when absent); after acquisition: the fencing epoch
    duration_seconds: float | None = None  # spec.leaseDurationSeconds as written by the holder
    renew_time: str | None = None  # opaque: only compared for equality, never against a clock
    resource_version: str | None = None  # metadata.resourceVersion: changes on every write

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> LeaseSummary:
        """From the JSON form of a Lease (camelCase, as the API server or a kopf ``body`` gives it)."""
        spec: Mapping[str, Any] = body.get("spec") or {}
        meta: Mapping[str, Any] = body.get("metadata") or {}
        duration = spec.get("leaseDurationSeconds")
        renew = spec.get("renewTime")
        rv = meta.get("resourceVersion")
        return cls(
            holder=str(spec.get("holderIdentity") or ""),
            transitions=int(spec.get("leaseTransitions") or 0),
            duration_seconds=float(duration) if duration is not None else None,
            renew_time=str(renew) if renew is not None else None,
            resource_version=str(rv) if rv is not None else None,
        )

    @property
    def free(self) -> bool:
        return not self.holder

    def version(self) -> tuple[object, ...]:
        """Identity of "this version" of the Lease for the observer.

        Any write changes ``resourceVersion``, so a write that is not a renewal (a label edit) also restarts
        the observer's timer. That errs the safe way: it can delay an expiry, never invent one.
        """
        return (self.holder, self.transitions, self.duration_seconds, self.renew_time, self.resource_version)


def renew_interval(duration_seconds: float) -> float:
    """How often a holder renews: a third of the duration, so two renewals can fail before expiry."""
    return duration_seconds / 3.0


def renew_deadline(duration_seconds: float) -> float:
    """How long after the start of its last successful renewal a holder may still issue effects.

    Two thirds of the duration. An observer starts its expiry timer no earlier than the moment it sees
    that renewal, which is after the renewal request was sent; so the holder stops acting at least a
    third of the duration before anyone may take the Lease. That third absorbs clock-rate drift and the
    time between "may I act?" and the effect leaving the process.
    """
    return duration_seconds * 2.0 / 3.0


def retry_delay(duration_seconds: float) -> float:
    """Pause between attempts after a failed renewal: several tries fit in the renew-deadline gap."""
    return max(0.05, duration_seconds / 15.0)


def poll_interval(duration_seconds: float) -> float:
    """How often a waiting acquirer re-reads a held Lease (bounded so long leases still poll every 2 s)."""
    return min(2.0, max(0.05, duration_seconds / 6.0))


def request_timeout(duration_seconds: float) -> float:
    """Per-request timeout for Lease calls: a hung call must not eat the whole renew deadline."""
    return max(0.5, duration_seconds / 5.0)


def may_act(last_renewed_at: float | None, now: float, duration_seconds: float) -> bool:
    """True while ``now`` is within the renew deadline of the last successful renewal's start."""
    if last_renewed_at is None:
        return False
    return now - last_renewed_at < renew_deadline(duration_seconds)


def presumed_lost(last_renewed_at: float, now: float, duration_seconds: float) -> bool:
    """True once a full duration passed without a successful renewal: others may have taken it by now."""
    return now - last_renewed_at >= duration_seconds


def next_transitions(current: LeaseSummary | None, me: str, min_epoch: int = 0) -> int:
    """``leaseTransitions`` to write when ``me`` takes the Lease.

    +1 on a change of holder (a free Lease has holder "" so taking it counts as a change); unchanged when
    the Lease is already ours. Never below ``min_epoch`` and never below 1: epoch 0 is the database
    default meaning "never held", and a Lease that was deleted and re-created must not hand out an epoch
    a previous attempt already used (the worker passes its run's stored epoch + 1).
    """
    if current is None:
        value = 1
    elif current.holder == me:
        value = current.transitions
    else:
        value = current.transitions + 1
    return max(value, min_epoch, 1)


class LeaseObserver:
    """Judges one Lease's liveness from the times *this* process saw it change.

    Feed it every read of the Lease (``observe(summary, now)``, ``now`` from a monotonic clock). A fresh
    observer that has never seen the Lease change must wait a full duration before calling it expired,
    even if the Lease looks old: it cannot know, without trusting another clock, when it was last renewed.
    The operator keeps one observer per Lease; the worker one per acquisition.
    """

    __slots__ = ("_first_seen", "_last", "_version", "default_duration_seconds")  # one per parked run

    def __init__(self, default_duration_seconds: float = DEFAULT_DURATION_SECONDS) -> None:
        self.default_duration_seconds = default_duration_seconds
        self._version: tuple[object, ...] | None = None
        self._first_seen: float | None = None
        self._last: LeaseSummary | None = None

    @property
    def last(self) -> LeaseSummary | None:
        """The last summary observed (None before any, or after observing an absent Lease)."""
        return self._last

    @property
    def first_seen(self) -> float | None:
        """Monotonic time when the current version was first observed."""
        return self._first_seen

    def duration(self) -> float:
        if self._last is not None and self._last.duration_seconds:
            return self._last.duration_seconds
        return self.default_duration_seconds

    def observe(self, lease: LeaseSummary | None, now: float) -> LeaseState:
        """Record a read of the Lease (None: it does not exist) made at ``now``; return the state."""
        if lease is None:
            self._version = self._first_seen = self._last = None
            return LeaseState.FREE
        version = lease.version()
        if version != self._version:
            self._version, self._first_seen = version, now
        self._last = lease
        return self.state(now)

    def state(self, now: float) -> LeaseState:
        """The state at ``now`` given what was observed so far (no new read)."""
        if self._last is None or self._last.free:
            return LeaseState.FREE
        assert self._first_seen is not None
        if now - self._first_seen > self.duration():
            return LeaseState.EXPIRED
        return LeaseState.HELD

    def unchanged_for(self, now: float) -> float:
        """Seconds the current version has been seen unchanged (0 before any observation)."""
        return 0.0 if self._first_seen is None else max(0.0, now - self._first_seen)

    def expires_in(self, now: float) -> float | None:
        """Seconds until this observer would call the Lease expired if nothing changes; None when free."""
        if self._last is None or self._last.free or self._first_seen is None:
            return None
        return max(0.0, self._first_seen + self.duration() - now)
