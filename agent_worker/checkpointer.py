"""The worker's LangGraph saver: PostgresSaver with every write fenced, a head pointer, and its own timings.

Rule: every row a checkpoint write (``put``) or a task's pending writes (``put_writes``) inserts is fenced in
its own statement by the same epoch check as the ledger: a trigger on LangGraph's tables (migration 16) locks
the run row and compares its ``lease_epoch`` with the epoch this saver marked its connection with
(``agentrun.fence``, set once per connection, inside the first write's pipeline). A deposed worker's write is
refused (SQLSTATE ``AR409``; ``store.raise_if_refused`` makes it ``errors.Fenced``, ``AR404`` an
``errors.RunNotFound``) and rolled back whole, so a zombie can never make its state the thread's newest.

A write is PostgresSaver's own psycopg pipeline — its statements and one Sync, one implicit transaction — with
nothing of ours around it: no BEGIN, no COMMIT, no fencing statement. The run-row locks taken by the trigger
are held until that Sync; a refusal aborts every statement of the write (blobs, rows, the head move). A
client-side failure between two of its statements would let the Sync commit what was sent, so the saver then
sends ``agentrun_abandon_write()``, which aborts the transaction first. A connection whose write failed is
marked again on its next write (the mark is a setting, rolled back with the transaction that made it).

Riders: statements of the worker's own (the step events, ``agent_worker/steps.py``) may be sent inside that
pipeline (``rider``), so they cost no round trip of their own and commit with the write or not at all.

A root ``put`` also moves ``agentrun_runs.head_checkpoint_id`` (a subgraph ``put`` moves its namespace's row
in ``agentrun_checkpoint_heads``), in the trigger of its checkpoint row. ``get_tuple`` without a
``checkpoint_id`` — "the latest", which LangGraph asks for at every resume — returns the head, never "newest
by id": ids are uuid6 made from the writer's wall clock, so a worker whose clock is behind writes ids that
sort before older ones.

Writes may run on LangGraph's background threads (``durability="async"``, and the final save of ``exit``); a
refused or failed write there is re-raised by LangGraph only when the loop exits, so the saver also reports it
through ``on_refused`` at once (the runner makes it the run context's sticky stop: effects refuse, the stream
ends, the worker exits 12 — or 14 for a lost Postgres connection). It is never swallowed.

DeltaChannel (LangGraph 1.2): a channel such as ``messages`` stored as each step's writes, rebuilt at a
checkpoint by walking its parent chain back to the nearest snapshot. PostgresSaver's walk pages through the
thread by descending checkpoint id, assuming an ancestor's id is smaller; an attempt whose clock is behind
breaks that, and its walk stops short, silently (fewer messages). ``get_delta_channel_history`` here follows
``parent_checkpoint_id`` instead (``store.delta_chain``), then reads the writes and the seed as PostgresSaver
does.

Timing: each write is timed here, from taking a connection to the commit (``perf_counter``). Root puts'
figures are kept by checkpoint id for the runner's step events (``agentrun_step_events.checkpoint_seconds``,
the trace's CKPT-WRITE column) and logged at INFO as ``checkpoint write ns='' id=... seconds=...``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    get_checkpoint_id,
)
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.base import _build_delta_stage2_sql

from agent_worker import infra
from agentrun_core import errors, faults, store
from agentrun_core.store import connect

logger = logging.getLogger(__name__)

Rider = Callable[[connect.Connection], Callable[[bool], None] | None]


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
        self._marked: weakref.WeakSet[connect.Connection] = weakref.WeakSet()  # carry agentrun.fence
        self._timings: dict[str, float] = {}  # root checkpoint id -> seconds its put took
        self._timings_lock = threading.Lock()
        # Statements that ride on each write (agent_worker/steps.py: the step events): called inside the
        # write's pipeline with its connection, it sends what it has and returns the callback told whether
        # the write committed (None: nothing sent).
        self.rider: Rider | None = None
        # Namespaces read as holding no checkpoint at all and not written since: read again, they answer
        # "none" without a round trip (a new run is read twice before its first step, ours and LangGraph's).
        # Sound because after the claim nothing but this saver may write the run's checkpoints: the fence
        # refuses every other epoch, and the operator writes checkpoints only to admit a fork. The count of
        # writes started per namespace keeps a read that raced a write from caching its stale answer.
        self._empty: set[str] = set()
        self._writes_started: dict[str, int] = {}
        self._empty_lock = threading.Lock()

    # --- reads ---------------------------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        conf = config.get("configurable", {})
        if conf.get("checkpoint_id") or conf.get("thread_id") != self.run_id:
            return super().get_tuple(config)
        ns = _ns(config)
        with self._empty_lock:
            if ns in self._empty:
                return None
            writes = self._writes_started.get(ns, 0)
        head = store.checkpoint_head(self.pool, run_id=self.run_id, checkpoint_ns=ns)
        if head.checkpoint_id is None:
            if not head.any_written:  # nothing there at all (a new run, a subgraph's first entry): one trip
                with self._empty_lock:
                    if self._writes_started.get(ns, 0) == writes:
                        self._empty.add(ns)
                return None
            return super().get_tuple(config)  # unfenced writes (a run from before migration 2): LangGraph's
        return super().get_tuple({**config, "configurable": {**conf, "checkpoint_id": head.checkpoint_id}})

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        if not channels:
            return {}
        channels = list(channels)
        conf = config["configurable"]
        ns = _ns(config)
        checkpoint_id = get_checkpoint_id(config)
        if not checkpoint_id:
            target = self.get_tuple(config)
            if target is None:
                return {ch: {"writes": []} for ch in channels}
            checkpoint_id = target.config["configurable"]["checkpoint_id"]
        rows = store.delta_chain(
            self.pool,
            thread_id=str(conf["thread_id"]),
            checkpoint_ns=ns,
            checkpoint_id=str(checkpoint_id),
            channels=channels,
        )
        # The chain in the shape of PostgresSaver's own stage-1 maps, then its walk, writes and seed reads.
        parent_of: dict[str, str | None] = {}
        versions: list[dict[str, str | None]] = [{} for _ in channels]
        has_blob: list[dict[str, bool]] = [{} for _ in channels]
        inline: list[dict[str, Any]] = [{} for _ in channels]
        for row in rows:
            cid = str(row["checkpoint_id"])
            parent_of[cid] = row["parent_checkpoint_id"]
            stored = set(row["with_blob"] or ())
            for i, ch in enumerate(channels):
                versions[i][cid] = (row["versions"] or {}).get(ch)
                has_blob[i][cid] = ch in stored
                inline[i][cid] = (row["inline_values"] or {}).get(ch)
        chain: dict[str, list[str]] = {ch: [] for ch in channels}
        seed_version: dict[str, str | None] = dict.fromkeys(channels)
        seed_inline: dict[str, Any] = {}
        self._try_advance_walks(
            str(checkpoint_id), channels, parent_of, versions, has_blob, inline,
            chain, seed_version, seed_inline, {}, set(),
        )  # fmt: skip
        with_chain = [ch for ch in channels if chain[ch]]
        with_seed = [ch for ch in channels if seed_version[ch] is not None]
        found: list[Any] = []
        if with_chain or with_seed:
            params: list[Any] = []
            for ch in with_chain:
                params.extend([conf["thread_id"], ns, ch, chain[ch]])
            for ch in with_seed:
                params.extend([conf["thread_id"], ns, ch, seed_version[ch]])
            sql = _build_delta_stage2_sql(channels_with_chain=with_chain, channels_with_seed=with_seed)
            with self._cursor() as cur:
                cur.execute(sql, params)
                found = cur.fetchall()
        return self._build_delta_channels_writes_history(
            channels=channels,
            chain_by_ch=chain,
            seed_ver_by_ch=seed_version,
            seed_inline_by_ch=seed_inline,
            stage2_rows=cast(Any, found),
        )

    # --- writes --------------------------------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        ns = _ns(config)
        self._writing(ns)
        t0 = time.perf_counter()
        with self._refusals(ns, checkpoint["id"]):
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
        ns = _ns(config)
        self._writing(ns)
        with self._refusals(ns, None):
            super().put_writes(config, writes, task_id, task_path)
        # The gap a kill can fall into in every mode but ``exit``: the task is done in Postgres, its step's
        # checkpoint is not (LangGraph saves them on separate threads, the checkpoint after the whole step).
        faults.hit("after_task_writes")

    def _writing(self, ns: str) -> None:
        with self._empty_lock:
            self._empty.discard(ns)
            self._writes_started[ns] = self._writes_started.get(ns, 0) + 1

    def write_seconds(self, checkpoint_id: str) -> float | None:
        """Seconds this saver's ``put`` of a root checkpoint took; ``None`` if it has not (yet) written it."""
        with self._timings_lock:
            return self._timings.get(checkpoint_id)

    # --- the async API --------------------------------------------------------------------------------
    # A graph with async nodes or tools is driven with astream (agent_worker.drive), which calls these. Each
    # is the sync method above, run in the event loop's thread: the same fenced, timed statements and fault
    # points, one at a time. It blocks the loop for one round trip, as the sync loop waits for its thread.

    # The twins take the sync method's arguments as they come (the base class types them for callers).
    async def aget_tuple(self, *args: Any, **kwargs: Any) -> CheckpointTuple | None:
        return self.get_tuple(*args, **kwargs)

    async def alist(self, *args: Any, **kwargs: Any) -> AsyncIterator[CheckpointTuple]:
        for item in self.list(*args, **kwargs):
            yield item

    async def aput(self, *args: Any, **kwargs: Any) -> RunnableConfig:
        return self.put(*args, **kwargs)

    async def aput_writes(self, *args: Any, **kwargs: Any) -> None:
        self.put_writes(*args, **kwargs)

    async def aget_delta_channel_history(
        self, *args: Any, **kwargs: Any
    ) -> Mapping[str, DeltaChannelHistory]:
        return self.get_delta_channel_history(*args, **kwargs)

    # --- the fenced pipeline -------------------------------------------------------------------------

    @contextlib.contextmanager
    def _cursor(self, *, pipeline: bool = False) -> Iterator[connect.DictCursor]:
        if not pipeline:  # reads: PostgresSaver's own way
            with super()._cursor(pipeline=False) as cur:
                yield cur
            return
        # A write: PostgresSaver's pipeline, its connection marked with our fence first, riders on it.
        rode: Callable[[bool], None] | None = None
        conn: connect.Connection | None = None
        committed = False
        try:
            with super()._cursor(pipeline=True) as cur:
                conn = cur.connection
                try:
                    if conn not in self._marked:
                        store.mark_fence(cur, run_id=self.run_id, epoch=self.epoch)
                        self._marked.add(conn)
                    if self.rider is not None:
                        rode = self.rider(conn)
                    yield cur
                except BaseException:
                    store.abandon_write(cur)  # what was sent before the failure must not commit at the Sync
                    raise
            committed = True
        except BaseException:
            if conn is not None:
                self._marked.discard(conn)  # the mark may have been rolled back with this write
            raise
        finally:
            if rode is not None:
                rode(committed)

    @contextlib.contextmanager
    def _refusals(self, ns: str, checkpoint_id: str | None) -> Iterator[None]:
        """A refused write as ``errors.Fenced`` (reported at once), a lost connection as ``InfraLost``."""
        what = "checkpoint write" if checkpoint_id is not None else "checkpoint pending writes"
        try:
            try:
                yield
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
