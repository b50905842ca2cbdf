"""Step events stored one row per batch (migrations 21 and 22) against real Postgres: what the worker records
reads back through the view ``agentrun_step_events`` event by event, in order, with its checkpoint, timings
(whole microseconds) and effect keys; step names and start times round-trip exactly through their packed
form (node names, number differences, gaps), whatever the names and times; a large batch is stored
compressed; a batch too large for the view's ids is split; a malformed batch is refused; an event inserted
or changed through the view lands in its batch, as do the events workers of earlier releases record (a
rolling upgrade); and the events of a database migrated before are kept."""

from __future__ import annotations

import datetime
import os
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from agentrun_core import errors, store
from agentrun_core.store import schema, step_packing
from agentrun_dev import postgres
from agentrun_dev import settings as dev_settings
from tests.support import pg

RUN = "run-batches"
T0 = datetime.datetime(2026, 12, 5, 6, 0, tzinfo=datetime.UTC)


def _admitted(conn: psycopg.Connection[Any], run_id: str = RUN) -> None:
    pg.admit(conn, run_id=run_id)
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


def _json_params(events: list[dict[str, Any]], current_step: str | None, attempt: int = 1) -> dict[str, Any]:
    """The parameters earlier releases' record_steps took: the events as one JSON array."""
    payload = [
        {**e, "n": i, "started_at": e["started_at"].isoformat(), "effect_keys": list(e["effect_keys"])}
        for i, e in enumerate(events)
    ]
    return {
        "run_id": RUN,
        "attempt": attempt,
        "epoch": 1,
        "events": Jsonb(payload),
        "current_step": current_step,
    }


