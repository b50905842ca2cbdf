"""What an AgentRunSchedule needs now: the pure "decide" of its reconciler (``scheduler`` does the I/O).

Given the schedule (spec and status), the time, and the runs it owns, ``decide`` says which run to create,
which runs to cancel or delete, what to record in ``status``, which Events to post, and when to look again.
The CronJob rules, as ``kubectl explain agentrunschedule.spec`` says them:

* the tick due is the latest in ``(since, now]``, ``since`` being the last recorded tick (created or skipped),
  else the schedule's creation; older ticks in between are missed (one Warning says how many);
* past ``startingDeadlineSeconds`` a tick is skipped (Warning ``MissedSchedule``) and recorded as skipped;
* its run may already exist (an operator that died after creating it, another replica): recorded, not created
  again - the run's name is the tick's (``agentrun_core.api.schedules``);
* ``Forbid`` with a run still active: the tick waits (not recorded) and starts when the active run ended if
  that is still within ``startingDeadlineSeconds`` (with no deadline: whenever it ends), as a CronJob's does;
* ``Replace``: the active runs are cancelled (``spec.cancel``, as ``agentrun cancel``), the tick's run starts;
* ``suspend``: nothing starts; ticks pass as missed (on resume, the latest runs if within the deadline);
* history: the newest ``successfulRunsHistoryLimit`` Succeeded and ``failedRunsHistoryLimit`` Failed or
  Cancelled runs are kept, older finished runs deleted.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Sequence

from agentrun_core import cron
from agentrun_core.api import schedules as names
from agentrun_core.api import status as api_status

MAX_SLEEP_SECONDS = 3600.0  # look again at least hourly (a clock step, a lost watch event)
POLICIES = ("Allow", "Forbid", "Replace")


@dataclasses.dataclass(frozen=True)
class OwnedRun:
    name: str
    phase: str  # "" until the operator admitted it
    created: datetime.datetime
    finished: datetime.datetime | None = None
    cancel_requested: bool = False

    @property
    def active(self) -> bool:
        return self.phase not in names.FINISHED


@dataclasses.dataclass(frozen=True)
class View:
    """The schedule as the decision needs it (``scheduler.view`` reads it from the object)."""

    name: str
    schedule: str
    created: datetime.datetime
    time_zone: str = ""
    policy: str = "Allow"
    starting_deadline: int | None = None
    successful_limit: int = 3
    failed_limit: int = 1
    suspend: bool = False
    last_schedule: datetime.datetime | None = None
    last_skipped: datetime.datetime | None = None
    last_successful: datetime.datetime | None = None


@dataclasses.dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str
    key: str  # the same key is posted once per operator process (a tick that waits is looked at often)


@dataclasses.dataclass(frozen=True)
class Decision:
    create: str | None = None  # the run to create (create-if-absent) for ``tick``
    tick: datetime.datetime | None = None
    record: datetime.datetime | None = None  # status.lastScheduleTime after the create
    skipped: datetime.datetime | None = None  # status.lastSkippedTime
    cancel: tuple[str, ...] = ()
    delete: tuple[str, ...] = ()
    events: tuple[Event, ...] = ()
    active: tuple[str, ...] = ()
    next_tick: datetime.datetime | None = None
    last_successful: datetime.datetime | None = None
    invalid: str | None = None  # why the schedule cannot run (status condition Ready=False)
    wake_after: float = MAX_SLEEP_SECONDS


def _history(view: View, runs: Sequence[OwnedRun]) -> tuple[str, ...]:
    def newest_first(rs: list[OwnedRun]) -> list[OwnedRun]:
        return sorted(rs, key=lambda r: (r.finished or r.created, r.name), reverse=True)

    succeeded = newest_first([r for r in runs if r.phase == api_status.SUCCEEDED])
    failed = newest_first([r for r in runs if r.phase in (api_status.FAILED, api_status.CANCELLED)])
    gone = succeeded[view.successful_limit :] + failed[view.failed_limit :]
    return tuple(sorted(r.name for r in gone))


def _seconds(later: datetime.datetime | None, now: datetime.datetime) -> float:
    if later is None:
        return MAX_SLEEP_SECONDS
    # A moment past the tick: waking a hair early would find nothing due and sleep again.
    return min(MAX_SLEEP_SECONDS, max(0.0, (later - now).total_seconds()) + 0.05)


def decide(view: View, now: datetime.datetime, runs: Sequence[OwnedRun]) -> Decision:
    active = tuple(sorted(r.name for r in runs if r.active))
    successes = [r.finished for r in runs if r.phase == api_status.SUCCEEDED and r.finished is not None]
    last_ok = max([*successes, *([view.last_successful] if view.last_successful else [])], default=None)
    base = Decision(active=active, delete=_history(view, runs), last_successful=last_ok)
    try:
        sched = cron.parse(view.schedule, view.time_zone)
    except cron.CronError as exc:
        problem = str(exc)
        event = Event("Warning", "InvalidSchedule", problem, f"invalid:{view.schedule}:{view.time_zone}")
        return dataclasses.replace(base, invalid=problem, events=(event,))
    next_tick = sched.next_after(now)
    base = dataclasses.replace(base, next_tick=next_tick, wake_after=_seconds(next_tick, now))
    if view.suspend:
        return dataclasses.replace(base, wake_after=MAX_SLEEP_SECONDS)
    since = max(t for t in (view.created, view.last_schedule, view.last_skipped) if t is not None)
    tick = sched.latest_in(since, now)
    if tick is None:
        return base
    events: list[Event] = []
    older = sched.count_in(since, tick) - 1
    if older > 0:
        more = "+" if older >= 99 else ""
        events.append(
            Event(
                "Warning",
                "MissedSchedule",
                f"{older}{more} earlier tick(s) after {names.rfc3339(since)} were missed; only the latest, "
                f"{names.rfc3339(tick)}, is considered",
                f"older:{names.rfc3339(tick)}",
            )
        )
    run = names.tick_run_name(view.name, tick)
    if any(r.name == run for r in runs):
        # Created already (by an operator that died before recording it, or another replica): record only.
        return dataclasses.replace(base, record=tick, tick=tick, events=tuple(events))
    late = (now - tick).total_seconds()
    if view.starting_deadline is not None and late > view.starting_deadline:
        events.append(
            Event(
                "Warning",
                "MissedSchedule",
                f"tick {names.rfc3339(tick)} skipped: {late:.0f}s late, past startingDeadlineSeconds "
                f"{view.starting_deadline}",
                f"late:{names.rfc3339(tick)}",
            )
        )
        return dataclasses.replace(base, skipped=tick, tick=tick, events=tuple(events))
    if view.policy == "Forbid" and active:
        events.append(
            Event(
                "Normal",
                "RunAlreadyActive",
                f"tick {names.rfc3339(tick)} waits: concurrencyPolicy Forbid and {', '.join(active)} "
                "still active",
                f"forbid:{names.rfc3339(tick)}",
            )
        )
        until = next_tick
        if view.starting_deadline is not None:
            expiry = tick + datetime.timedelta(seconds=view.starting_deadline)
            until = expiry if next_tick is None else min(expiry, next_tick)
        return dataclasses.replace(base, tick=tick, events=tuple(events), wake_after=_seconds(until, now))
    cancel: tuple[str, ...] = ()
    if view.policy == "Replace":
        cancel = tuple(r.name for r in runs if r.active and not r.cancel_requested)
    return dataclasses.replace(
        base, create=run, tick=tick, record=tick, cancel=cancel, events=tuple(events), active=(*active, run)
    )
