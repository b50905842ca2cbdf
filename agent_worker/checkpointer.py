"""The worker's LangGraph saver: PostgresSaver with every write fenced, a head pointer, and its own timings.

Rule: a checkpoint (``put``) or a task's pending writes (``put_writes``) are written in ONE transaction that
starts with the same epoch check as the ledger (``store.fence_checkpoint``: the run row locked, its
``lease_epoch`` compared with ours). A deposed worker's write is refused with ``errors.Fenced`` and rolled
back whole, so a zombie can never make its state the thread's newest.

The transaction is one psycopg pipeline (``store.pipelined_transaction``): BEGIN, the fence, PostgresSaver's
statements, COMMIT and a single Sync — one round trip per write, like bare PostgresSaver's own pipeline. The
fence refuses server-side (migration 15), which aborts everything after it up to the Sync, COMMIT included;
``store.raise_if_refused`` turns that error back into ``errors.Fenced`` (``errors.RunNotFound`` for a run
that is not admitted).

A root ``put`` also moves ``agentrun_runs.head_checkpoint_id`` (a subgraph ``put`` moves its namespace's row
in ``agentrun_checkpoint_heads``) in that transaction. ``get_tuple`` without a ``checkpoint_id`` — "the
latest", which LangGraph asks for at every resume — returns the head, never "newest by id": ids are uuid6 made
from the writer's wall clock, so a worker whose clock is behind writes ids that sort before older ones.

Writes may run on LangGraph's background threads (``durability="async"``, and the final save of ``exit``); a
refused or failed write there is re-raised by LangGraph only when the loop exits, so the saver also reports it
through ``on_refused`` at once (the runner makes it the run context's sticky stop: effects refuse, the stream
ends, the worker exits 12 — or 14 for a lost Postgres connection). It is never swallowed.

Timing: each write is timed here, from taking a connection to the commit (``perf_counter``). Root puts'
figures are kept by checkpoint id for the runner's step events (``agentrun_step_events.checkpoint_seconds``,
the trace's CKPT-WRITE column) and logged at INFO as ``checkpoint write ns='' id=... seconds=...``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata, CheckpointTuple
from langgraph.checkpoint.postgres import PostgresSaver

from agent_worker import infra
from agentrun_core import errors, faults, store
from agentrun_core.store import connect

logger = logging.getLogger(__name__)


def _ns(config: RunnableConfig) -> str:
    return str(config.get("configurable", {}).get("checkpoint_ns", "") or "")


class FencedSaver(PostgresSaver):
    def __init__(
        self,
        pool: connect.Pool,
        *,
        run_id: str,
        epoch: int,
        on_refused: Callable[[errors.ControlSignal], None] | None = None,
    ) -> None:
        super().__init__(pool)
        self.pool = pool
        self.run_id = run_id
        self.epoch = epoch
        self.on_refused = on_refused
        self._tx = threading.local()  # the connection of the fenced transaction this thread is inside
        self._timings: dict[str, float] = {}  # root checkpoint id -> seconds its put took
        self._timings_lock = threading.Lock()

    # --- reads ---------------------------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        conf = config.get("configurable", {})
        if conf.get("checkpoint_id") or conf.get("thread_id") != self.run_id:
            return super().get_tuple(config)
        head = store.get_checkpoint_head(self.pool, run_id=self.run_id, checkpoint_ns=_ns(config))
        if head is None:  # nothing written fenced yet (or a run from before migration 2): LangGraph's rule
            return super().get_tuple(config)
        return super().get_tuple({**config, "configurable": {**conf, "checkpoint_id": head}})

    # --- writes --------------------------------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        ns = _ns(config)
        t0 = time.perf_counter()
        with self._fenced(ns, checkpoint["id"]):
            saved = super().put(config, checkpoint, metadata, new_versions)
        seconds = time.perf_counter() - t0
        if ns == "":
            with self._timings_lock:
                self._timings[checkpoint["id"]] = seconds
        logger.info("checkpoint write ns=%r id=%s seconds=%r", ns, checkpoint["id"], seconds)
        return saved

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        with self._fenced(_ns(config), None):
            super().put_writes(config, writes, task_id, task_path)
        # The gap a kill can fall into in every mode but ``exit``: the task is done in Postgres, its step's
        # checkpoint is not (LangGraph saves them on separate threads, the checkpoint after the whole step).
        faults.hit("after_task_writes")

    def write_seconds(self, checkpoint_id: str) -> float | None:
        """Seconds this saver's ``put`` of a root checkpoint took; ``None`` if it has not (yet) written it."""
        with self._timings_lock:
            return self._timings.get(checkpoint_id)

    # --- the fenced transaction ----------------------------------------------------------------------

    @contextlib.contextmanager
    def _fenced(self, ns: str, checkpoint_id: str | None) -> Iterator[None]:
        what = "checkpoint write" if checkpoint_id is not None else "checkpoint pending writes"
        try:
            try:
                with self.pool.connection() as conn, store.pipelined_transaction(conn):
                    store.fence_checkpoint(
                        conn,
                        run_id=self.run_id,
                        epoch=self.epoch,
                        checkpoint_ns=ns,
                        checkpoint_id=checkpoint_id,
                    )
                    self._tx.conn = conn
                    try:
                        yield
                    finally:
                        self._tx.conn = None
            except connect.Error as exc:
                # Fenced / RunNotFound if it was the fence that refused; any other error as it is
                store.raise_if_refused(
                    exc, run_id=self.run_id, epoch=self.epoch, checkpoint_ns=ns, checkpoint_id=checkpoint_id
                )
                raise
        except errors.Fenced as exc:
            logger.error("%s refused: %s", what, exc)
            self._report(exc)
            raise
        except connect.TRANSIENT_ERRORS as exc:
            lost = infra.lost(exc, what)
            self._report(lost)
            raise lost from exc

    def _report(self, exc: errors.ControlSignal) -> None:
        if self.on_refused is not None:
            self.on_refused(exc)

    @contextlib.contextmanager
    def _cursor(self, *, pipeline: bool = False) -> Iterator[connect.DictCursor]:
        conn: connect.Connection | None = getattr(self._tx, "conn", None)
        if conn is None:  # reads: PostgresSaver's own way
            with super()._cursor(pipeline=pipeline) as cur:
                yield cur
            return
        # Inside the fenced transaction, already in pipeline mode: a plain cursor whose statements ride that
        # pipeline. PostgresSaver's own ``conn.pipeline()`` would nest, and a nested pipeline syncs on exit.
        with connect.dict_cursor(conn) as cur:
            yield cur
