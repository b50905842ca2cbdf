"""The dev Postgres and the ``pg_dsn`` fixture: a real server, a fresh migrated database per test."""

from __future__ import annotations

import psycopg


def test_pg_dsn_is_migrated_and_fresh(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn) as conn:
        tables = {
            r[0]
            for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()
        }
        assert {"agentrun_schema_version", "agentrun_runs", "agentrun_effects"} <= tables
        # Fresh: nothing a previous test wrote is visible.
        assert conn.execute("SELECT count(*) FROM agentrun_runs").fetchone() == (0,)


def test_each_test_gets_its_own_database(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn) as conn:
        name = conn.execute("SELECT current_database()").fetchone()
        assert name is not None and name[0].startswith("agentrun_t_")
        conn.execute("CREATE TABLE scratch (x int)")  # would collide if databases were shared between tests
