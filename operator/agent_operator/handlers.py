"""kopf handlers: wiring only. The reconcile logic is in ``reconcile`` (pure) and ``runner`` (I/O).

* one **daemon per AgentRun** loops observe → decide → act, sleeping until its next deadline (poll
  interval, backoff, approval deadline, Lease expiry, TTL) or until woken by an event of the run, one of
  its Pods, or its Lease;
* **indexes** of the runs' Pods and Leases (in-memory, fed by kopf's watches): a reconcile costs no API
  read, only the few Postgres queries of ``runner.observe``;
* **on.delete** finishes deletion: the daemon is stopped by kopf first; the handler then stops the worker
  and returns only when its Pod is gone, and kopf removes ``agentrun.dev/finalizer``;
* **startup** serves /metrics and /healthz, waits for leadership
  (``agent_operator.leader``), migrates the schema and opens the Postgres pool before kopf starts
  watching; **cleanup** releases the Lease.

Loadable both ways: ``agentrun operator`` (``agent_operator.main``) and
``kopf run --standalone -m agent_operator.handlers``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

import kopf
import psycopg
import psycopg_pool

from agent_operator import kube, leader, metrics, model, runner
from agent_operator import settings as settings_
from agent_worker import lease_math, store

logger = logging.getLogger(__name__)

RUNS = (kube.GROUP, kube.VERSION, kube.PLURAL)
ERROR_RETRY_SECONDS = 2.0  # first retry after a failed reconcile; doubled per failure in a row
MAX_ERROR_RETRY_SECONDS = 30.0


class _State:
    """Process-wide objects, set up at startup (kopf's ``memo`` would do too; this one is typed)."""

    settings: settings_.Settings
    reconciler: runner.Runner
    elector: leader.Elector | None = None
    keeper: asyncio.Task[None] | None = None
    pool: psycopg_pool.ConnectionPool[Any] | None = None
    wakeups: dict[tuple[str, str], asyncio.Event]
    memories: dict[str, runner.RunMemory]
    leading: threading.Event  # set once this replica leads (for good: losing the Lease exits the process)


STATE = _State()
STATE.wakeups = {}
STATE.memories = {}
STATE.leading = threading.Event()


def _migrate(dsn: str) -> list[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return store.migrate(conn)


def configure_kopf(settings: kopf.OperatorSettings) -> None:
    settings.persistence.finalizer = model.FINALIZER
    # Progress of kopf's own handlers (only on.delete here) in annotations: status belongs to us.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="kopf.agentrun.dev")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="kopf.agentrun.dev", key="last-handled-configuration"
    )
    settings.peering.standalone = True  # leadership comes from our Lease, never from kopf peering
    settings.posting.enabled = False  # the runner posts the Events of transitions itself
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
    configure_kopf(settings)
    cfg = settings_.from_env()
    STATE.settings = cfg
    api = kube.client(cfg.kubeconfig or None)
    # /metrics and /healthz before leadership: a standby must answer its probes (or the kubelet restarts it
    # every few minutes), but it exports ledger figures only once it leads, so they are never doubled.
    if cfg.metrics_port:
        metrics.start_metrics_server(cfg.metrics_port, dsn=cfg.dsn, active=STATE.leading.is_set)
    if cfg.leader.enabled:
        STATE.elector = leader.Elector(api, cfg.leader)
        await leader.acquire(STATE.elector)
        STATE.keeper = asyncio.create_task(leader.keep(STATE.elector), name="leader-keeper")
    STATE.leading.set()
    if cfg.migrate:
        # Only the leader migrates, and before the first admission row is written.
        applied = await asyncio.to_thread(_migrate, cfg.dsn)
        logger.info("schema migrations applied: %s", ", ".join(applied) or "(none, up to date)")
    STATE.pool = psycopg_pool.ConnectionPool(
        cfg.dsn, min_size=1, max_size=4, kwargs={"autocommit": True}, open=True, name="agentrun-operator"
    )
    STATE.reconciler = runner.Runner(cfg, api, STATE.pool)
    logger.info("operator ready: namespaces=%s", ",".join(cfg.namespaces) or "(cluster-wide)")


@kopf.on.cleanup()
async def cleanup(**_: Any) -> None:
    if STATE.keeper is not None:
        STATE.keeper.cancel()
    if STATE.elector is not None:
        await asyncio.to_thread(STATE.elector.release)
    if STATE.pool is not None:
        STATE.pool.close()


# --- indexes (in-memory caches fed by kopf's watches) -----------------------------------------------------


@kopf.index("pods", labels={model.LABEL_RUN: kopf.PRESENT})
def run_pods(namespace: str | None, labels: Mapping[str, str], body: kopf.Body, **_: Any) -> Any:
    return {(namespace or "", labels[model.LABEL_RUN]): model.PodInfo.from_body(body)}


@kopf.index("coordination.k8s.io", "v1", "leases", labels={model.LABEL_RUN: kopf.PRESENT})
def run_leases(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> Any:
    return {(namespace or "", name): lease_math.LeaseSummary.from_body(body)}


def _wake(namespace: str, name: str) -> None:
    event = STATE.wakeups.get((namespace, name))
    if event is not None:
        event.set()


@kopf.on.event("pods", labels={model.LABEL_RUN: kopf.PRESENT})
async def pod_changed(namespace: str | None, labels: Mapping[str, str], **_: Any) -> None:
    _wake(namespace or "", labels[model.LABEL_RUN])


@kopf.on.event(*RUNS)
async def run_changed(namespace: str | None, name: str, **_: Any) -> None:
    _wake(namespace or "", name)


def _inputs(
    namespace: str, name: str, run_pods: kopf.Index[Any, Any], run_leases: kopf.Index[Any, Any]
) -> tuple[list[model.PodInfo], lease_math.LeaseSummary | None]:
    found = list(run_pods.get((namespace, name), ()))
    leases = list(run_leases.get((namespace, model.lease_name(name)), ()))
    return found, (leases[0] if leases else None)


# --- the per-run loop ---------------------------------------------------------------------------------


@kopf.daemon(*RUNS, cancellation_timeout=10.0)
async def run_loop(
    stopped: Any,
    body: kopf.Body,
    namespace: str | None,
    name: str,
    uid: str,
    **kwargs: Any,
) -> None:
    namespace = namespace or ""
    run_pods, run_leases = kwargs["run_pods"], kwargs["run_leases"]  # kopf passes indexes by name
    key = (namespace, name)
    wake = STATE.wakeups.setdefault(key, asyncio.Event())
    memory = STATE.memories.setdefault(uid, runner.RunMemory())
    try:
        while not stopped:
            wake.clear()
            pod_list, lease = _inputs(namespace, name, run_pods, run_leases)
            try:
                plan = await asyncio.to_thread(STATE.reconciler.reconcile, body, pod_list, lease, memory)
                delay = plan.requeue_after
                memory.failures = 0
            except Exception as exc:  # the handler boundary: log, look again soon (backing off)
                memory.failures += 1
                delay = min(MAX_ERROR_RETRY_SECONDS, ERROR_RETRY_SECONDS * 2 ** min(memory.failures - 1, 5))
                logger.warning(
                    "reconcile of %s/%s failed (%d in a row, next try in %.0fs): %s: %s",
                    namespace,
                    name,
                    memory.failures,
                    delay,
                    type(exc).__name__,
                    exc,
                )
            await _sleep(wake, stopped, _bounded(delay, memory))
    finally:
        if STATE.wakeups.get(key) is wake:
            STATE.wakeups.pop(key, None)


def _bounded(delay: float, memory: runner.RunMemory) -> float:
    """Never sleep past the moment the run's Lease would expire by our observation."""
    expires = memory.observer.expires_in(time.monotonic())
    if expires is not None:
        delay = min(delay, expires + 0.05)
    return max(0.0, delay)


async def _sleep(wake: asyncio.Event, stopped: Any, seconds: float) -> None:
    if seconds <= 0:
        await asyncio.sleep(0)
        return
    waiter = asyncio.ensure_future(wake.wait())
    stopper = asyncio.ensure_future(stopped.wait())
    try:
        await asyncio.wait({waiter, stopper}, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
        stopper.cancel()


@kopf.on.delete(*RUNS)
async def run_deleted(
    body: kopf.Body,
    namespace: str | None,
    name: str,
    uid: str,
    **kwargs: Any,
) -> None:
    namespace = namespace or ""
    memory = STATE.memories.setdefault(uid, runner.RunMemory())
    pod_list, lease = _inputs(namespace, name, kwargs["run_pods"], kwargs["run_leases"])
    try:
        plan = await asyncio.to_thread(
            STATE.reconciler.reconcile, body, pod_list, lease, memory, deleting=True
        )
    except Exception as exc:
        raise kopf.TemporaryError(
            f"deletion of {namespace}/{name}: {exc}", delay=ERROR_RETRY_SECONDS
        ) from exc
    if not plan.done:
        raise kopf.TemporaryError("waiting for the worker Pod to stop", delay=max(0.5, plan.requeue_after))
    STATE.memories.pop(uid, None)
