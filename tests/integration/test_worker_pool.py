"""The worker's pool (``connect.open_pool(..., planned_once=True)``) plans a statement it runs again once per
connection: prepared at its second execution, with one generic plan, whatever options the DSN carried."""

from __future__ import annotations

import socket
import uuid

import psycopg
import pytest

from agent_worker import runner, settings
from agentrun_core import store
from agentrun_core.api import protocol
from agentrun_core.store import connect

pytestmark = pytest.mark.postgres


def test_server_options_are_added_after_the_dsns_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGOPTIONS", raising=False)
    url = "postgresql://u:p@127.0.0.1:5432/db?options=-c%20search_path%3Dx"
    assert psycopg.conninfo.conninfo_to_dict(connect.with_server_option(url, "-c a=b"))["options"] == (
        "-c search_path=x -c a=b"
    )
    assert psycopg.conninfo.conninfo_to_dict(connect.with_server_option("dbname=x", "-c a=b"))["options"] == (
        "-c a=b"
    )
    monkeypatch.setenv("PGOPTIONS", "-c statement_timeout=5s")  # libpq's, only when the DSN names none
    assert psycopg.conninfo.conninfo_to_dict(connect.with_server_option("dbname=x", "-c a=b"))["options"] == (
        "-c statement_timeout=5s -c a=b"
    )


@pytest.mark.parametrize("planned_once", [True, False])
def test_a_worker_connection_plans_a_statement_once(pg_dsn: str, planned_once: bool) -> None:
    run_id = str(uuid.uuid4())
    dsn = connect.with_server_option(pg_dsn, "-c application_name=planned")  # the DSN's own option stays
    with connect.open_pool(dsn, name="t", max_size=1, planned_once=planned_once) as pool:
        store.admit_run(pool, run_id=run_id, namespace="ns", name="r", graph="g:g", input={}, spec_hash="h")
        for _ in range(3):
            assert store.get_run(pool, run_id) is not None
        with pool.connection() as conn:
            plans = conn.execute(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
                " WHERE statement = 'SELECT * FROM agentrun_runs WHERE run_id = $1'"
            ).fetchall()
            name = conn.execute("SHOW application_name").fetchone()
    assert name == ("planned",)
    if planned_once:
        assert plans == [(2, 0)]  # prepared at the second execution (the first pays no Parse of its own),
        # then one generic plan: never planned for the parameters again
    else:
        assert plans == []  # psycopg's default: prepared from the 5th execution on


def test_the_pool_hands_out_the_connection_returned_last(pg_dsn: str) -> None:
    """A statement prepared, a cache warmed, on the connection used last is used again: psycopg_pool's own
    order (the connection idle longest) would spread them over every connection of the pool."""
    with connect.open_pool(pg_dsn, name="t", min_size=3, max_size=3, planned_once=True) as pool:
        pool.wait()
        held = [pool.getconn() for _ in range(3)]
        pids = [c.info.backend_pid for c in held]
        for conn in held:  # returned in order: the last one returned is held[2]
            pool.putconn(conn)
        for _ in range(5):  # one user at a time: always the same, hot connection
            with pool.connection() as conn:
                assert conn.info.backend_pid == pids[2]
        first, second = pool.getconn(), pool.getconn()  # an overlap: the next most recent as well
        assert (first.info.backend_pid, second.info.backend_pid) == (pids[2], pids[1])
        pool.putconn(first)
        pool.putconn(second)
        with pool.connection() as conn:  # `second` went back last: it comes out first
            assert conn.info.backend_pid == pids[1]


@pytest.mark.slow
def test_a_worker_that_cannot_reach_postgres_exits_lost_to_infrastructure() -> None:
    """Postgres unreachable at start: the first request's wait for a connection gives up (psycopg_pool's
    30 s) and the attempt ends as lost to infrastructure (exit 14, the operator tries again), not with a
    traceback."""
    with socket.socket() as free:  # a port nothing listens on
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    config = settings.WorkerSettings(
        run_id=str(uuid.uuid4()),
        dsn=f"postgresql://nobody@127.0.0.1:{port}/nothing?connect_timeout=2",
        pod_name="unreachable",
        lease_mode="none",
    )
    assert runner.run(config) == protocol.EXIT_INFRA
