"""The P1 figure "vs fence+RLS off" measures what its name says: ``bench.db.unguard`` turns off the checkpoint
fence and row-level security of a benchmark's database, and a worker still runs there."""

from __future__ import annotations

import psycopg
import pytest

from agentrun_core import store
from bench import db
from tests.support import pg

RUN = "run-unguarded"
STALE_WRITE = (  # a pending write under epoch 7 of a run whose epoch is 1 (test_checkpointer.py's WRITE_ROW)
    "INSERT INTO checkpoint_writes"
    " (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, blob)"
    " VALUES (%s, '', 'c1', 't1', 0, 'value', 'json', '\\x00')"
)


def _stale_write(dsn: str) -> None:
    with psycopg.connect(dsn) as worker:
        worker.execute("SELECT agentrun_mark_fence(%s)", (f"7:{RUN}",))
        worker.execute(STALE_WRITE, (RUN,))


def _rls_tables(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        return [t for (t,) in conn.execute(db._RLS_TABLES).fetchall()]


@pytest.mark.slow
def test_unguard_turns_off_the_fence_and_rls_and_a_worker_still_runs(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        pg.admit(admin, run_id=RUN, graph="g:g")
        store.claim_run(admin, run_id=RUN, epoch=1, holder="pod-1")
    # Guarded, as migrated: the stale write is refused, and the tenant tables are under RLS.
    with pytest.raises(psycopg.Error, match="epoch 7 is not current"):
        _stale_write(pg_dsn)
    guarded = {"agentrun_runs", "agentrun_effects", "checkpoints", "checkpoint_writes"}
    assert guarded <= set(_rls_tables(pg_dsn))

    db.unguard(pg_dsn)
    _stale_write(pg_dsn)  # the fence no longer refuses
    assert _rls_tables(pg_dsn) == []


@pytest.mark.slow
def test_a_worker_attempt_succeeds_on_an_unguarded_database(dev_postgres: object) -> None:
    from bench import p1_steps

    with db.fresh_database("unguard-test") as dsn:
        db.unguard(dsn)
        timing = p1_steps.worker_attempt(dsn, "noop_3", "sync")  # raises unless the worker exits 0
        assert timing["total"] > 0
        with psycopg.connect(dsn) as conn:
            row = conn.execute(
                "SELECT status FROM agentrun_runs WHERE run_id = %s", (p1_steps.LAST_RUN_ID[0],)
            ).fetchone()
        assert row == ("succeeded",)
