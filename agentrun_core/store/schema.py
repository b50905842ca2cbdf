"""Schema migrations: our numbered ``sql/migrations/NNNN_*.sql`` files, then LangGraph's own tables, then
row-level security on every table keyed by a run (``agentrun_protect_all``, migration 5) — LangGraph's
checkpoint tables only exist after its ``setup()``, so they are covered last.

Our version table is ``agentrun_schema_version`` (never langgraph's ``checkpoint_migrations``). Migrations run
under a session advisory lock so concurrent operators starting together apply each file once. Its key is a
secret that changes at every migration (migration 25, ``_MigrateLock``): any role may take any advisory
lock, and a tenant holding a known key would stop every later migration.
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import re
from typing import Any

import psycopg
from langgraph.checkpoint.postgres import PostgresSaver

from agentrun_core.store import db

# Arbitrary constant: the advisory lock id that serialises migrate() where agentrun_migrate_lock does not
# exist yet (a new database; one from before migration 25).
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
    lock = _MigrateLock(conn)
    try:
        lock.take()
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
            lock.release()
    finally:
        if not was_autocommit:
            conn.autocommit = False
    return applied_now


class _MigrateLock:
    """The session advisory lock migrate() holds; its key the secret of ``agentrun_migrate_lock`` (migration
    25), replaced once taken and again before release, so a key anyone saw in ``pg_locks`` is stale before
    anyone else can take it. The connection must be in autocommit mode."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self.held: list[int] = []

    def _lock(self, key: int) -> None:
        self.conn.execute("SELECT pg_advisory_lock(%s)", (key,))
        self.held.append(key)

    def _unlock(self, key: int) -> None:
        self.conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
        self.held.remove(key)

    def _key(self) -> int | None:
        found = self.conn.execute("SELECT to_regclass('agentrun_migrate_lock') IS NOT NULL").fetchone()
        if not (found and found[0]):
            return None
        row = self.conn.execute("SELECT key FROM agentrun_migrate_lock WHERE id = 1").fetchone()
        return int(row[0]) if row else None

    def _rotate(self, *, lock_new: bool) -> int:
        """A new key (locked before the transaction that writes it commits, when ``lock_new``)."""
        with self.conn.transaction():
            row = self.conn.execute(
                "UPDATE agentrun_migrate_lock SET key = agentrun_random_key() WHERE id = 1 RETURNING key"
            ).fetchone()
            assert row is not None
            if lock_new:
                self._lock(int(row[0]))
        return int(row[0])

    def take(self) -> None:
        key = self._key()
        if key is None:
            self._lock(_MIGRATE_LOCK_ID)  # before migration 25: the constant key
            key = self._key()  # another migrator may have applied migration 25 meanwhile
            if key is None:
                return
        while True:
            self._lock(key)
            current = self._key()
            if current == key:
                break
            self._unlock(key)  # replaced while we waited: the holder moved on to the current key
            assert current is not None
            key = current
        self._rotate(lock_new=True)
        self._unlock(key)

    def release(self) -> None:
        key = self._key()
        if key is not None:
            if key not in self.held:
                self.held.append(key)  # locked by migration 25 itself, applied by this call
            self._rotate(lock_new=False)
        for key in list(reversed(self.held)):
            self._unlock(key)


# Functions of our migrations that act on LangGraph's tables, run after PostgresSaver.setup() made them.
_AFTER_SETUP = ("agentrun_protect_all", "agentrun_fence_checkpoint_tables")


def _has_function(conn: psycopg.Connection[Any], name: str) -> bool:
    row = conn.execute("SELECT to_regprocedure(%s) IS NOT NULL", (f"{name}()",)).fetchone()
    return bool(row and row[0])


def pending_migrations(conn: psycopg.Connection[Any]) -> list[Migration]:
    """The migrations ``migrate()`` would apply now, in order (read only: no lock, nothing written; a
    migrator running meanwhile may apply some first). LangGraph's own tables are set up after these and are
    not listed."""
    found = conn.execute("SELECT to_regclass('agentrun_schema_version') IS NOT NULL").fetchone()
    if not (found and found[0]):
        return load_migrations()  # a new database: everything
    rows = conn.execute("SELECT version FROM agentrun_schema_version").fetchall()
    return pending({int(r[0]) for r in rows}, load_migrations())


def schema_compat_level(conn: db.Conn) -> int | None:
    """The schema's worker-compatibility level (migration 35, ``agentrun_core.compat``); None on a schema
    from before it. One round trip where the table exists: a worker reads it at every start."""
    try:
        with db.connection(conn) as c:
            row = c.execute("SELECT level FROM agentrun_schema_compat WHERE id = 1").fetchone()
    except psycopg.errors.UndefinedTable:
        return None
    return int(row[0]) if row else None


def schema_version(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT coalesce(max(version), 0) FROM agentrun_schema_version").fetchone()
    return int(row[0]) if row else 0
