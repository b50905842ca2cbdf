"""Schema migrations: our numbered ``sql/migrations/NNNN_*.sql`` files, then LangGraph's own tables, then
row-level security on every table keyed by a run (``agentrun_protect_all``, migration 5) — LangGraph's
checkpoint tables only exist after its ``setup()``, so they are covered last.

Our version table is ``agentrun_schema_version`` (never langgraph's ``checkpoint_migrations``). Migrations run
under a session advisory lock so concurrent workers/operators starting together apply each file once.
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import re
from typing import Any

import psycopg
from langgraph.checkpoint.postgres import PostgresSaver

# Arbitrary constant: the advisory lock id that serialises migrate() across processes.
_MIGRATE_LOCK_ID = 0x61676E74  # "agnt"

_FILENAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


@dataclasses.dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def load_migrations() -> list[Migration]:
    """All migration files, ordered by version. Pure apart from reading package data."""
    root = importlib.resources.files("agentrun_core.store") / "sql" / "migrations"
    found: list[Migration] = []
    for entry in root.iterdir():
        match = _FILENAME.match(entry.name)
        if match is None:
            continue
        found.append(Migration(int(match.group(1)), entry.name, entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"duplicate migration numbers in {[m.name for m in found]}")
    return found


def pending(applied: set[int], migrations: list[Migration]) -> list[Migration]:
    """The migrations still to apply, in order (pure)."""
    return [m for m in migrations if m.version not in applied]


def migrate(conn: psycopg.Connection[Any]) -> list[str]:
    """Apply our migrations, then ``PostgresSaver.setup()``. Idempotent; returns the names applied.

    LangGraph's setup uses ``CREATE INDEX CONCURRENTLY``, which cannot run inside a transaction block, so the
    connection is switched to autocommit for the duration (it must be idle: no transaction in progress).
    """
    was_autocommit = conn.autocommit
    if not was_autocommit:
        conn.commit()
        conn.autocommit = True
    applied_now: list[str] = []
    try:
        conn.execute("SELECT pg_advisory_lock(%s)", (_MIGRATE_LOCK_ID,))
        try:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS agentrun_schema_version ("
                " version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            rows = conn.execute("SELECT version FROM agentrun_schema_version").fetchall()
            applied = {int(r[0]) for r in rows}
            for migration in pending(applied, load_migrations()):
                # One transaction per file: a failed migration leaves no half-applied schema.
                with conn.transaction():
                    conn.execute(migration.sql.encode())  # bytes: run as a multi-statement script
                    conn.execute(
                        "INSERT INTO agentrun_schema_version (version, name) VALUES (%s, %s)",
                        (migration.version, migration.name),
                    )
                applied_now.append(migration.name)
            PostgresSaver(conn).setup()  # any row factory works: its cursors set dict_row
            # LangGraph's checkpoint tables exist only now: cover them (and any table a migration left
            # uncovered) with the tenants' row-level security of migration 5, and fence their rows
            # (migration 16).
            for after_setup in _AFTER_SETUP:
                if _has_function(conn, after_setup):
                    conn.execute(f"SELECT {after_setup}()")
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (_MIGRATE_LOCK_ID,))
    finally:
        if not was_autocommit:
            conn.autocommit = False
    return applied_now


# Functions of our migrations that act on LangGraph's tables, run after PostgresSaver.setup() made them.
_AFTER_SETUP = ("agentrun_protect_all", "agentrun_fence_checkpoint_tables")


def _has_function(conn: psycopg.Connection[Any], name: str) -> bool:
    row = conn.execute("SELECT to_regprocedure(%s) IS NOT NULL", (f"{name}()",)).fetchone()
    return bool(row and row[0])


def schema_version(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT coalesce(max(version), 0) FROM agentrun_schema_version").fetchone()
    return int(row[0]) if row else 0
