"""A fresh, migrated database on the dev cluster's Postgres for one benchmark, dropped afterwards.

Round trips are counted client-side: on autocommit connections every ``execute`` is one
Parse/Bind/Execute/Sync flight, i.e. one round trip (the same method as tests/integration/
test_ledger_roundtrips.py). Statements sent in pipeline mode share a flight: ``counting_round_trips`` counts
flights (an ``execute`` outside a pipeline, a pipeline Sync, a ``transaction()`` BEGIN/COMMIT) separately.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import psycopg_pool
from langgraph.checkpoint.postgres import PostgresSaver
from psycopg.rows import dict_row

from agentrun_core.store import connect
from agentrun_dev import postgres
from agentrun_dev import settings as dev_settings


class Counter:
    """Statements executed through ``CountingCursor`` (thread-safe enough for a benchmark)."""

    value = 0
    lock = threading.Lock()

    @classmethod
    def reset(cls) -> int:
        with cls.lock:
            old, cls.value = cls.value, 0
        return old


class RoundTrips(Counter):
    """Client/server flights of counting connections, while ``counting_round_trips`` is active."""

    value = 0
    lock = threading.Lock()


def _counting(conn: Any) -> bool:
    factory = getattr(conn, "cursor_factory", None)
    return isinstance(factory, type) and issubclass(factory, CountingCursor)


def _trip(conn: Any) -> None:
    if _counting(conn):
        with RoundTrips.lock:
            RoundTrips.value += 1


class CountingCursor(psycopg.Cursor[Any]):
    def execute(self, *args: Any, **kwargs: Any) -> Any:
        with Counter.lock:
            Counter.value += 1
        if self.connection._pipeline is None:  # else it rides the pipeline's Sync
            _trip(self.connection)
        return super().execute(*args, **kwargs)

    def executemany(self, *args: Any, **kwargs: Any) -> Any:
        with Counter.lock:
            Counter.value += 1  # pipelined: one flight
        return super().executemany(*args, **kwargs)


@contextlib.contextmanager
def counting_round_trips() -> Iterator[None]:
    """Also count, for connections whose cursors are ``CountingCursor``, each pipeline Sync (an
    ``executemany``'s own pipeline included), each BEGIN/COMMIT/ROLLBACK that ``transaction()`` sends
    outside a pipeline and each statement's preparation outside a pipeline (psycopg waits for its Parse
    before executing it): with ``CountingCursor.execute``'s, every flight. Those commands are counted as
    statements too (``Counter``), so a transaction costs the same statements however it is sent. Untimed
    passes only."""
    from psycopg import _connection_base, _cursor_base, _pipeline_base

    base_pipeline = _pipeline_base.BasePipeline
    base_conn = _connection_base.BaseConnection
    base_cursor = _cursor_base.BaseCursor
    enqueue_sync, exec_command = base_pipeline._enqueue_sync, base_conn._exec_command
    send_prepare = base_cursor._send_prepare

    def counted_prepare(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self._conn._pipeline is None:  # outside a pipeline, psycopg waits for the Parse: a flight
            _trip(self._conn)
        return send_prepare(self, *args, **kwargs)

    def counted_sync(self: Any) -> None:
        _trip(self._conn)
        enqueue_sync(self)

    def counted_command(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _counting(self):  # a statement like any other, which CountingCursor does not see
            with Counter.lock:
                Counter.value += 1
        if self._pipeline is None:
            _trip(self)
        return exec_command(self, *args, **kwargs)

    base_pipeline._enqueue_sync = counted_sync  # type: ignore[method-assign]
    base_conn._exec_command = counted_command  # type: ignore[method-assign]
    base_cursor._send_prepare = counted_prepare  # type: ignore[method-assign]
    try:
        yield
    finally:
        base_pipeline._enqueue_sync = enqueue_sync  # type: ignore[method-assign]
        base_conn._exec_command = exec_command  # type: ignore[method-assign]
        base_cursor._send_prepare = send_prepare  # type: ignore[method-assign]


@contextlib.contextmanager
def fresh_database(tag: str, *, agentrun: bool = True, durable: bool = False) -> Iterator[str]:
    """DSN of a new database with agentrun's schema and PostgresSaver's tables; with ``agentrun=False``
    PostgresSaver's tables alone (a baseline must not pay for our triggers on them, migration 16). The
    worker roles ``tenant`` made for it are dropped with it. ``durable``: on the durable server
    (``postgres.ensure_durable``: every commit flushed, as production runs), not the dev cluster's."""
    settings = dev_settings.from_env()
    if durable:
        postgres.ensure_durable(settings)
        settings = postgres.durable(settings)
    else:
        postgres.ensure_running(settings)
    name = f"agentrun_bench_{tag}_{os.getpid()}"
    admin = postgres.dsn(settings, "postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = postgres.dsn(settings, name)
    try:
        if agentrun:
            from agentrun_core import store

            with psycopg.connect(dsn) as conn:
                store.migrate(conn)
                conn.commit()
        else:
            with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
                PostgresSaver(conn).setup()
        yield dsn
    finally:
        made = _TENANTS.pop(dsn, None)
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            if made is not None:  # roles are the cluster's, not the database's: nothing else drops it
                conn.execute(f'DROP ROLE IF EXISTS "{made.role}"')


def stop_durable() -> None:
    """Stop the durable server ``fresh_database(..., durable=True)`` starts, if it runs (its data stays, for
    the next benchmark; ``agentrun dev down`` stops it too, ``--purge`` removes it)."""
    postgres.stop(postgres.durable(dev_settings.from_env()))


_RLS_TABLES = (
    "SELECT c.oid::regclass::text FROM pg_class c"
    " WHERE c.relrowsecurity AND c.relnamespace = current_schema()::regnamespace"
)


def unguard(dsn: str) -> None:
    """Turn the safety layers off in a benchmark's own database (``fresh_database``): the checkpoint fence's
    triggers disabled (migration 16: a deposed worker's writes are refused by them) and row-level security
    off on every table (tenant isolation). A worker then pays for neither: measured beside one that does,
    what they cost. The saver still marks its connections (``agentrun_mark_fence`` finds the triggers,
    disabled or not): only the checks are gone."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in ("checkpoints", "checkpoint_writes"):
            conn.execute(f"ALTER TABLE {table} DISABLE TRIGGER agentrun_fence")
        for (table,) in conn.execute(_RLS_TABLES).fetchall():
            conn.execute(f"ALTER TABLE {table} DISABLE ROW LEVEL SECURITY")


@dataclasses.dataclass(frozen=True)
class Tenant:
    """A namespace's worker role, as the operator provisions it: what a worker connects as."""

    namespace: str
    role: str
    dsn: str  # the database as this role (row-level security: its own runs only)


_TENANTS: dict[str, Tenant] = {}  # admin DSN of a fresh database -> the tenant made for it


def tenant(dsn: str) -> Tenant:
    """The worker role of a bench namespace of the database ``dsn`` (an admin DSN from ``fresh_database``),
    provisioned at the first call; a namespace of its own, since roles are shared by the cluster's
    databases. A worker measured as the admin would skip what every real worker pays: row-level security on
    each row it reads or writes, and a password login."""
    made = _TENANTS.get(dsn)
    if made is None:
        from agentrun_core import store

        namespace = f"bench-{os.getpid()}-{secrets.token_hex(4)}"
        with psycopg.connect(dsn, autocommit=True) as conn:  # as the operator provisions one
            role, password = store.provision_random_tenant(conn, namespace)
        made = Tenant(namespace, role, connect.with_credentials(dsn, user=role, password=password))
        _TENANTS[dsn] = made
    return made


def admit(dsn: str, graph: str, *, input: Any = None, durability: str = "sync") -> tuple[str, Tenant]:
    """Admit a new run of ``graph`` in the bench namespace of ``dsn`` (an admin DSN), as the operator does:
    its id and the tenant a worker of it connects as."""
    from agentrun_core import store

    run_id = str(uuid.uuid4())
    made = tenant(dsn)
    with pool(dsn, size=1) as p:
        store.admit_run(
            p,
            run_id=run_id,
            namespace=made.namespace,
            name=run_id[:8],
            graph=graph,
            input={} if input is None else input,
            spec_hash="bench",
            durability=durability,
        )
    return run_id, made


def kube_api(kubeconfig: str) -> Any:
    """An admin ``kubernetes.client.ApiClient`` of the dev cluster."""
    import kubernetes

    return kubernetes.config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]


