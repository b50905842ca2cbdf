"""What a run's daemon remembers between reconciles (``RunMemory``), and the rules for feeding it.

Rule: memory lives as long as the run's daemon and is written only by this process: the Lease observer
(expiry by locally observed time, never going back in time), what this process wrote last (the watch may lag
behind its own writes), when it created the current Pod (the watch may lag behind that too), timing for the
resume-latency metric, and each Pod's final state from the watch's DELETED event.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from agent_operator.decide import model
from agentrun_core import lease_math
from agentrun_core.api import protocol

OUTAGE_SLACK_SECONDS = 5.0  # reconcile and poll delays between a Lease looking expired and our fresh read


@dataclasses.dataclass(slots=True)  # one per run this replica holds, parked ones included (P4)
class RunMemory:
    observer: lease_math.LeaseObserver = dataclasses.field(default_factory=lease_math.LeaseObserver)
    last_status: dict[str, Any] | None = None
    created_pods: dict[str, float] = dataclasses.field(default_factory=dict)  # pod name -> monotonic
    handled_rvs: set[str] = dataclasses.field(default_factory=set)
    lost_at: float | None = None  # monotonic time the last attempt was judged lost
    lost_reason: str = "other"
    waiting_running: str | None = None  # pod name whose Running we wait for (resume latency)
    renew_failure_version: tuple[object, ...] | None = None
    last_pod_error: str | None = None
    failures: int = 0  # reconciles failed in a row (error backoff)
    seen_pods: dict[str, model.PodInfo] = dataclasses.field(default_factory=dict)  # last state per Pod name
    # The final state of each of the run's Pods, from the watch's DELETED event (pod name -> state); see
    # ``pod_deleted``. Written only by the watch handler, never by a reconcile, so a reconcile holding an
    # older view of the index cannot overwrite it.
    final_pods: dict[str, model.PodInfo] = dataclasses.field(default_factory=dict)
    # resourceVersions of the run's Lease that a fresh read showed to be replaced already: the watch cache
    # may still serve them (it lags or stalls), and feeding them to the observer again would be a step back.
    superseded: set[str] = dataclasses.field(default_factory=set)
    unknown_since: float | None = None  # monotonic: fresh reads failing since (the view is "unknown")
    outage: tuple[float, float] | None = None  # (since, until) monotonic: the last period fresh reads failed
    written_rv: tuple[str, str] | None = None  # (resourceVersion we patched from, the one our patch made)
    blocked: tuple[str, float] | None = None  # (pod name, monotonic since) the current Pod cannot start
    unclaimed: tuple[str, float] | None = None  # (pod name, since) Running, its worker without the Lease
    pod_refused: tuple[int, int, str, float] | None = None  # (attempt, HTTP status, message, since)
    terminated_seen: dict[str, float] = dataclasses.field(default_factory=dict)  # pod name -> monotonic
    notify_problem: tuple[str, str] | None = None  # (reason, message): the NotificationFailed condition
    notify_warned: set[str] = dataclasses.field(default_factory=set)  # notification Warnings already posted
    quiet_rounds: int = 0  # reconciles in a row that waited and changed nothing (reconcile.quiet)


def status_base(memory: RunMemory, body: Mapping[str, Any]) -> dict[str, Any]:
    """The status a round decides from: what this process wrote last, until the watch delivers it (the
    watch may lag behind our own writes), else the body's.

    Once the body shows the very status written last, the copy is dropped: a quiet run's status is then held
    once, in its body (10,000 parked runs, P4). A lagging body that happens to equal it is as good a base;
    a write decided from an older base than the API server's is refused by its resourceVersion
    precondition (``Runner._write_status``)."""
    seen = dict(body.get("status") or {})
    if memory.last_status is not None and memory.last_status != seen:
        return memory.last_status
    memory.last_status = None
    return seen


def pod_deleted(memory: RunMemory, body: Mapping[str, Any]) -> None:
    """Keep the final state of a run's Pod that the watch delivered in its DELETED event.

    Rule: why an attempt's Pod ended is read from the last state the API server had of it, not from what a
    reconcile happened to sample. The watch-fed index drops a Pod on DELETED, and a reconcile sees only what
    the index holds when it runs; on a real kubelet an evicted worker that drains at once goes Running →
    DisruptionTarget → Failed → deleted within a second, often between two reconciles (kopf also batches a
    Pod's events and hands over only the latest). The DELETED event's object still carries the
    DisruptionTarget condition and the exit code, so it is kept here: without it the run's last view of its
    Pod is ``Running``, and the eviction would be recorded as a plain ``deleted``.
    """
    info = model.PodInfo.from_body(body)
    if info.name:
        memory.final_pods[info.name] = info


def since(mark: tuple[str, float] | None, name: str | None, now: float) -> tuple[str, float] | None:
    """Keep the start of a condition of Pod ``name`` (None: the condition does not hold now)."""
    if name is None:
        return None
    return mark if mark is not None and mark[0] == name else (name, now)


def lapsed_in(outage: tuple[float, float] | None, observer: lease_math.LeaseObserver, now: float) -> bool:
    """Whether the Lease stopped changing shortly before, or during, a period in which our own fresh reads
    failed: the API server was unreachable for us, so (most likely) for the worker's renewals too.

    We only try a fresh read once the Lease already looks expired, so the failures start a lease duration
    (plus a poll) after its last change: the window reaches back two durations and ``OUTAGE_SLACK_SECONDS``.
    A Lease that stopped changing earlier than that was lost to something else (a hung worker)."""
    if outage is None:
        return False
    unchanged_since = now - observer.unchanged_for(now)
    earliest = outage[0] - 2 * observer.duration() - OUTAGE_SLACK_SECONDS
    return earliest <= unchanged_since <= outage[1]


def feed_lease(memory: RunMemory, lease: lease_math.LeaseSummary | None, now: float) -> lease_math.LeaseState:
    """Feed one reading of the run's Lease (cache or fresh) to the observer, never going back in time."""
    if lease is not None and lease.resource_version in memory.superseded:
        return memory.observer.state(now)  # an older version than one already seen: ignore it
    last = memory.observer.last
    if last is not None and last.resource_version and (lease is None or lease.version() != last.version()):
        if len(memory.superseded) > 256:
            memory.superseded.clear()  # bounded; a forgotten old version only restarts the timer (safe side)
        memory.superseded.add(last.resource_version)
    return memory.observer.observe(lease, now)


def terminated_for(
    memory: RunMemory, by_attempt: Mapping[int, model.PodInfo], now: float
) -> dict[int, float]:
    """attempt -> seconds this process has seen its Pod terminated (``cleanup``'s clock)."""
    seen = memory.terminated_seen
    for name in [n for n in seen if n not in {p.name for p in by_attempt.values()}]:
        del seen[name]  # gone: bounded memory
    return {
        attempt: now - seen.setdefault(pod.name, now) for attempt, pod in by_attempt.items() if pod.terminated
    }


def _claimed_by(body: Mapping[str, Any]) -> set[str]:
    """The run uids a Pod or Lease names: its ``agentrun.dev/run-uid`` label, else its AgentRun owners."""
    meta = body.get("metadata") or {}
    label = (meta.get("labels") or {}).get(protocol.LABEL_RUN_UID)
    if label is not None:
        return {str(label)}
    return {str(o.get("uid")) for o in meta.get("ownerReferences") or () if o.get("kind") == "AgentRun"}


def foreign(body: Mapping[str, Any], run_uid: str) -> bool:
    """Positively another run's object: its run-uid label or its AgentRun owner names another uid."""
    claims = _claimed_by(body)
    return bool(claims) and run_uid not in claims


def owned(body: Mapping[str, Any], run_uid: str) -> bool:
    """The object belongs to the run with this uid (its ``agentrun.dev/run-uid`` label or owner reference).

    A run recreated under the same name must never take the earlier run's Pods or Lease for its own.
    """
    return run_uid in _claimed_by(body)
