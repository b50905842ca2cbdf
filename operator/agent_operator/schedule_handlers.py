"""kopf wiring of the AgentRunSchedule reconciler (``scheduler``; the decision is ``schedule_plan``).

One daemon per schedule: reconcile, then sleep until the next tick (or the deadline of a waiting tick), or
until woken by a change of the schedule or of one of its runs (a run that ends lets a Forbid tick start and
the history limits apply). No polling: an idle schedule costs one reconcile per tick (at most an hour apart).
Registered by importing this module (``agent_operator.handlers`` does); kopf starts daemons only after the
startup handlers, so a standby replica, waiting for leadership there, never reconciles a schedule.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from agent_operator import kube, scheduler
from agent_operator import settings as settings_
from agentrun_core import backoff
from agentrun_core import schedules as names

logger = logging.getLogger(__name__)
SCHEDULES = (names.GROUP, names.VERSION, names.PLURAL)
RUNS = (kube.GROUP, kube.VERSION, kube.PLURAL)
_wakeups: dict[tuple[str, str], asyncio.Event] = {}
_scheduler: list[scheduler.Scheduler] = []


def _get() -> scheduler.Scheduler:
    if not _scheduler:
        cfg = settings_.from_env()
        _scheduler.append(
            scheduler.Scheduler(kube.client(cfg.kubeconfig or None), cfg.schedule_clock_offset_seconds)
        )
    return _scheduler[0]


def _wake(namespace: str, name: str) -> None:
    event = _wakeups.get((namespace, name))
    if event is not None:
        event.set()


@kopf.on.event(*SCHEDULES)
async def schedule_changed(namespace: str | None, name: str, **_: Any) -> None:
    _wake(namespace or "", name)


@kopf.on.event(*RUNS, labels={names.LABEL_SCHEDULE: kopf.PRESENT})
async def schedule_run_changed(namespace: str | None, labels: Any, **_: Any) -> None:
    _wake(namespace or "", str(labels.get(names.LABEL_SCHEDULE)))


@kopf.daemon(*SCHEDULES, cancellation_timeout=10.0)
async def schedule_loop(stopped: Any, body: kopf.Body, namespace: str | None, name: str, **_: Any) -> None:
    key = (namespace or "", name)
    wake = _wakeups.setdefault(key, asyncio.Event())
    failures = 0
    try:
        while not stopped:
            wake.clear()
            try:
                # kopf keeps ``body`` current with the watch: each pass sees the latest spec and status.
                delay = await asyncio.to_thread(_get().reconcile, body)
                failures = 0
            except Exception as exc:  # the handler boundary: log, look again soon (backing off)
                failures += 1
                delay = backoff.capped(failures, initial=2.0, cap=60.0)
                logger.warning("schedule %s/%s: reconcile failed (%d in a row): %s", *key, failures, exc)
            await _sleep(wake, stopped, delay)
    finally:
        if _wakeups.get(key) is wake:
            _wakeups.pop(key, None)


async def _sleep(wake: asyncio.Event, stopped: Any, seconds: float) -> None:
    waiter = asyncio.ensure_future(wake.wait())
    stopper = asyncio.ensure_future(stopped.wait())
    try:
        await asyncio.wait({waiter, stopper}, timeout=max(0.0, seconds), return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
        stopper.cancel()
