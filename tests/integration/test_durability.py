"""Durability modes on the installed langgraph, with real worker processes killed at step boundaries.

Documented (docs/worker.md): ``sync`` — when the worker sees a step's checkpoint (the ``after_checkpoint``
point), the step's writes are in Postgres, so a kill there never re-runs that step; a task that finished
inside a superstep whose sibling died is not re-run either (its pending writes were saved). ``exit`` —
nothing is saved until the run exits (parks, fails, finishes): a kill mid-run re-runs everything from the
input. ``async`` — saves overlap the next step: a kill may re-run the last step (the ledger keeps effects
single either way).
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from agent_worker import store
from tests.chaos import worker_harness

pytestmark = pytest.mark.postgres


def _counts(log: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in log.read_text().split():
        counts[line] = counts.get(line, 0) + 1
    return counts


def _finish(worker: worker_harness.Worker, run_id: str, log: Path) -> None:
    proc = worker.run(run_id, pod="p2", attempt=2, AGENTRUN_TEST_NODE_LOG=str(log))
    assert proc.returncode == 0, proc.stderr[-3000:]
    with psycopg.connect(worker.dsn, autocommit=True) as conn:
        run = store.get_run(conn, run_id)
        assert run is not None and run.status == "succeeded"


@pytest.mark.parametrize(
    ("checkpoint_hit", "killed_after"),
    # checkpoint events: 1 = input, 2 = step 0, 3 = after "prepare", 4 = after "act", 5 = after "approve"
    [(3, "prepare"), (4, "act"), (5, "approve")],
)
def test_sync_checkpoint_holds_the_step_writes(
    pg_dsn: str, tmp_path: Path, checkpoint_hit: int, killed_after: str
) -> None:
    """Would fail if ``sync`` reported a checkpoint before the step's writes were stored (issue 8039)."""
    from agentrun_dev import http_provider, smtp_sink

    log = tmp_path / "nodes.log"
    with http_provider.HttpProvider(tmp_path / "h") as hp, smtp_sink.SmtpSink(tmp_path / "s") as sink:
        worker = worker_harness.Worker(
            pg_dsn, worker_harness.Providers(hp.url, sink.host, sink.port, sink.api_url)
        )
        worker_harness.admit(pg_dsn, "r", durability="sync")
        proc = worker.run(
            "r", pod="p1", faults=f"after_checkpoint@{checkpoint_hit}", AGENTRUN_TEST_NODE_LOG=str(log)
        )
        assert proc.returncode == -9, proc.stderr[-3000:]
        _finish(worker, "r", log)
    counts = _counts(log)
    assert counts == {"prepare": 1, "act": 1, "approve": 1, "finish": 1}, counts


def test_sync_keeps_a_finished_sibling_when_the_superstep_dies(pg_dsn: str, tmp_path: Path) -> None:
    log = tmp_path / "nodes.log"
    log.touch()
    worker = worker_harness.Worker(pg_dsn)
    worker_harness.admit(pg_dsn, "r", graph="tests.graphs.special_graphs:parallel", durability="sync")
    proc = worker.run("r", pod="p1", AGENTRUN_TEST_NODE_LOG=str(log), AGENTRUN_TEST_KILL_IN_SLOW="1")
    assert proc.returncode == -9, proc.stderr[-3000:]
    _finish(worker, "r", log)
    assert _counts(log) == {"fast": 1, "slow": 2, "after": 1}


def test_exit_mode_reruns_from_the_input_after_a_mid_run_kill(pg_dsn: str, tmp_path: Path) -> None:
    from agentrun_dev import http_provider, smtp_sink

    log = tmp_path / "nodes.log"
    with http_provider.HttpProvider(tmp_path / "h") as hp, smtp_sink.SmtpSink(tmp_path / "s") as sink:
        worker = worker_harness.Worker(
            pg_dsn, worker_harness.Providers(hp.url, sink.host, sink.port, sink.api_url)
        )
        worker_harness.admit(pg_dsn, "r", durability="exit")
        proc = worker.run("r", pod="p1", faults="after_checkpoint@4", AGENTRUN_TEST_NODE_LOG=str(log))
        assert proc.returncode == -9
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            saved = conn.execute("SELECT count(*) FROM checkpoints WHERE thread_id = 'r'").fetchone()
        assert saved is not None and saved[0] == 0  # exit: nothing persisted mid-run
        _finish(worker, "r", log)
        stats = http_provider.stats(hp.url)
    assert _counts(log) == {"prepare": 2, "act": 2, "approve": 1, "finish": 1}
    # The re-run of "act" found its effects in the ledger: the provider performed each once.
    assert set(stats["effects_performed"].values()) == {1}


def test_async_mode_completes_with_single_effects(pg_dsn: str, tmp_path: Path) -> None:
    from agentrun_dev import http_provider, smtp_sink

    log = tmp_path / "nodes.log"
    with http_provider.HttpProvider(tmp_path / "h") as hp, smtp_sink.SmtpSink(tmp_path / "s") as sink:
        worker = worker_harness.Worker(
            pg_dsn, worker_harness.Providers(hp.url, sink.host, sink.port, sink.api_url)
        )
        worker_harness.admit(pg_dsn, "r", durability="async")
        proc = worker.run("r", pod="p1", faults="after_record@2", AGENTRUN_TEST_NODE_LOG=str(log))
        assert proc.returncode == -9
        _finish(worker, "r", log)
        stats = http_provider.stats(hp.url)
        _, mail, _ = http_provider.request(sink.api_url + "/stats")
    assert set(stats["effects_performed"].values()) == {1} and mail["count"] == 1
    counts = _counts(log)
    assert counts["act"] == 2 and counts["prepare"] <= 2  # the killed step re-ran; effects did not