def pool(
    dsn: str, *, counting: bool = False, size: int = 4, planned_once: bool = False
) -> psycopg_pool.ConnectionPool[Any]:
    """``planned_once``: a pool as the worker's (``connect.open_pool(..., planned_once=True)``: its
    planning, the most recently used connection first); otherwise psycopg_pool's own, as a bare user's."""
    kwargs: dict[str, Any] = {"autocommit": True}
    if counting:
        kwargs["cursor_factory"] = CountingCursor
    if planned_once:
        dsn, kwargs = connect.planned_once_args(dsn, kwargs)
        return connect.RecentFirstPool(dsn, min_size=1, max_size=size, kwargs=kwargs, open=True)
    return psycopg_pool.ConnectionPool(dsn, min_size=1, max_size=size, kwargs=kwargs, open=True)


CHECKPOINT_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
AGENTRUN_TABLES = (
    "agentrun_runs",
    "agentrun_attempts",
    "agentrun_effects",
    "agentrun_approvals",
    "agentrun_heartbeats",
    "agentrun_step_batches",  # the step events (the view agentrun_step_events reads them one per row)
)


def run_bytes(dsn: str, thread: str) -> dict[str, tuple[int, int]]:
    """table -> (rows, bytes) for one run / thread."""
    out: dict[str, tuple[int, int]] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in CHECKPOINT_TABLES + AGENTRUN_TABLES:
            col = "thread_id" if table in CHECKPOINT_TABLES else "run_id"
            row = conn.execute(
                f"SELECT count(*), coalesce(sum(pg_column_size(t.*)), 0) FROM {table} t WHERE {col} = %s",
                (thread,),
            ).fetchone()
            assert row is not None
            out[table] = (int(row[0]), int(row[1]))
    return out


def total(sizes: dict[str, tuple[int, int]], tables: tuple[str, ...]) -> tuple[int, int]:
    """(rows, bytes) of ``tables`` together, from ``run_bytes``."""
    return sum(sizes[t][0] for t in tables), sum(sizes[t][1] for t in tables)
