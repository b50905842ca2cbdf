"""Several approval gates, with the real worker process and real Postgres (no Lease).

Two interrupt() calls in one node ask two approvals under two ids, and need two decisions: the second gate
never passes with the first decision. Two gates pending at once (parallel branches) are refused clearly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from agentrun_core import store
from tests.support import worker_harness

pytestmark = pytest.mark.postgres


@pytest.fixture
def providers(tmp_path: Path):  # type: ignore[no-untyped-def]
    """The providers and the SMTP sink itself (these tests count what reached it in its store)."""
    from agentrun_dev import http_provider, smtp_sink

    with http_provider.HttpProvider(tmp_path / "h") as hp, smtp_sink.SmtpSink(tmp_path / "s") as sink:
        yield worker_harness.Providers(hp.url, sink.host, sink.port, sink.api_url), sink


def _approvals(dsn: str, run_id: str) -> list[store.Approval]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return store.list_approvals(conn, run_id)


def _decide(dsn: str, run_id: str, approval_id: str, decision: str = "approved") -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return store.decide_approval(
            conn, approval_id=approval_id, run_id=run_id, decision=decision, decided_by="manager"
        )


def test_two_interrupts_in_one_node_need_two_decisions(pg_dsn: str, providers) -> None:  # type: ignore[no-untyped-def]
    hp, sink = providers
    worker = worker_harness.Worker(pg_dsn, hp)
    worker_harness.admit(pg_dsn, "r", graph="tests.graphs.approval_graphs:two_gates_graph")

    assert worker.run("r", pod="p1", attempt=1).returncode == 10  # parked on gate 1
    [first] = _approvals(pg_dsn, "r")
    assert first.status == "pending" and first.prompt["gate"] == 1
    assert _decide(pg_dsn, "r", first.approval_id)

    proc = worker.run("r", pod="p2", attempt=2)
    assert proc.returncode == 10, proc.stderr[-3000:]  # parked again: gate 2 is a new approval
    approvals = {a.approval_id: a for a in _approvals(pg_dsn, "r")}
    assert len(approvals) == 2
    [second] = [a for a in approvals.values() if a.approval_id != first.approval_id]
    assert second.status == "pending" and second.prompt["gate"] == 2
    assert len(sink.store.find(None)) == 0  # nothing sent on one decision
    # A worker started again without a decision stays parked (never resumes gate 2 with gate 1's answer).
    assert worker.run("r", pod="p3", attempt=3).returncode == 10
    assert len(sink.store.find(None)) == 0

    assert _decide(pg_dsn, "r", second.approval_id)
    proc = worker.run("r", pod="p4", attempt=4)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        run = store.get_run(conn, "r")
    assert run is not None and run.status == "succeeded"
    assert {"gate1": True} in run.result["log"] and {"gate2": True} in run.result["log"]
    assert len(sink.store.find(None)) == 1  # counted at the real SMTP sink


def test_second_gate_rejected_sends_nothing(pg_dsn: str, providers) -> None:  # type: ignore[no-untyped-def]
    hp, sink = providers
    worker = worker_harness.Worker(pg_dsn, hp)
    worker_harness.admit(pg_dsn, "r", graph="tests.graphs.approval_graphs:two_gates_graph")
    assert worker.run("r", pod="p1", attempt=1).returncode == 10
    assert _decide(pg_dsn, "r", _approvals(pg_dsn, "r")[0].approval_id)
    assert worker.run("r", pod="p2", attempt=2).returncode == 10
    second = [a for a in _approvals(pg_dsn, "r") if a.status == "pending"]
    assert len(second) == 1
    assert _decide(pg_dsn, "r", second[0].approval_id, "rejected")
    assert worker.run("r", pod="p3", attempt=3).returncode == 0
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        run = store.get_run(conn, "r")
    assert run is not None and {"gate2": False} in run.result["log"]
    assert len(sink.store.find(None)) == 0


def test_parallel_gates_are_refused_clearly(pg_dsn: str) -> None:
    worker_harness.admit(pg_dsn, "r", graph="tests.graphs.approval_graphs:parallel_gates_graph")
    proc = worker_harness.Worker(pg_dsn).run("r", pod="p1")
    assert proc.returncode == 1, proc.stderr[-3000:]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        run = store.get_run(conn, "r")
        assert store.list_approvals(conn, "r") == []  # nothing asked that could be decided by mistake
    assert run is not None and run.status == "failed" and run.status_reason == "TooManyInterrupts"
    assert run.error is not None and "2 interrupts pending at once" in run.error


def test_two_gates_end_to_end_with_the_cli(
    kube: Any, operator: Any, identity: Any, tmp_path: Path, pg_dsn: str
) -> None:
    """Operator, worker Pods and `kubectl agentrun approve` as the approver: the second gate needs its own
    decision, and once the run has asked two approvals the CLI wants the id the human saw."""
    from tests.support.kube import bind, create_run, kubectl
    from tests.support.waiting import wait_for, wait_phase

    ns, out = operator.namespace, tmp_path / "effects.txt"
    bind(kube, ns, "manager", "agentrun-approver")
    manager = identity("manager", ["managers"])
    spec = {"graph": "tests.graphs.approval_graphs:two_gates_line_graph", "input": {"path": str(out)}}
    uid = create_run(kube, ns, "gates", spec)["metadata"]["uid"]
    first = wait_phase(kube, ns, "gates", "WaitingApproval", 120, operator)["pendingApproval"]["id"]
    ok = kubectl(manager, "agentrun", "approve", "gates", "-n", ns, dsn=pg_dsn)  # the only approval so far
    assert ok.returncode == 0 and first in ok.stdout, ok.stderr

    def second_gate() -> str | None:
        pending = wait_phase(kube, ns, "gates", "WaitingApproval", 120, operator).get("pendingApproval") or {}
        return pending.get("id") if pending.get("id") not in (None, first) else None

    second = wait_for(second_gate, 120, "the second approval", on_timeout=operator.logs)
    assert not out.exists()  # one decision is not enough
    refused = kubectl(manager, "agentrun", "approve", "gates", "-n", ns, dsn=pg_dsn)
    assert (
        refused.returncode == 1 and "asked 2 approvals: say which one you decide with --id" in refused.stderr
    )
    stale = kubectl(manager, "agentrun", "approve", "gates", "-n", ns, "--id", first, dsn=pg_dsn)
    assert stale.returncode == 1 and "is not the pending approval" in stale.stderr
    ok = kubectl(manager, "agentrun", "approve", "gates", "-n", ns, "--id", second, dsn=pg_dsn)
    assert ok.returncode == 0, ok.stderr
    status = wait_phase(kube, ns, "gates", "Succeeded", 120, operator)
    assert out.read_text().splitlines() == ["both approved"]
    assert [(a["id"], a["by"]) for a in status["approvals"]] == [(first, "manager"), (second, "manager")]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert {(a.approval_id, a.status) for a in store.list_approvals(conn, uid)} == {
            (first, "approved"),
            (second, "approved"),
        }
