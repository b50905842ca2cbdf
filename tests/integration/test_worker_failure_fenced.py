"""Every write on the worker's failure path is fenced: a worker whose graph cannot be loaded fails the run
only if it still holds the run's epoch. Here a real worker process keeps retrying an import that fails
with ``OSError``; meanwhile a newer attempt claims the run (a higher epoch). The deposed worker's failure
write must be refused — the run stays with the newer holder, not ``failed`` — and the worker exits 12."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psycopg

from agentrun_core import store
from tests.support.waiting import wait_for
from tests.support.worker_harness import Worker

GRAPH = "tests.graphs.unreachable_import:graph"
EXIT_FENCED = 12



def test_a_deposed_workers_graph_load_failure_is_refused(pg_dsn: str, tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        store.admit_run(
            conn, run_id="r1", namespace="ns", name="n", graph=GRAPH, input={}, spec_hash="h",
            durability="sync", approval_policy=None,
        )
        with log.open("w") as sink:
            worker = subprocess.Popen(
                [sys.executable, "-m", "agent_worker.main"],
                env=Worker(dsn=pg_dsn).env("r1", pod="pod-a", attempt=1),
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        try:
            # The worker is inside its import retries (about 7.5 s of backoff) when the run is taken over.
            wait_for(lambda: "retrying in" in log.read_text(), 60, "pod-a's import retries", interval=0.1)
            store.claim_run(conn, run_id="r1", epoch=10, holder="pod-b")  # a newer attempt took over
            worker.wait(timeout=120)
        finally:
            if worker.poll() is None:
                worker.kill()
        err = log.read_text()
        run = store.get_run(conn, "r1")
        assert run is not None
        found = (run.status, run.holder, run.lease_epoch, run.error)
        assert found == ("running", "pod-b", 10, None), (run, err)
        assert worker.returncode == EXIT_FENCED, err
