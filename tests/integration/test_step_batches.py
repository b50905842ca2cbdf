"""Step events stored one row per batch (migration 21) against real Postgres: what the worker records reads
back through the view ``agentrun_step_events`` event by event, in order, with its checkpoint, timings (whole
microseconds) and effect keys; a batch too large for the view's ids is split; a malformed batch is refused;
an event inserted or changed through the view lands in its batch, as do the events a worker of the previous
release inserts into the view (a rolling upgrade); and the events of a database migrated before are kept,
one batch each."""

from __future__ import annotations

import datetime
import os
from typing import Any

import psycopg
import pytest

from agentrun_core import store
from agentrun_core.store import attempts, schema
from agentrun_dev import postgres
from agentrun_dev import settings as dev_settings

RUN = "run-batches"
T0 = datetime.datetime(2026, 12, 5, 6, 0, tzinfo=datetime.UTC)


def _admitted(conn: psycopg.Connection[Any], run_id: str = RUN) -> None:
    store.admit_run(conn, run_id=run_id, namespace="ns", name=run_id, graph="m:g", input={}, spec_hash="h")
    store.claim_run(conn, run_id=run_id, epoch=1, holder="p")


def _event(i: int, **extra: Any) -> dict[str, Any]:
    return {
        "step": f"node:{i}",
        "checkpoint_id": None,
        "started_at": T0 + datetime.timedelta(milliseconds=i),
        "duration_seconds": 0.000123 + i / 1000,
        "checkpoint_seconds": None,
        "effect_keys": [],
        **extra,
    }


def _batches(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT cardinality(steps), checkpoint_ids IS NULL, checkpoint_us IS NULL, effect_keys IS NULL"
        " FROM agentrun_step_batches ORDER BY id"
    ).fetchall()


