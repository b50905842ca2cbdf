"""Pure run-deadline arithmetic: how long a run has been active, how long since it last made progress.

No I/O and no wall clock here. Every function takes ``now``; the caller passes Postgres' ``now()`` read in
the same statement as the timestamps (all of them written by Postgres: attempt starts and ends, step
batches), so one clock measures everything and the operator's own clock never enters.

Two deadlines (``spec.activeDeadlineSeconds``, ``spec.progressDeadlineSeconds``):

* **Active time** is the time the run had a worker attempt: from the moment an attempt is recorded as
  started (before its Pod is created: scheduling and image pulls count) until that attempt is recorded as
  ended. Time with no attempt is *excluded*: parked on an approval (a human's latency has its own deadline,
  ``spec.approval.timeoutSeconds``), suspended (a human's pause), queued for a worker slot, backing off
  between lost attempts (an attempt whose worker was killed before recording its end counts until the next
  attempt starts: the one case where a pause can count). A human retry (or resolve) that reopens the run
  starts the count again from the reopening attempt, as a resumed Job's timer restarts: otherwise a run
  failed by its deadline would fail again the moment it was retried.
* **Progress** is a finished step (a step batch recorded by the worker). While an attempt runs and its
  worker has claimed the run, the time since the later of that claim and the last recorded step must stay
  under the progress deadline. Before the claim (a Pod scheduling, pulling its image, importing the graph)
  the operator's start timeout judges the attempt, not this; with no attempt running there is no progress
  to expect, so nothing is measured.

Used by the operator (``agent_operator.decide.deadlines``), which also asks ``wake_in`` when to look again:
at the
deadline itself, never by polling.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Sequence

from agentrun_core.api import status as api_status

REASONS = frozenset({api_status.DEADLINE_EXCEEDED, api_status.PROGRESS_DEADLINE_EXCEEDED})


@dataclasses.dataclass(frozen=True)
class Interval:
    """One attempt as Postgres recorded it: its start, its end (None while it runs), whether a human's
    reopening started it (``start_reason`` retry / resolved)."""

    start: datetime.datetime
    end: datetime.datetime | None = None
    reopens: bool = False


@dataclasses.dataclass(frozen=True)
class Clock:
    """What the deadlines are measured from, all on Postgres' clock."""

    now: datetime.datetime
    attempts: tuple[Interval, ...] = ()  # in attempt order
    last_step_at: datetime.datetime | None = None  # when the latest step batch was recorded
    claimed_at: datetime.datetime | None = None  # when a worker last claimed the run (its epoch began)


@dataclasses.dataclass(frozen=True)
class Verdict:
    reason: str  # api_status.DEADLINE_EXCEEDED | api_status.PROGRESS_DEADLINE_EXCEEDED
    message: str


def counted(attempts: Sequence[Interval]) -> tuple[Interval, ...]:
    """The attempts the deadlines count: from the latest one a human's reopening started."""
    start = 0
    for i, interval in enumerate(attempts):
        if interval.reopens:
            start = i
    return tuple(attempts[start:])


def ends(attempts: Sequence[Interval], now: datetime.datetime) -> list[datetime.datetime]:
    """When each attempt stopped counting: its recorded end; with none, the next attempt's start (a worker
    killed while suspended records no end, and nothing runs for an attempt once a later one started: it
    fences the earlier one), or ``now`` for the latest. Never past ``now``."""
    out = []
    for i, a in enumerate(attempts):
        end = a.end or (attempts[i + 1].start if i + 1 < len(attempts) else now)
        out.append(min(end, now))
    return out


def active_seconds(attempts: Sequence[Interval], now: datetime.datetime) -> float:
    """Seconds covered by the counted attempts up to ``now`` (a running one counts to ``now``). Overlaps
    count once: an attempt's end is recorded by whoever notices it, possibly after the next one started."""
    mine = counted(attempts)
    spans = sorted((a.start, end) for a, end in zip(mine, ends(mine, now), strict=True) if end > a.start)
    total = 0.0
    cur_start: datetime.datetime | None = None
    cur_end: datetime.datetime | None = None
    for start, end in spans:
        if cur_end is None or start > cur_end:
            if cur_start is not None and cur_end is not None:
                total += (cur_end - cur_start).total_seconds()
            cur_start, cur_end = start, end
        elif end > cur_end:
            cur_end = end
    if cur_start is not None and cur_end is not None:
        total += (cur_end - cur_start).total_seconds()
    return total


def running(attempts: Sequence[Interval]) -> Interval | None:
    """The attempt that runs now (the latest, with no recorded end), or None."""
    if attempts and attempts[-1].end is None:
        return attempts[-1]
    return None


def idle_seconds(clock: Clock) -> float | None:
    """Seconds since the run last made progress while its current attempt's worker runs; None with no
    attempt running (parked, suspended, between attempts: no progress is expected then) or before that
    attempt's worker claimed the run (an earlier attempt's claim does not count)."""
    current = running(clock.attempts)
    if current is None or clock.claimed_at is None or clock.claimed_at < current.start:
        return None
    since = clock.claimed_at
    if clock.last_step_at is not None and clock.last_step_at > since:
        since = clock.last_step_at
    return max(0.0, (clock.now - since).total_seconds())


def check(clock: Clock, active_deadline: int | None, progress_deadline: int | None) -> Verdict | None:
    """The deadline the run has passed (the active one first), or None."""
    if active_deadline is not None:
        active = active_seconds(clock.attempts, clock.now)
        if active >= active_deadline:
            return Verdict(
                api_status.DEADLINE_EXCEEDED,
                f"the run was active for {active:.0f}s, past spec.activeDeadlineSeconds={active_deadline} "
                "(time parked on an approval or suspended is not counted)",
            )
    if progress_deadline is not None:
        idle = idle_seconds(clock)
        if idle is not None and idle >= progress_deadline:
            return Verdict(
                api_status.PROGRESS_DEADLINE_EXCEEDED,
                f"no step finished for {idle:.0f}s while the worker ran, past "
                f"spec.progressDeadlineSeconds={progress_deadline}",
            )
    return None


def wake_in(clock: Clock, active_deadline: int | None, progress_deadline: int | None) -> float | None:
    """Seconds until the earliest deadline falls if nothing changes; None when no clock runs (no attempt
    running: the run's next attempt wakes the operator anyway). A step that finishes meanwhile only moves
    the progress deadline later, so waking at this time is never too late."""
    if running(clock.attempts) is None:
        return None
    waits: list[float] = []
    if active_deadline is not None:
        waits.append(active_deadline - active_seconds(clock.attempts, clock.now))
    if progress_deadline is not None:
        idle = idle_seconds(clock)
        if idle is not None:
            waits.append(progress_deadline - idle)
    return max(0.0, min(waits)) if waits else None
