"""The worker process against real Postgres (no Lease: AGENTRUN_LEASE_MODE=none): outcomes and exit codes."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import psycopg
import pytest

from agentrun_core import store
from tests.support import pg, worker_harness
from tests.support.waiting import wait_for

pytestmark = pytest.mark.postgres


def test_graph_that_raises_fails_the_run_with_the_error(
    pg_dsn: str, providers: worker_harness.Providers
) -> None:
    worker = worker_harness.Worker(pg_dsn, providers)
    worker_harness.admit(pg_dsn, "r", fail=True)
    proc = worker.run("r", pod="p")
    assert proc.returncode == 1, proc.stderr[-2000:]
    run = pg.run_row(pg_dsn, "r")
    assert run.status == "failed" and run.status_reason == "ValueError"
    assert run.error is not None and "the graph failed on purpose" in run.error
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert [a.outcome for a in store.list_attempts(conn, "r")] == ["failed"]


@pytest.mark.parametrize(
    ("graph", "message"),
    [
        ("tests.graphs.nope:graph", "module 'tests.graphs.nope' not found"),
        ("tests.graphs.effect_graph:nope", "has no attribute 'nope'"),
        ("tests.graphs.special_graphs:not_a_graph", "expected a compiled graph, a StateGraph or a factory"),
        ("no-colon", "not of the form package.module:attr"),
    ],
)
def test_unknown_graph_reference_fails_clearly(pg_dsn: str, graph: str, message: str) -> None:
    worker_harness.admit(pg_dsn, "r", graph=graph)
    proc = worker_harness.Worker(pg_dsn).run("r", pod="p")
    assert proc.returncode == 1
    run = pg.run_row(pg_dsn, "r")
    assert run.status == "failed" and run.error is not None and message in run.error
    assert message in proc.stderr


def test_graph_factory_and_compiled_graph_both_load(pg_dsn: str, tmp_path: Path) -> None:
    log = tmp_path / "log"
    log.touch()
    worker_harness.admit(pg_dsn, "r", graph="tests.graphs.special_graphs:parallel")
    proc = worker_harness.Worker(pg_dsn).run("r", pod="p", AGENTRUN_TEST_NODE_LOG=str(log))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert pg.run_row(pg_dsn, "r").result == {"log": ["fast", "slow", "after"]}


def test_not_admitted_and_bad_config_exit_2(pg_dsn: str) -> None:
    worker = worker_harness.Worker(pg_dsn)
    proc = worker.run("missing", pod="p")
    assert proc.returncode == 2 and "not admitted" in proc.stderr
    proc = worker.run("missing", pod="p", faults="after_reserv")
    assert proc.returncode == 2 and "unknown fault point 'after_reserv'" in proc.stderr


def test_crash_before_first_checkpoint_restarts_from_input(
    pg_dsn: str, providers: worker_harness.Providers
) -> None:
    worker = worker_harness.Worker(pg_dsn, providers)
    worker_harness.admit(pg_dsn, "r")
    assert worker.run("r", pod="p", faults="after_lease_acquired").returncode == -9
    proc = worker.run("r", pod="p", attempt=2)
    assert proc.returncode == 0 and "EmptyInputError" not in proc.stderr
    assert pg.run_row(pg_dsn, "r").status == "succeeded"


def test_unknown_outcome_without_lookup_stops_the_run(pg_dsn: str, tmp_path: Path) -> None:
    log = tmp_path / "log"
    worker = worker_harness.Worker(pg_dsn)
    worker_harness.admit(pg_dsn, "r", graph="tests.graphs.special_graphs:unknown_outcome")
    assert worker.run("r", pod="p", faults="after_call", AGENTRUN_TEST_NODE_LOG=str(log)).returncode == -9
    proc = worker.run("r", pod="p", attempt=2, AGENTRUN_TEST_NODE_LOG=str(log))
    assert proc.returncode == 13, proc.stderr[-2000:]
    run = pg.run_row(pg_dsn, "r")
    assert run.status == "needs_human" and run.status_reason == "EffectOutcomeUnknown"
    assert run.error is not None and "has no lookup hook and its provider does not dedupe by key" in run.error
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        (effect,) = store.list_effects(conn, "r")
    assert effect.status == "pending" and effect.needs_human
    assert len(log.read_text().split()) == 1  # the tool ran once, never again
    # A later attempt does not guess either.
    assert worker.run("r", pod="p", attempt=3).returncode == 13


def test_sigterm_drains_at_the_next_step_boundary(
    pg_dsn: str, providers: worker_harness.Providers, tmp_path: Path
) -> None:
    worker = worker_harness.Worker(pg_dsn, providers)
    worker_harness.admit(pg_dsn, "r")
    held = worker_harness.start_blocked(worker, "r", tmp_path, pod="p", timeout=30)
    proc, block, log = held.proc, held.block, held.log
    proc.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    block.unlink()
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 11, err[-2000:]
    assert time.monotonic() - sent < 10
    run = pg.run_row(pg_dsn, "r")
    assert run.status == "running" and run.status_reason == "drained (SIGTERM)"
    assert run.current_step == "prepare"  # stopped right after the step that was running
    proc2 = worker.run("r", pod="p", attempt=2, AGENTRUN_TEST_NODE_LOG=str(log))
    assert proc2.returncode == 0
    assert log.read_text().split().count("prepare") == 1


def test_sigterm_inside_a_long_step_exits_by_the_drain_deadline(pg_dsn: str, tmp_path: Path) -> None:
    block = tmp_path / "block"
    block.touch()
    log = tmp_path / "log"
    worker_harness.admit(pg_dsn, "r")
    proc = worker_harness.Worker(pg_dsn).start(
        "r",
        pod="p",
        AGENTRUN_TEST_BLOCK_FILE=str(block),
        AGENTRUN_TEST_NODE_LOG=str(log),
        AGENTRUN_DRAIN_SECONDS="1",
    )
    wait_for(lambda: log.exists() and "prepare" in log.read_text(), 30, "node prepare running", interval=0.05)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    assert proc.returncode == 11
    assert 0.9 < time.monotonic() - sent < 8


def test_pythonhashseed_does_not_change_keys(pg_dsn: str, providers: worker_harness.Providers) -> None:
    keys_by_seed = []
    for seed in ("1", "999"):
        worker = worker_harness.Worker(pg_dsn, providers, extra_env={"PYTHONHASHSEED": seed})
        run_id = "same-run"
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("DELETE FROM agentrun_runs WHERE run_id = %s", (run_id,))
            conn.execute("DELETE FROM checkpoints WHERE thread_id = %s", (run_id,))
        worker_harness.admit(pg_dsn, run_id)
        assert worker.run(run_id, pod="p").returncode == 0
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            keys_by_seed.append(sorted(e.idempotency_key for e in store.list_effects(conn, run_id)))
    assert keys_by_seed[0] == keys_by_seed[1] and len(keys_by_seed[0]) == 3
