"""Fenced checkpoints with real worker processes, real Leases, real Postgres and real providers.

- a zombie blocked inside a node until the new owner has finished: its checkpoint write is refused, it exits
  12, exactly one provider effect each, the final state is the owner's;
- attempts under a clock 30 s behind / ahead (libfaketime): resume follows the head checkpoint, the approval
  in a later node is asked, nothing is lost;
- the trace's checkpoint-write figure is the saver's own measurement;
- Postgres restarted (fast shutdown) or its postmaster SIGKILLed while a node heartbeats: the attempt ends
  lost to infrastructure (exit 14, never GraphFailed) and the next attempt resumes and succeeds.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agentrun import render, trace
from agentrun_core import store
from agentrun_dev import http_provider
from agentrun_dev import settings as dev_settings
from tests.integration import pg_chaos
from tests.support import worker_harness
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.postgres]

_LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
_WRITE_LOG = re.compile(r"checkpoint write ns='' id=(\S+) seconds=(\S+)")


@pytest.fixture
def worker(
    pg_dsn: str, namespace: str, admin_kubeconfig: Path, providers: worker_harness.Providers
) -> worker_harness.Worker:
    return worker_harness.Worker(pg_dsn, providers, kubeconfig=admin_kubeconfig, namespace=namespace)


def _db(dsn: str) -> psycopg.Connection[Any]:
    return psycopg.connect(dsn, autocommit=True)


def _checkpoint_ids(dsn: str, run_id: str) -> list[str]:
    with _db(dsn) as conn:
        rows = conn.execute(
            "SELECT checkpoint_id FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = '' "
            "ORDER BY checkpoint_id",
            (run_id,),
        ).fetchall()
    return [r[0] for r in rows]


def _mail_count(providers: worker_harness.Providers) -> int:
    _, mail, _ = http_provider.request(providers.smtp_api + "/stats")
    return int(mail["count"])


def _provider_counts(providers: worker_harness.Providers) -> tuple[dict[str, int], int]:
    """Effects performed per key at the HTTP provider, and messages at the SMTP sink (waited for: the sink
    may store a message just after answering the client)."""
    stats = http_provider.stats(providers.http_url)
    with contextlib.suppress(AssertionError):
        wait_for(lambda: _mail_count(providers) >= 1, 10, what="the sink to store the mail", interval=0.05)
    return dict(stats["effects_performed"]), _mail_count(providers)


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_zombie_blocked_in_a_node_cannot_write_its_checkpoint(
    pg_dsn: str,
    worker: worker_harness.Worker,
    providers: worker_harness.Providers,
    tmp_path: Path,
    durability: str,
) -> None:
    """(Under ``exit`` nothing is written before the run ends: the zombie's first write is a ledger write,
    refused by the ledger's own fencing; tests/integration/test_checkpointer.py covers the exit-mode save.)"""
    worker_harness.admit(pg_dsn, "r", durability=durability)
    held = worker_harness.start_blocked(worker, "r", tmp_path, pod="pod-a")
    zombie, block, log = held.proc, held.block, held.log
    try:
        with _db(pg_dsn) as conn:
            first_epoch = store.get_run(conn, "r").lease_epoch  # type: ignore[union-attr]
        zombie.send_signal(signal.SIGSTOP)  # a GC pause: it still believes it holds the Lease
        try:
            owner = worker.run("r", pod="pod-b", attempt=2, AGENTRUN_TEST_NODE_LOG=str(log))
            assert owner.returncode == 0, owner.stderr[-3000:]
        finally:
            zombie.send_signal(signal.SIGCONT)
        with _db(pg_dsn) as conn:
            done = store.get_run(conn, "r")
        assert done is not None and done.status == "succeeded" and done.lease_epoch > first_epoch
        before = _checkpoint_ids(pg_dsn, "r")
        assert done.head_checkpoint_id == before[-1]
        # The zombie is still inside its node (the block file exists) although the owner has finished.
        assert zombie.poll() is None
    finally:
        block.unlink()  # now the zombie's node returns and LangGraph writes its result
    _, err = zombie.communicate(timeout=120)
    assert zombie.returncode == 12, err[-3000:]
    assert re.search(r"checkpoint (pending )?writes? refused", err), err[-3000:]
    with _db(pg_dsn) as conn:
        after = store.get_run(conn, "r")
        effects = store.list_effects(conn, "r")
    assert after is not None and after.status == "succeeded" and after.result == done.result
    assert after.head_checkpoint_id == done.head_checkpoint_id
    assert _checkpoint_ids(pg_dsn, "r") == before  # nothing of the zombie's became durable
    performed, mails = _provider_counts(providers)
    assert sorted(performed.values()) == [1, 1] and mails == 1  # exactly one effect each, at the providers
    assert {e.epoch for e in effects} == {after.lease_epoch}
    assert log.read_text().split().count("act") == 1  # the zombie never got past its blocked node


def _skewed(offset: str) -> dict[str, str]:
    """Env that runs a worker with its wall clock ``offset`` seconds off (libfaketime; monotonic time real).
    tests/faketime/sitecustomize.py routes ``time.sleep`` around a libfaketime bug (see there)."""
    if offset in ("", "+0"):
        return {}
    return {
        "LD_PRELOAD": _LIBFAKETIME,
        "FAKETIME": offset,
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "PYTHONPATH": f"{worker_harness.REPO / 'tests' / 'faketime'}:{worker_harness.REPO}",
    }


@pytest.mark.skipif(not os.path.exists(_LIBFAKETIME), reason="needs Debian's faketime (.ci/run installs it)")
@pytest.mark.parametrize(("first", "second", "third"), [("+30", "-30", "+0"), ("-30", "+30", "-30")])
def test_attempts_under_skewed_clocks_resume_from_the_head(
    pg_dsn: str,
    worker: worker_harness.Worker,
    providers: worker_harness.Providers,
    tmp_path: Path,
    first: str,
    second: str,
    third: str,
) -> None:
    log = tmp_path / "log"
    worker_harness.admit(pg_dsn, "r", approval=True)
    # Attempt 1 is killed right after act's checkpoint (input, prepare, act: the 3rd checkpoint event).
    a1 = worker.run(
        "r", pod="pod-1", faults="after_checkpoint@3", AGENTRUN_TEST_NODE_LOG=str(log), **_skewed(first)
    )
    assert a1.returncode == -signal.SIGKILL, a1.stderr[-3000:]
    ids_1 = _checkpoint_ids(pg_dsn, "r")
    a2 = worker.run("r", pod="pod-2", attempt=2, AGENTRUN_TEST_NODE_LOG=str(log), **_skewed(second))
    assert a2.returncode == 10, a2.stderr[-3000:]  # parked: the approval in the later node was asked
    new_2 = sorted(set(_checkpoint_ids(pg_dsn, "r")) - set(ids_1))
    assert new_2, "attempt 2 wrote no checkpoint"
    if second == "-30":  # the skew is real: attempt 2's newer checkpoints sort before attempt 1's
        assert max(new_2) < max(ids_1)
    with _db(pg_dsn) as conn:
        (approval,) = store.list_approvals(conn, "r")
        assert store.decide_approval(
            conn, approval_id=approval.approval_id, run_id="r", decision="approved", decided_by="alice"
        )
    a3 = worker.run("r", pod="pod-3", attempt=3, AGENTRUN_TEST_NODE_LOG=str(log), **_skewed(third))
    assert a3.returncode == 0, a3.stderr[-3000:]
    with _db(pg_dsn) as conn:
        run = store.get_run(conn, "r")
        effects = store.list_effects(conn, "r")
    assert run is not None and run.status == "succeeded"
    assert {"approved": True} in run.result["log"] and "done" in run.result["log"]
    assert run.result["log"][0] == "prepared" and len(run.result["log"]) == 6  # each node's output once
    assert {e.status for e in effects} == {"sent"} and len(effects) == 3
    performed, mails = _provider_counts(providers)
    assert sorted(performed.values()) == [1, 1] and mails == 1
    nodes = log.read_text().split()
    assert nodes.count("finish") == 1 and nodes.count("act") == 1


def test_trace_checkpoint_figure_is_the_savers_own_measurement(
    pg_dsn: str, worker: worker_harness.Worker
) -> None:
    worker_harness.admit(pg_dsn, "r")
    proc = worker.run("r", pod="pod-a")
    assert proc.returncode == 0, proc.stderr[-3000:]
    measured = {m.group(1): float(m.group(2)) for m in _WRITE_LOG.finditer(proc.stderr)}
    with _db(pg_dsn) as conn:
        inputs = trace.Inputs(
            resource={"metadata": {"name": "r"}},
            run=store.get_run(conn, "r"),
            attempts=store.list_attempts(conn, "r"),
            steps=store.list_step_events(conn, "r"),
            effects=store.list_effects(conn, "r"),
            approvals=store.list_approvals(conn, "r"),
        )
    data = trace.build(inputs)
    steps = data["steps"]
    assert [s["step"].split(":")[0] for s in steps] == ["prepare", "act", "approve", "finish"][: len(steps)]
    assert len(steps) >= 3
    for step in steps:
        # The saver's figure, exactly, as stored: in whole microseconds (migration 21).
        assert step["checkpointSeconds"] == round(measured[step["checkpointId"]], 6)
        # A real write on real Postgres (a round trip and a commit), not a figure taken around nothing. The
        # pipelined write (one round trip) can be under a millisecond, so the trace may show it in us.
        assert 0.0002 < step["checkpointSeconds"] < 10
    text = render.trace(data)  # the CKPT-WRITE column of `agentrun trace`
    for step in steps:
        shown = render.seconds(step["checkpointSeconds"])
        assert shown is not None and shown in text


# serial: it restarts the dev cluster's shared Postgres, which every test beside it would feel
# (scripts/test runs it alone, after the rest).
@pytest.mark.serial
@pytest.mark.parametrize("kill_postmaster", [False, True], ids=["restart", "postmaster-sigkill"])
def test_postgres_restart_while_a_node_heartbeats_is_an_infra_loss_then_succeeds(
    pg_dsn: str,
    worker: worker_harness.Worker,
    providers: worker_harness.Providers,
    dev_settings_: dev_settings.Settings,
    tmp_path: Path,
    kill_postmaster: bool,
) -> None:
    beat_file, log = tmp_path / "beat", tmp_path / "log"
    beat_file.touch()
    pg_chaos.durable_commits(pg_dsn)
    worker_harness.admit(pg_dsn, "r", graph="tests.graphs.ckpt_graphs:heartbeat_graph")
    first = worker.start(
        "r", pod="pod-a", AGENTRUN_TEST_BEAT_FILE=str(beat_file), AGENTRUN_TEST_NODE_LOG=str(log)
    )
    try:
        wait_for(
            lambda: log.exists() and "beat" in log.read_text(),
            60,
            what="the node to heartbeat",
            interval=0.05,
        )
        with _db(pg_dsn) as conn:
            wait_for(
                lambda: any(h.key.startswith("step:") for h in store.list_heartbeats(conn, "r")),
                60,
                what="a heartbeat row from inside the node",
                interval=0.05,
            )
        pg_chaos.restart(dev_settings_, kill_postmaster=kill_postmaster)
        _, err = first.communicate(timeout=180)
    finally:
        with contextlib.suppress(ProcessLookupError):
            first.kill()
    assert first.returncode == 14, err[-3000:]
    assert "lost to infrastructure" in err and "GraphFailed" not in err
    with _db(pg_dsn) as conn:
        run = store.get_run(conn, "r")
    assert run is not None and run.status == "running" and run.error is None  # not the graph's failure
    beat_file.unlink()
    second = worker.run("r", pod="pod-b", attempt=2, AGENTRUN_TEST_NODE_LOG=str(log))
    assert second.returncode == 0, second.stderr[-3000:]
    with _db(pg_dsn) as conn:
        run = store.get_run(conn, "r")
        attempts = {a.attempt: a for a in store.list_attempts(conn, "r")}
    assert run is not None and run.status == "succeeded"
    assert attempts[2].outcome == "succeeded"
    if attempts[1].outcome is not None:  # recorded once Postgres answered again (best effort, bounded)
        assert attempts[1].outcome == "lost" and (attempts[1].detail or "").startswith("infra")
    performed, mails = _provider_counts(providers)
    assert list(performed.values()) == [1] and mails == 1, (performed, mails, second.stderr[-3000:])
    assert log.read_text().split().count("charge") == 1  # resumed after the charge's checkpoint


def test_faketime_is_where_the_skew_test_expects_it() -> None:
    if shutil.which("faketime") is None:
        pytest.skip("faketime not installed")
    assert os.path.exists(_LIBFAKETIME)
