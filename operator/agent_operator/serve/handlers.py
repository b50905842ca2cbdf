"""kopf handlers: wiring only. The reconcile logic is in ``reconcile`` (pure) and ``runner`` (I/O).

* one **loop per AgentRun** (``run_loops``: an asyncio task started from the run's watch events, not a kopf
  daemon) loops observe → decide → act, sleeping until its next deadline (poll interval, backoff, approval
  deadline, Lease expiry, TTL) or until woken by an event of the run, one of its Pods, or its Lease;
* **indexes** of the runs' Pods and Leases (in-memory, fed by kopf's watches): a reconcile costs no API
  read, only the few Postgres queries of ``observe.Observer.world``;
* **on.delete** finishes deletion: the run's loop is told to stop by the deletion's event; the handler stops
  the worker, returns only when its Pod is gone and the loop has exited, and kopf removes
  ``agentrun.dev/finalizer``;
* **startup** serves /metrics and /healthz, waits for leadership
  (``agent_operator.serve.leader``), migrates the schema and opens the Postgres pool before kopf starts
  watching; **cleanup** releases the Lease.

Loadable both ways: ``agentrun operator`` (``agent_operator.serve.main``) and
``kopf run --standalone -m agent_operator.serve.handlers``.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

import kopf

from agent_operator import kube
from agent_operator import settings as settings_
from agent_operator.act import lockwatch, retention
from agent_operator.decide import model
from agent_operator.observe import memory as memory_
from agent_operator.observe import metrics, throttle
from agent_operator.observe import world as observe
from agent_operator.serve import kopf_config, leader, readapi, run_loops, runner
from agentrun_core import backoff, lease_math, store
from agentrun_core.api import protocol
from agentrun_core.store import connect

logger = logging.getLogger(__name__)

# kopf decodes and copies whole objects recursively; an AgentRun nested thousands deep (the API server
# accepts ~10,000) must not crash its watcher and so the operator. The run itself is refused before
# admission (phases.input_problem); this only keeps the process alive to say so.
sys.setrecursionlimit(max(sys.getrecursionlimit(), 40_000))

RUNS = (kube.GROUP, kube.VERSION, kube.PLURAL)
ERROR_RETRY_SECONDS = 2.0  # first retry after a failed reconcile; doubled per failure in a row
MAX_ERROR_RETRY_SECONDS = 30.0


class _State:
    """Process-wide objects, set up at startup (kopf's ``memo`` would do too; this one is typed)."""

    settings: settings_.Settings
    reconciler: runner.Runner
    elector: leader.Elector | None = None
    keeper: leader.Keeper | None = None
    purger: retention.Purger | None = None
    lockwatch: lockwatch.LockWatch | None = None
    pool: connect.Pool | None = None
    # kopf's run_pods and run_leases indexes, once the first run event has passed them (None before: the
    # throttle's seeding asks again; no loop runs before that event)
    indexes: tuple[Any, Any] | None = None
    memories: dict[str, memory_.RunMemory]
    leading: threading.Event  # set once this replica leads (for good: losing the Lease exits the process)
    throttle: throttle.Starts | None = None
    read_api: Any = None  # the read API's HTTPS server (agent_operator.serve.readapi), when served


STATE = _State()
STATE.memories = {}
STATE.leading = threading.Event()


def _migrate(dsn: str) -> list[str]:
    with connect.connect(dsn) as conn:
        return store.migrate(conn)


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
    kopf_config.configure_kopf(settings)
    cfg = settings_.from_env()
    STATE.settings = cfg
    api = kube.client(cfg.kubeconfig or None)
    # /metrics and /healthz before leadership: a standby must answer its probes (or the kubelet restarts it
    # every few minutes), but it exports ledger figures only once it leads, so they are never doubled.
    if cfg.metrics_port:
        metrics.start_metrics_server(cfg.metrics_port, dsn=cfg.dsn, active=STATE.leading.is_set)
    if cfg.read_api.port:
        # Every replica answers reads (they need no leadership). One that cannot serve them still runs the
        # runs: the reason is logged, and the APIService shows Available=False.
        try:
            STATE.read_api = await asyncio.to_thread(readapi.start, cfg, api)
        except (OSError, ValueError, kube.KubeError) as exc:
            logger.error("read API (%s) not served: %s", readapi.API_VERSION, exc)
    if cfg.leader.enabled:
        STATE.elector = leader.Elector(api, cfg.leader)
        await leader.acquire(STATE.elector)
        STATE.keeper = leader.Keeper(STATE.elector).start()  # its own thread: never behind reconciles
    STATE.leading.set()
    if cfg.migrate:
        # Only the leader migrates, and before the first admission row is written.
        applied = await asyncio.to_thread(_migrate, cfg.dsn)
        logger.info("schema migrations applied: %s", ", ".join(applied) or "(none, up to date)")
    STATE.pool = connect.open_pool(cfg.dsn, name="agentrun-operator", max_size=4)
    may_write = STATE.elector.may_act if STATE.elector is not None else None
    loop = asyncio.get_running_loop()
    STATE.throttle = throttle.Starts(
        cfg.reconcile.max_workers_per_namespace,
        # Reconciles run in threads; the wake-up Events belong to this loop.
        wake=lambda ns, name: loop.call_soon_threadsafe(_wake, ns, name),
        seed=_live_worker_runs,
        key_seed=_live_worker_runs_of_key,
    )
    STATE.reconciler = runner.Runner(cfg, api, STATE.pool, may_write=may_write, throttle_=STATE.throttle)
    STATE.purger = retention.Purger(
        STATE.pool,
        interval_seconds=cfg.reconcile.purge_interval_seconds,
        batch=cfg.reconcile.purge_batch,
        alive=lambda namespaces: kube.existing_runs(api, namespaces),
        after_purge=_drop_gone_tenants,
    ).start()
    if cfg.reconcile.tenant_lock_wait_seconds > 0:
        wait = cfg.reconcile.tenant_lock_wait_seconds
        STATE.lockwatch = lockwatch.LockWatch(cfg.dsn, wait_seconds=wait).start()
    logger.info("operator ready: namespaces=%s", ",".join(cfg.namespaces) or "(cluster-wide)")


@kopf.on.cleanup()
async def cleanup(**_: Any) -> None:
    await LOOPS.stop_all()  # each run's round ends first: nothing writes after the Lease is released
    if STATE.purger is not None:
        await asyncio.to_thread(STATE.purger.stop)
    if STATE.lockwatch is not None:
        await asyncio.to_thread(STATE.lockwatch.stop)
    if STATE.keeper is not None:
        await asyncio.to_thread(STATE.keeper.stop)
    if STATE.elector is not None:
        await asyncio.to_thread(STATE.elector.release)
    if STATE.pool is not None:
        STATE.pool.close()


# --- indexes (in-memory caches fed by kopf's watches) -----------------------------------------------------

# Pods are named with their group ("v1": the core group): "pods" alone makes kopf discover every API group
# of the cluster at start-up, and an aggregated API that is not answering (this operator's own read API
# while no replica serves it, a broken metrics-server) fails that discovery with 503s and retries.
PODS = ("v1", "pods")


@kopf.index(*PODS, labels={protocol.LABEL_RUN: kopf.PRESENT})
def run_pods(namespace: str | None, labels: Mapping[str, str], body: kopf.Body, **_: Any) -> Any:
    # Keyed by the run's uid, not its name: a run recreated under the same name never sees the earlier
    # run's Pods (orphaned by `kubectl delete --cascade=orphan`, or not yet garbage-collected).
    return {(namespace or "", labels.get(protocol.LABEL_RUN_UID, "")): model.PodInfo.from_body(body)}


@kopf.index("coordination.k8s.io", "v1", "leases", labels={protocol.LABEL_RUN: kopf.PRESENT})
def run_leases(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> Any:
    return {(namespace or "", name): (_lease_run_uid(body), lease_math.LeaseSummary.from_body(body))}


def _lease_run_uid(body: Mapping[str, Any]) -> str:
    """The uid of the run a Lease belongs to, from its label or AgentRun owner ("" when it says nothing)."""
    meta = body.get("metadata") or {}
    label = (meta.get("labels") or {}).get(protocol.LABEL_RUN_UID)
    if label:
        return str(label)
    owners = [o.get("uid") for o in meta.get("ownerReferences") or () if o.get("kind") == "AgentRun"]
    return str(owners[0]) if owners else ""


def _drop_gone_tenants() -> None:
    """After each purge pass (leader only): drop the worker roles of namespaces gone and purged."""
    reconciler = STATE.reconciler
    if reconciler is None:
        return
    try:
        dropped = reconciler.tenants.drop_gone()
    except Exception as exc:  # Postgres or the API server away: the next pass retries
        logger.warning(
            "tenants: dropping the roles of gone namespaces failed: %s: %s", type(exc).__name__, exc
        )
        return
    if dropped:
        logger.info("tenants: dropped the worker roles of gone namespaces: %s", ", ".join(dropped))


def _live_worker_runs_of_key(namespace: str, key: str) -> list[tuple[str, str, str]] | None:
    """As ``_live_worker_runs``, for the runs of ``namespace`` whose live worker Pod carries ``key``'s
    concurrency label (a spec.concurrency key's seeding)."""
    index = STATE.indexes[0] if STATE.indexes is not None else None
    if index is None:
        return None
    label = protocol.concurrency_label(key)
    return [
        (ns, uid, "")
        for (ns, uid), infos in list(index.items())
        if ns == namespace and any(not i.terminated and i.concurrency == label for i in infos)
    ]


def _live_worker_runs() -> list[tuple[str, str, str]] | None:
    """(namespace, run uid, "") of every run with a worker Pod that has not terminated, from the Pod index:
    what a restarted operator finds running before it grants any start (``throttle`` seeding)."""
    index = STATE.indexes[0] if STATE.indexes is not None else None
    if index is None:
        return None  # no run event has passed the index yet: the throttle asks again
    return [
        (ns, uid, "")
        for (ns, uid), infos in list(index.items())
        if any(not info.terminated for info in infos)
    ]


def _wake(namespace: str, name: str) -> None:
    LOOPS.wake((namespace, name))


@kopf.on.event(*PODS, labels={protocol.LABEL_RUN: kopf.PRESENT})
async def pod_changed(
    namespace: str | None, labels: Mapping[str, str], type: str | None, body: kopf.Body, **_: Any
) -> None:
    if type == "DELETED":
        # The index forgets a deleted Pod; its final state (DisruptionTarget, exit code) says why the attempt
        # ended (memory.pod_deleted). Only for runs this replica reconciles: a memory made here for a run
        # already deleted would never be dropped.
        memory = STATE.memories.get(labels.get(protocol.LABEL_RUN_UID, ""))
        if memory is not None:
            memory_.pod_deleted(memory, body)
    elif _orphan_held(body, labels):
        await asyncio.to_thread(_release_orphan, namespace or "", labels, body)
    _wake(namespace or "", labels[protocol.LABEL_RUN])


def _orphan_held(body: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A deleted Pod that still carries the worker Pod finalizer, of a run this replica has no loop for."""
    meta = body.get("metadata") or {}
    return (
        STATE.leading.is_set()
        and bool(meta.get("deletionTimestamp"))
        and protocol.POD_FINALIZER in (meta.get("finalizers") or ())
        and labels.get(protocol.LABEL_RUN_UID, "") not in STATE.memories
    )


def _release_orphan(namespace: str, labels: Mapping[str, str], body: Mapping[str, Any]) -> None:
    """Release a held Pod whose AgentRun is gone (cleanup's rule): only on a fresh read that finds no run of
    its name, or one with another uid (a run's loop may simply not have started yet)."""
    run, uid = labels[protocol.LABEL_RUN], labels.get(protocol.LABEL_RUN_UID, "")
    pod = str((body.get("metadata") or {}).get("name") or "")
    api = STATE.reconciler.api
    try:
        found = kube.get_run(api, namespace, run)
    except kube.NotFound:
        found = None
    except kube.KubeError as exc:  # unknown is never "gone": the next event of the Pod asks again
        logger.info("pod %s/%s: cannot tell whether its run exists (%s); keeping it", namespace, pod, exc)
        return
    if found is not None and str((found.get("metadata") or {}).get("uid") or "") == uid:
        return
    logger.info("pod %s/%s: its AgentRun (uid %s) is gone; releasing it", namespace, pod, uid or "?")
    try:
        kube.release_pod(api, namespace, pod)
    except kube.KubeError as exc:
        logger.warning("pod %s/%s: could not release it: %s", namespace, pod, exc)


@kopf.on.event(*RUNS)
async def run_changed(
    namespace: str | None, name: str, uid: str, type: str | None, body: kopf.Body, **kwargs: Any
) -> None:
    # kopf passes its indexes by name, filled before any handler runs: the loops read them from here.
    STATE.indexes = (kwargs["run_pods"], kwargs["run_leases"])
    LOOPS.seen((namespace or "", name), uid, body, gone=type == "DELETED")


def _inputs(
    namespace: str,
    name: str,
    uid: str,
    run_pods: kopf.Index[Any, Any],
    run_leases: kopf.Index[Any, Any],
) -> tuple[list[model.PodInfo], lease_math.LeaseSummary | None]:
    found = list(run_pods.get((namespace, uid), ()))
    # An earlier run's Lease of the same name is not this run's: it says nothing about this run's worker.
    leases = [
        s for owner, s in run_leases.get((namespace, protocol.lease_name(name)), ()) if owner in ("", uid)
    ]
    return found, (leases[0] if leases else None)


# --- the per-run loop ---------------------------------------------------------------------------------


async def _run_rounds(key: tuple[str, str], loop: run_loops.Loop) -> None:
    """One run's loop (``run_loops``): a round, then sleep until its next deadline or a wake-up."""
    memory = STATE.memories.setdefault(loop.uid, memory_.RunMemory())
    while not loop.stopping:
        delay = await _round(key, loop, memory)
        await run_loops.sleep(loop, _bounded(delay, memory))


async def _round(key: tuple[str, str], loop: run_loops.Loop, memory: memory_.RunMemory) -> float:
    """One reconcile of the run; the seconds until the next. A frame of its own: what a round read (the
    parsed body, its Pods, the plan) is not kept alive while the run sleeps."""
    namespace, name = key
    async with LOOPS.round(loop):
        assert STATE.indexes is not None  # set by the event that started this loop
        run_pods, run_leases = STATE.indexes
        pod_list, lease = _inputs(namespace, name, loop.uid, run_pods, run_leases)
        try:
            watched = observe.Watched(loop.current(), pod_list, lease)
            plan = await asyncio.to_thread(STATE.reconciler.reconcile, watched, memory)
        except Exception as exc:  # the loop's boundary: log, look again soon (backing off)
            return _failed(key, memory, exc)
    memory.failures = 0
    return plan.requeue_after


def _failed(key: tuple[str, str], memory: memory_.RunMemory, exc: Exception) -> float:
    """A failed round: logged; the next one after a backoff that grows with the failures in a row."""
    memory.failures += 1
    delay = backoff.capped(memory.failures, initial=ERROR_RETRY_SECONDS, cap=MAX_ERROR_RETRY_SECONDS)
    logger.warning(
        "reconcile of %s/%s failed (%d in a row, next try in %.0fs): %s: %s",
        *key,
        memory.failures,
        delay,
        type(exc).__name__,
        exc,
    )
    return delay


LOOPS = run_loops.Loops(_run_rounds)


def _bounded(delay: float, memory: memory_.RunMemory) -> float:
    """Never sleep past the moment the run's Lease would expire by our observation."""
    expires = memory.observer.expires_in(time.monotonic())
    if expires is not None:
        delay = min(delay, expires + 0.05)
    return max(0.0, delay)


@kopf.on.delete(*RUNS)
async def run_deleted(
    body: kopf.Body,
    namespace: str | None,
    name: str,
    uid: str,
    **kwargs: Any,
) -> None:
    namespace = namespace or ""
    memory = STATE.memories.setdefault(uid, memory_.RunMemory())
    pod_list, lease = _inputs(namespace, name, uid, kwargs["run_pods"], kwargs["run_leases"])
    try:
        watched = observe.Watched(body, pod_list, lease, deleting=True)
        plan = await asyncio.to_thread(STATE.reconciler.reconcile, watched, memory)
    except Exception as exc:
        raise kopf.TemporaryError(
            f"deletion of {namespace}/{name}: {exc}", delay=ERROR_RETRY_SECONDS
        ) from exc
    if not plan.done:
        raise kopf.TemporaryError("waiting for the worker Pod to stop", delay=max(0.5, plan.requeue_after))
    # The run's loop ends its round before kopf removes the finalizer (as kopf waits for its daemons).
    await LOOPS.stopped((namespace, name), uid)
    # The worker is gone: the run's rows may go once the AgentRun has gone too (the purger checks).
    await asyncio.to_thread(_mark_for_purge, body, uid)
    STATE.memories.pop(uid, None)
    if STATE.throttle is not None:
        STATE.throttle.forget(namespace, uid)


def _mark_for_purge(body: Mapping[str, Any], uid: str) -> None:
    """Mark a deleted run for purge (``retention.purge_delay``: at once after its TTL, else after the
    retention). Its finish is read from Postgres, with Postgres' clock: the status in ``body`` may predate
    the final status, written in the same round as the TTL's delete."""
    db = STATE.reconciler.db
    run, db_now = store.get_run_now(db, uid)
    finished_at, now = (run.finished_at, db_now) if run is not None and run.finished_at else (None, None)
    after, why = retention.purge_delay(
        body,
        finished_at,
        now or datetime.datetime.now(datetime.UTC),
        STATE.settings.reconcile.retention_seconds,
    )
    store.mark_for_purge(db, uid, after_seconds=after, reason=why)


# The AgentRunSchedule reconciler registers its handlers on import (after this module's startup handler).
from agent_operator.serve import schedule_handlers as _schedule_handlers  # noqa: E402,F401
