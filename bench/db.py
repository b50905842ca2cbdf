"""A fresh, migrated database on the dev cluster's Postgres for one benchmark, dropped afterwards.

Round trips are counted client-side: on autocommit connections every ``execute`` is one
Parse/Bind/Execute/Sync flight, i.e. one round trip (the same method as tests/integration/
test_ledger_roundtrips.py).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import psycopg_pool

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


class CountingCursor(psycopg.Cursor[Any]):
    def execute(self, *args: Any, **kwargs: Any) -> Any:
        with Counter.lock:
            Counter.value += 1
        return super().execute(*args, **kwargs)

    def executemany(self, *args: Any, **kwargs: Any) -> Any:
        with Counter.lock:
            Counter.value += 1  # pipelined: one flight
        return super().executemany(*args, **kwargs)


@contextlib.contextmanager
def fresh_database(tag: str) -> Iterator[str]:
    """DSN of a new database with agentrun's schema and PostgresSaver's tables."""
    settings = dev_settings.from_env()
    postgres.ensure_running(settings)
    name = f"agentrun_bench_{tag}_{os.getpid()}"
    admin = postgres.dsn(settings, "postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = postgres.dsn(settings, name)
    try:
        from agent_worker import store

        with psycopg.connect(dsn) as conn:
            store.migrate(conn)
            conn.commit()
        yield dsn
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def kube_api(kubeconfig: str) -> Any:
    """An admin ``kubernetes.client.ApiClient`` of the dev cluster."""
    import kubernetes

    return kubernetes.config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]


def pool(dsn: str, *, counting: bool = False, size: int = 4) -> psycopg_pool.ConnectionPool[Any]:
    kwargs: dict[str, Any] = {"autocommit": True}
    if counting:
        kwargs["cursor_factory"] = CountingCursor
    return psycopg_pool.ConnectionPool(dsn, min_size=1, max_size=size, kwargs=kwargs, open=True)