def test_a_batch_reads_back_event_by_event(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        _admitted(conn)
        first = [_event(0), _event(1, checkpoint_id="cp-1", checkpoint_seconds=0.0004567891)]
        store.record_steps(conn, run_id=RUN, attempt=1, epoch=1, events=first, current_step="node")
        second = [_event(2), _event(3, effect_keys=["k-1", "k,2 {x}"]), _event(4)]
        store.record_steps(conn, run_id=RUN, attempt=2, epoch=1, events=second, current_step=None)
        # Nothing is stored per event that no event of the batch has.
        assert _batches(conn) == [(2, False, False, True), (3, True, True, False)]
        events = store.list_step_events(conn, RUN)
    assert [e.step for e in events] == [f"node:{i}" for i in range(5)]
    assert [e.attempt for e in events] == [1, 1, 2, 2, 2]
    assert [e.id for e in events] == sorted({e.id for e in events})  # distinct, in recording order
    assert [e.checkpoint_id for e in events] == [None, "cp-1", None, None, None]
    assert [e.checkpoint_seconds for e in events] == [None, 0.000457, None, None, None]  # whole microseconds
    assert [e.duration_seconds for e in events] == [round(0.000123 + i / 1000, 6) for i in range(5)]
    assert [e.started_at for e in events] == [T0 + datetime.timedelta(milliseconds=i) for i in range(5)]
    assert [e.effect_keys for e in events] == [[], [], [], ["k-1", "k,2 {x}"], []]


def test_a_batch_larger_than_the_ids_allow_is_split_in_order(pg_dsn: str) -> None:
    n = 65536 + 3
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        _admitted(conn)
        events = [{**_event(0), "step": f"s:{i}"} for i in range(n)]
        store.record_steps(conn, run_id=RUN, attempt=1, epoch=1, events=events, current_step=None)
        assert [b[0] for b in _batches(conn)] == [65536, 3]
        rows = conn.execute("SELECT id, step FROM agentrun_step_events ORDER BY id").fetchall()
    assert [step for _, step in rows] == [f"s:{i}" for i in range(n)]
    assert len({i for i, _ in rows}) == n


@pytest.mark.parametrize(
    "columns",
    [
        "ARRAY['a', 'b'], ARRAY[now()], ARRAY[1, 2]::bigint[], NULL",  # a timestamp missing
        "ARRAY['a'], ARRAY[now()], ARRAY[NULL]::bigint[], NULL",  # a duration missing
        "ARRAY[NULL]::text[], ARRAY[now()], ARRAY[1]::bigint[], NULL",  # a step name missing
        "'{}'::text[], '{}'::timestamptz[], '{}'::bigint[], NULL",  # an empty batch
        "ARRAY['a'], ARRAY[now()], ARRAY[1]::bigint[], '[[], []]'::jsonb",  # effect keys of two events
        "ARRAY['a'], ARRAY[now()], ARRAY[1]::bigint[], '[\"k\"]'::jsonb",  # keys not in an array per event
        "ARRAY['a'], ARRAY[now()], ARRAY[1]::bigint[], '[[1]]'::jsonb",  # a key that is not a string
        "ARRAY['a'], ARRAY[now()], ARRAY[1]::bigint[], '{\"k\": 1}'::jsonb",  # not an array at all
    ],
)
def test_a_malformed_batch_is_refused(pg_dsn: str, columns: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        _admitted(conn)
        with pytest.raises(psycopg.errors.CheckViolation, match="agentrun_step_batches_shape"):
            conn.execute(
                "INSERT INTO agentrun_step_batches"
                " (run_id, attempt, steps, started_at, duration_us, effect_keys)"
                f" VALUES ('{RUN}', 1, {columns})"
            )


def test_an_event_inserted_or_changed_through_the_view_lands_in_its_batch(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        _admitted(conn)
        store.record_steps(
            conn, run_id=RUN, attempt=1, epoch=1, events=[_event(0), _event(1)], current_step=None
        )
        store.record_step_event(
            conn,
            run_id=RUN,
            attempt=1,
            step="one",
            checkpoint_id="cp",
            started_at=T0,
            duration_seconds=2.5,
            checkpoint_seconds=0.5,
            effect_keys=["k"],
        )
        conn.execute(
            "UPDATE agentrun_step_events SET checkpoint_seconds = 0.25, effect_keys = ARRAY['e'],"
            " checkpoint_id = 'cp-x', duration_seconds = 9 WHERE step = 'node:1'"
        )
        with pytest.raises(psycopg.errors.CheckViolation, match="keeps its run, attempt and id"):
            conn.execute("UPDATE agentrun_step_events SET attempt = 7 WHERE step = 'one'")
        assert len(_batches(conn)) == 2
        events = store.list_step_events(conn, RUN)
    got = [(e.step, e.checkpoint_id, e.duration_seconds, e.checkpoint_seconds, e.effect_keys) for e in events]
    assert got == [
        ("node:0", None, 0.000123, None, []),
        ("node:1", "cp-x", 9.0, 0.25, ["e"]),
        ("one", "cp", 2.5, 0.5, ["k"]),
    ]


# What a worker of the release before migration 21 sends (its record_steps): a multi-row insert into the
# table agentrun_step_events, now the view. During a rolling upgrade such workers still run.
PREVIOUS_RECORD_STEPS = """
WITH events AS (
    INSERT INTO agentrun_step_events
        (run_id, attempt, step, checkpoint_id, started_at, duration_seconds, checkpoint_seconds, effect_keys)
    SELECT %(run_id)s, %(attempt)s, e.step, e.checkpoint_id, e.started_at, e.duration_seconds,
           e.checkpoint_seconds, coalesce(e.effect_keys, '{}')
    FROM jsonb_to_recordset(%(events)s) AS e(
        n integer, step text, checkpoint_id text, started_at timestamptz, duration_seconds double precision,
        checkpoint_seconds double precision, effect_keys text[])
    ORDER BY e.n
    RETURNING 1
)
SELECT (SELECT count(*) FROM events) AS recorded
"""


def test_a_worker_of_the_previous_release_still_records_its_events(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        _admitted(conn)
        events = [_event(0), _event(1, effect_keys=["k"], checkpoint_id="cp", checkpoint_seconds=0.001)]
        params = attempts._steps_params(RUN, 1, 1, events, None)
        assert conn.execute(PREVIOUS_RECORD_STEPS, params).fetchone() == (2,)
        assert len(_batches(conn)) == 2  # one batch per event: the previous worker's rows, as they were
        got = [(e.step, e.checkpoint_id, e.effect_keys) for e in store.list_step_events(conn, RUN)]
    assert got == [("node:0", None, []), ("node:1", "cp", ["k"])]


def test_events_of_a_database_migrated_before_are_kept(
    dev_settings_: dev_settings.Settings, dev_postgres: postgres.Info
) -> None:
    """A database at migration 20 with step events in the old table: migrating keeps every event."""
    settings = dev_settings_
    name = f"agentrun_t_{os.getpid()}_before21"
    admin = postgres.dsn(settings, "postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        with psycopg.connect(postgres.dsn(settings, name), autocommit=True) as conn:
            conn.execute(
                "CREATE TABLE agentrun_schema_version (version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            for migration in schema.load_migrations():
                if migration.version > 20:
                    break
                with conn.transaction():
                    conn.execute(migration.sql.encode())
                    conn.execute(
                        "INSERT INTO agentrun_schema_version (version, name) VALUES (%s, %s)",
                        (migration.version, migration.name),
                    )
            _admitted(conn)
            conn.execute(
                "INSERT INTO agentrun_step_events (run_id, attempt, step, checkpoint_id, started_at,"
                " duration_seconds, checkpoint_seconds, effect_keys) VALUES"
                f" ('{RUN}', 1, 'a:1', 'cp-1', %(t)s, 0.5, 0.0012344, '{{k1}}'),"
                f" ('{RUN}', 2, 'b:2', NULL, %(t)s, 1.25, NULL, '{{}}')",
                {"t": T0},
            )
            assert "0021_step_batches.sql" in store.migrate(conn)
            events = store.list_step_events(conn, RUN)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    got = [
        (
            e.attempt,
            e.step,
            e.checkpoint_id,
            e.started_at,
            e.duration_seconds,
            e.checkpoint_seconds,
            e.effect_keys,
        )
        for e in events
    ]
    assert got == [(1, "a:1", "cp-1", T0, 0.5, 0.001234, ["k1"]), (2, "b:2", None, T0, 1.25, None, [])]
