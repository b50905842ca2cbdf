"""The worker's pool (``connect.open_pool(..., planned_once=True)``) plans a statement it runs again once per
connection: prepared at its second execution, with one generic plan, whatever options the DSN carried."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from agentrun_core import store
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
