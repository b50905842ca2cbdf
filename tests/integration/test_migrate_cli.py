"""``agentrun migrate`` against the dev Postgres: the dry run lists every pending migration by number and name
and writes nothing; the real run applies them under the migration lock, prints what it applied, and a second
run finds nothing to do. The database is a fresh, empty one (not the session's migrated template)."""

from __future__ import annotations

import os
import subprocess

import psycopg

from agentrun_core import store
from tests.support import cli


def migrate(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "AGENTRUN_DSN"}
    return cli.agentrun("migrate", *args, timeout=300, env={**base, **(env or {})})


def has_table(dsn: str, table: str) -> bool:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()
        return bool(row and row[0])


def test_dry_run_lists_pending_migrations_and_applies_nothing(empty_dsn: str) -> None:
    done = migrate("--dsn", empty_dsn, "--dry-run")
    assert done.returncode == 0, done.stderr
    every = store.schema.load_migrations()
    listed = [line.split() for line in done.stdout.splitlines() if line.startswith("  ")]
    assert listed == [[m.name[:4], m.name[5:].removesuffix(".sql")] for m in every]
    assert ["0035", "worker_compat"] in listed
    assert f"{len(every)} pending migration(s)" in done.stdout
    assert not has_table(empty_dsn, "agentrun_schema_version")  # nothing applied, not even the version table
    assert not has_table(empty_dsn, "agentrun_runs")


def test_migrate_applies_prints_and_is_idempotent(empty_dsn: str) -> None:
    every = store.schema.load_migrations()
    done = migrate(env={"AGENTRUN_DSN": empty_dsn})  # the operator's DSN variable
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    applied = [line.removeprefix("applied ") for line in lines if line.startswith("applied ")]
    assert applied == [f"{m.name[:4]} {m.name[5:].removesuffix('.sql')}" for m in every]
    assert f"schema version {every[-1].version}" in done.stdout
    with psycopg.connect(empty_dsn) as conn:
        assert store.schema_version(conn) == every[-1].version
        assert store.schema_compat_level(conn) == 1
        assert conn.execute("SELECT to_regclass('checkpoints') IS NOT NULL").fetchone() == (True,)
    again = migrate("--dsn", empty_dsn)
    assert again.returncode == 0, again.stderr
    assert "applied" not in again.stdout and "nothing to apply" in again.stdout
    dry = migrate("--dsn", empty_dsn, "--dry-run")
    assert dry.returncode == 0 and "up to date" in dry.stdout, dry.stdout


def test_dry_run_after_a_partial_schema_lists_only_the_rest(empty_dsn: str) -> None:
    """A database an older release migrated (here: everything up to migration 22, as v0.1.0 left it)."""
    with psycopg.connect(empty_dsn) as conn:
        store.migrate(conn)
        conn.execute("DELETE FROM agentrun_schema_version WHERE version > 22")
        conn.commit()
    done = migrate("--dsn", empty_dsn, "--dry-run")
    assert done.returncode == 0, done.stderr
    listed = [line.split()[0] for line in done.stdout.splitlines() if line.startswith("  ")]
    assert listed == [m.name[:4] for m in store.schema.load_migrations() if m.version > 22]


def test_no_database_is_a_usage_error_and_a_bad_one_a_clear_failure() -> None:
    done = migrate()
    assert done.returncode == 2
    assert "pass --dsn or set AGENTRUN_DSN" in done.stderr
    bad = migrate("--dsn", "postgresql://nobody@127.0.0.1:1/none?connect_timeout=3", "--dry-run")
    assert bad.returncode == 1
    assert bad.stderr.startswith("agentrun migrate: OperationalError"), bad.stderr


def test_an_operator_that_may_not_migrate_refuses_a_schema_not_migrated_for_it(empty_dsn: str) -> None:
    """AGENTRUN_MIGRATE=false: the operator does not start on a database the migrate Job has not migrated
    (exit 2, saying so); once `agentrun migrate` ran, the same check passes."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTRUN_")}
    done = cli.agentrun(
        "operator", timeout=300, env={**env, "AGENTRUN_DSN": empty_dsn, "AGENTRUN_MIGRATE": "false"}
    )
    assert done.returncode == 2, done
    assert "AGENTRUN_MIGRATE is false" in done.stderr and "run `agentrun migrate`" in done.stderr
    assert not has_table(empty_dsn, "agentrun_schema_version")  # it did not migrate either
    assert migrate("--dsn", empty_dsn).returncode == 0
    from agent_operator.serve import main as operator_main

    assert operator_main.schema_problem(empty_dsn) == ""
