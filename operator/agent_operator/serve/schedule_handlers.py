"""kopf wiring of the AgentRunSchedule reconciler (``scheduler``; the decision is ``schedule_plan``).

One loop (an asyncio task) per schedule: reconcile, then sleep until the next tick (or the deadline of a
waiting tick), or until woken by a change of the schedule or of one of its runs (a run that ends lets a Forbid
tick start and the history limits apply). No polling: an idle schedule costs one reconcile per tick (at most
an hour apart). The loops are started from kopf's watch events, not as kopf daemons: kopf puts a finalizer
on every object with a daemon, and deleting a schedule must not need a running operator (its runs go by
their ownerReferences, the garbage collector's work).
Registered by importing this module (``agent_operator.serve.handlers`` does); kopf starts watching only after
the
startup handlers, so a standby replica, waiting for leadership there, never reconciles a schedule.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
from typing import Any

import kopf

from agent_operator import kube
from agent_operator import settings as settings_
from agent_operator.act import scheduler
from agent_operator.serve import run_loops
from agentrun_core import backoff
from agentrun_core.api import schedules as names

logger = logging.getLogger(__name__)
SCHEDULES = (names.GROUP, names.VERSION, names.PLURAL)
RUNS = (kube.GROUP, kube.VERSION, kube.PLURAL)
_wakeups: dict[tuple[str, str], asyncio.Event] = {}
_bodies: dict[tuple[str, str], dict[str, Any]] = {}  # the latest version of each schedule kopf saw
_tasks: dict[tuple[str, str], asyncio.Task[None]] = {}
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
async def schedule_changed(
    namespace: str | None, name: str, type: str | None, body: kopf.Body, **_: Any
) -> None:
    key = (namespace or "", name)
    if type == "DELETED":
        _bodies.pop(key, None)
        task = _tasks.pop(key, None)
        if task is not None:
            task.cancel()
        return
    _bodies[key] = copy.deepcopy(dict(body))  # the loop reconciles the latest version it was given
    task = _tasks.get(key)
    if task is None or task.done():
        _tasks[key] = run_loops.start(_loop(key), f"schedule {namespace}/{name}")
    else:
        _wake(*key)


@kopf.on.event(*RUNS, labels={names.LABEL_SCHEDULE: kopf.PRESENT})
async def schedule_run_changed(namespace: str | None, labels: Any, **_: Any) -> None:
    _wake(namespace or "", str(labels.get(names.LABEL_SCHEDULE)))


async def _loop(key: tuple[str, str]) -> None:
    wake = _wakeups.setdefault(key, asyncio.Event())
    failures = 0
    try:
        while key in _bodies:
            wake.clear()
            try:
                delay = await asyncio.to_thread(_get().reconcile, _bodies[key])
                failures = 0
            except Exception as exc:  # the loop's boundary: log, look again soon (backing off)
                failures += 1
                delay = backoff.capped(failures, initial=2.0, cap=60.0)
                logger.warning("schedule %s/%s: reconcile failed (%d in a row): %s", *key, failures, exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), timeout=max(0.0, delay))
    finally:
        if _wakeups.get(key) is wake:
            _wakeups.pop(key, None)