def _batches(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT cardinality(nodes), checkpoint_ids IS NULL, checkpoint_us IS NULL, effect_keys IS NULL"
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
        "ARRAY['a'], NULL, ARRAY[1]::bigint[], NULL",  # no start times at all
        "ARRAY[['a'], ['b']], ARRAY[now(), now()], ARRAY[1, 2]::bigint[], NULL",  # names not a list
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


# Names the packing must keep byte for byte: numbered or not, a ':' inside, numbers it must not
# canonicalise ('007', '-0', past an integer), negative, zero, an empty node, non-ASCII.
NAMES = [
    "turn:1",
    "turn:2",
    "turn:4",
    "a:b:3",
    "x:007",
    "plain",
    "x:-1",
    "x:0",
    "y:-0",
    ":5",
    "n:9999999999",
    "turn:3",
    "é:12",
    "turn:3",
    "",
    "x:",
    "multi,node:-999999999",
    "z:999999999",
]


def test_names_and_start_times_round_trip_exactly(pg_dsn: str) -> None:
    """Start times out of order (a negative gap), days apart, durations of 0 and of days."""
    us = datetime.timedelta(microseconds=1)
    starts = [T0 + (i * 7919 % 13 - 6) * 1_000_003 * us for i in range(len(NAMES))]
    starts[5] = T0 + datetime.timedelta(days=3, microseconds=1)
    durations = [0.0, 0.000001, 259_200.123456] + [(i * 37 % 11) / 1000 for i in range(3, len(NAMES))]
    events = [
        {**_event(0), "step": name, "started_at": start, "duration_seconds": d}
        for name, start, d in zip(NAMES, starts, durations, strict=True)
    ]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        _admitted(conn)
        store.record_steps(conn, run_id=RUN, attempt=1, epoch=1, events=events, current_step=None)
        store.record_steps(conn, run_id=RUN, attempt=1, epoch=1, events=events[::-1], current_step=None)
        stored = conn.execute("SELECT steps, started_at FROM agentrun_step_batches").fetchall()
        got = [(e.step, e.started_at, e.duration_seconds) for e in store.list_step_events(conn, RUN)]
    assert stored == [(None, None), (None, None)]  # only the packed form is kept
    expected = list(zip(NAMES, starts, durations, strict=True))
    assert got == expected + expected[::-1]


PACKED = (
    "nodes, step_deltas, first_started_at, gaps_us, duration_us, checkpoint_ids, checkpoint_us, effect_keys"
)


def test_the_worker_packs_as_the_table_does(pg_dsn: str) -> None:
    """step_packing.pack (the worker's, sent as parameters) and agentrun_pack_steps (the trigger's, for what
    is written plain) store the same arrays for the same events."""
    us = datetime.timedelta(microseconds=1)
    events = [
        {
            **_event(i),
            "step": name,
            "started_at": T0 + (i * 7919 % 13 - 6) * 1_000_003 * us,
            "duration_seconds": (i * 37 % 11) / 1000 + 0.0000004,
            "checkpoint_id": f"cp-{i}" if i % 3 else None,
            "checkpoint_seconds": 0.0012344 if i % 2 else None,
            "effect_keys": ["k", "l"] if i == 4 else [],
        }
        for i, name in enumerate(NAMES)
    ]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        _admitted(conn)
        store.record_steps(conn, run_id=RUN, attempt=1, epoch=1, events=events, current_step=None)
        conn.execute(RECORD_STEPS_21, _json_params(events, None))
        worker, table = conn.execute(f"SELECT {PACKED} FROM agentrun_step_batches ORDER BY id").fetchall()
        read = [(e.step, e.started_at, e.checkpoint_id) for e in store.list_step_events(conn, RUN)]
    assert worker == table
    expected = [(e["step"], e["started_at"], e["checkpoint_id"]) for e in events]
    assert read == expected + expected


def test_no_events_moves_the_current_step_alone(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        _admitted(conn)
        assert store.record_steps(conn, run_id=RUN, attempt=1, epoch=1, events=[], current_step="turn")
        assert not store.record_steps(conn, run_id=RUN, attempt=1, epoch=2, events=[], current_step="stale")
        assert _batches(conn) == []
        assert store.get_run(conn, RUN).current_step == "turn"


def _succeed(conn: psycopg.Connection[Any], epoch: int, events: list[dict[str, Any]], step: str) -> store.Run:
    return store.finish_attempt(
        conn,
        run_id=RUN,
        epoch=epoch,
        attempt=1,
        status="succeeded",
        outcome="succeeded",
        step_events=events,
        current_step=step,
    )


def test_the_outcome_carries_the_last_events_and_step_in_its_statement(pg_dsn: str) -> None:
    events = [_event(i) for i in range(3)]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        _admitted(conn)
        run = _succeed(conn, 1, events, "node")
        assert run.status == "succeeded" and run.current_step == "node"
        assert [(e.step, e.started_at) for e in store.list_step_events(conn, RUN)] == [
            (e["step"], e["started_at"]) for e in events
        ]


def test_last_events_beyond_one_batch_are_recorded_first_and_packed_once(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_pack, packed = step_packing.pack, []

    def counting(events: Any) -> list[dict[str, Any]]:
        packed.append(len(events))
        return real_pack(events)

    monkeypatch.setattr(step_packing, "pack", counting)
    n = step_packing.MAX_EVENTS + 2
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        _admitted(conn)
        run = _succeed(conn, 1, [{**_event(0), "step": f"s:{i}"} for i in range(n)], "node")
        assert run.status == "succeeded" and run.current_step == "node"
        assert [b[0] for b in _batches(conn)] == [step_packing.MAX_EVENTS, 2]
        assert [e.step for e in store.list_step_events(conn, RUN)] == [f"s:{i}" for i in range(n)]
    assert packed == [n]  # once, not once to count the batches and again to write them


def test_a_refused_outcome_still_records_the_events_and_moves_no_step(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        _admitted(conn)
        store.claim_run(conn, run_id=RUN, epoch=2, holder="q")  # a takeover: epoch 1 is deposed
        with pytest.raises(errors.Fenced):
            _succeed(conn, 1, [_event(0), _event(1)], "stale")
        run = store.get_run(conn, RUN)
        assert run is not None and run.status != "succeeded" and run.current_step is None
        assert [e.step for e in store.list_step_events(conn, RUN)] == ["node:0", "node:1"]  # history


def test_a_batch_the_table_refuses_never_costs_the_outcome(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_pack = step_packing.pack

    def misshapen(events: Any) -> list[dict[str, Any]]:
        return [{**batch, "duration_us": batch["duration_us"][:-1]} for batch in real_pack(events)]

    monkeypatch.setattr(step_packing, "pack", misshapen)  # one duration short: the shape check refuses it
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        _admitted(conn)
        run = _succeed(conn, 1, [_event(0), _event(1)], "node")
        assert run.status == "succeeded" and run.current_step == "node"
        assert store.list_step_events(conn, RUN) == []  # history lost, logged; never the outcome


def test_a_large_batch_is_stored_compressed(pg_dsn: str) -> None:
    """Every array of a 200-event batch compressed, none moved out of the row (migration 22's storage):
    steps of 0.3-0.5 ms, each starting 10-20 us after the one before it ended, as a loop's turns do."""
    events, start = [], T0
    for i in range(200):
        duration_us = 300 + i * 7919 % 200
        events.append({**_event(i), "started_at": start, "duration_seconds": duration_us / 1e6})
        start += datetime.timedelta(microseconds=duration_us + 10 + i % 11)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        _admitted(conn)
        store.record_steps(conn, run_id=RUN, attempt=1, epoch=1, events=events, current_step=None)
        sizes = conn.execute(
            "SELECT pg_column_size(nodes), pg_column_size(step_deltas), pg_column_size(gaps_us),"
            " pg_column_size(duration_us), pg_column_size(b.*),"
            " (SELECT pg_relation_size(reltoastrelid) FROM pg_class WHERE relname = 'agentrun_step_batches')"
            " FROM agentrun_step_batches b"
        ).fetchone()
        assert [e.step for e in store.list_step_events(conn, RUN)] == [f"node:{i}" for i in range(200)]
    assert sizes is not None
    nodes, deltas, gaps, durations, row, toasted = sizes
    # Raw: 8 B an element for nodes and durations, 4 for deltas, 8 for gaps, plus headers.
    assert nodes < 100 and deltas < 100 and gaps < 400 and durations < 800, sizes
    assert row < 2000 and toasted == 0, sizes


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
        store.record_steps(conn, run_id=RUN, attempt=1, epoch=1, events=[_event(2)], current_step=None)
        conn.execute(  # in the first batch, before 'node:2' of another: no start time moves
            "UPDATE agentrun_step_events SET checkpoint_seconds = 0.25, effect_keys = ARRAY['e'],"
            " checkpoint_id = 'cp-x', duration_seconds = 9 WHERE step = 'node:1'"
        )
        conn.execute("UPDATE agentrun_step_events SET step = 'renamed' WHERE step = 'node:0'")
        with pytest.raises(psycopg.errors.CheckViolation, match="keeps its run, attempt and id"):
            conn.execute("UPDATE agentrun_step_events SET attempt = 7 WHERE step = 'one'")
        assert len(_batches(conn)) == 3
        events = store.list_step_events(conn, RUN)
    got = [
        (e.step, e.checkpoint_id, e.started_at, e.duration_seconds, e.checkpoint_seconds, e.effect_keys)
        for e in events
    ]
    ms = datetime.timedelta(milliseconds=1)
    assert got == [
        ("renamed", None, T0, 0.000123, None, []),
        ("node:1", "cp-x", T0 + ms, 9.0, 0.25, ["e"]),
        ("one", "cp", T0, 2.5, 0.5, ["k"]),
        ("node:2", None, T0 + 2 * ms, 0.002123, None, []),
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


# What a worker of the release of migration 21 sends (its record_steps): the plain form of a batch, straight
# into agentrun_step_batches; migration 22's trigger packs it.
RECORD_STEPS_21 = """
WITH e AS (
    SELECT * FROM jsonb_to_recordset(%(events)s) AS e(
        n integer, step text, checkpoint_id text, started_at timestamptz, duration_seconds double precision,
        checkpoint_seconds double precision, effect_keys text[])
), events AS (
    INSERT INTO agentrun_step_batches
        (run_id, attempt, steps, started_at, duration_us, checkpoint_ids, checkpoint_us, effect_keys)
    SELECT %(run_id)s, %(attempt)s, array_agg(e.step ORDER BY e.n), array_agg(e.started_at ORDER BY e.n),
           array_agg(round(e.duration_seconds * 1e6)::bigint ORDER BY e.n),
           CASE WHEN count(e.checkpoint_id) > 0 THEN array_agg(e.checkpoint_id ORDER BY e.n) END,
           CASE WHEN count(e.checkpoint_seconds) > 0
                THEN array_agg(round(e.checkpoint_seconds * 1e6)::bigint ORDER BY e.n) END,
           CASE WHEN bool_or(cardinality(e.effect_keys) > 0)
                THEN jsonb_agg(to_jsonb(coalesce(e.effect_keys, '{}')) ORDER BY e.n) END
    FROM e GROUP BY e.n / 65536 ORDER BY e.n / 65536
    RETURNING cardinality(steps) AS n
), moved AS (
    UPDATE agentrun_runs SET current_step = %(current_step)s, updated_at = now()
    WHERE run_id = %(run_id)s AND lease_epoch = %(epoch)s AND %(current_step)s::text IS NOT NULL
    RETURNING 1
)
SELECT (SELECT coalesce(sum(n), 0) FROM events) AS recorded, (SELECT count(*) FROM moved) AS moved
"""


@pytest.mark.parametrize(
    ("statement", "batches"),
    [(PREVIOUS_RECORD_STEPS, 2), (RECORD_STEPS_21, 1)],
    ids=["before-migration-21", "migration-21"],
)
def test_a_worker_of_an_earlier_release_still_records_its_events(
    pg_dsn: str, statement: str, batches: int
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        _admitted(conn)
        events = [_event(0), _event(1, effect_keys=["k"], checkpoint_id="cp", checkpoint_seconds=0.001)]
        params = _json_params(events, "node")
        assert conn.execute(statement, params).fetchone() is not None  # what each read: nothing to check
        assert len(_batches(conn)) == batches  # before 21: one batch per event, as its rows were
        got = [
            (e.step, e.started_at, e.checkpoint_id, e.effect_keys) for e in store.list_step_events(conn, RUN)
        ]
    ms = datetime.timedelta(milliseconds=1)
    assert got == [("node:0", T0, None, []), ("node:1", T0 + ms, "cp", ["k"])]


@pytest.mark.parametrize("version", [20, 21])
def test_events_of_a_database_migrated_before_are_kept(
    dev_settings_: dev_settings.Settings, dev_postgres: postgres.Info, version: int
) -> None:
    """A database at migration 20 (events in the old table) or 21 (batches in their plain form, and one
    of them from the view's insert): migrating keeps every event as it was."""
    settings = dev_settings_
    name = f"agentrun_t_{os.getpid()}_before{version + 1}"
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
                if migration.version > version:
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
            expected = [(1, "a:1", "cp-1", T0, 0.5, 0.001234, ["k1"]), (2, "b:2", None, T0, 1.25, None, [])]
            if version == 21:
                events = [
                    _event(0),
                    _event(1, effect_keys=["k"], checkpoint_id="cp", checkpoint_seconds=0.001),
                ]
                events += [{**_event(2), "step": name} for name in NAMES]
                conn.execute(RECORD_STEPS_21, _json_params(events, None, attempt=3))
                expected += [
                    (
                        3,
                        e["step"],
                        e["checkpoint_id"],
                        e["started_at"],
                        round(e["duration_seconds"], 6),
                        e["checkpoint_seconds"] and round(e["checkpoint_seconds"], 6),
                        e["effect_keys"],
                    )
                    for e in events
                ]
            applied = store.migrate(conn)
            assert ("0021_step_batches.sql" in applied) == (version == 20)
            assert "0022_step_batches_packed.sql" in applied
            plain = conn.execute(
                "SELECT count(*) FROM agentrun_step_batches WHERE steps IS NOT NULL"
            ).fetchone()
            events_read = store.list_step_events(conn, RUN)
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
        for e in events_read
    ]
    assert plain == (0,)
    assert got == expected
