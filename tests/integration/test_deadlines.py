"""Run deadlines on the real API server with real worker Pods: a graph that loops forever ends with
DeadlineExceeded, one that heartbeats inside one step forever with ProgressDeadlineExceeded, each within its
deadline and a generous margin, its worker stopped and fenced; time parked on an approval is not counted."""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes
import psycopg
import pytest

from agentrun_core import store
from tests.support.kube import bind, condition, create_run, events, kubectl, patch_spec, pods, run_status
from tests.support.operator_proc import OperatorHandle
from tests.support.specs import APPROVAL, lines
from tests.support.waiting import wait_for, wait_phase

LOOP = "tests.graphs.deadline_graphs:loop"
STUCK = "tests.graphs.deadline_graphs:stuck"
MARGIN = 30.0  # seconds past the deadline a loaded 2-core machine may take: a Pod start, noticing, recording


def db(pg_dsn: str) -> psycopg.Connection[Any]:
    return psycopg.connect(pg_dsn, autocommit=True)


def deadline_spec(graph: str, input_: dict[str, Any], **deadlines: int) -> dict[str, Any]:
    """A run of ``graph`` with these deadline fields, retried at once (the default Lease)."""
    return {"graph": graph, "input": input_, "retry": {"backoffSeconds": 0}, **deadlines}


def no_live_worker(kube: kubernetes.client.ApiClient, ns: str, name: str) -> bool:
    return not [
        p
        for p in pods(kube, ns, name)
        if p.status.phase in ("Pending", "Running") and not p.metadata.deletion_timestamp
    ] and all(
        p.status.phase in ("Succeeded", "Failed") or p.metadata.deletion_timestamp
        for p in pods(kube, ns, name)
    )


def ended(pg_dsn: str, uid: str) -> tuple[store.Run, list[store.Attempt]]:
    with db(pg_dsn) as conn:
        row = store.get_run(conn, uid)
        attempts = store.list_attempts(conn, uid)
    assert row is not None
    return row, attempts


def assert_failed_by(
    kube: kubernetes.client.ApiClient, op: OperatorHandle, name: str, reason: str, field: str
) -> dict[str, Any]:
    status = wait_phase(kube, op.namespace, name, ("Failed", "Succeeded", "Cancelled"), 180, op)
    assert status["phase"] == "Failed", status
    failed = condition(status, "Failed")
    assert (failed["status"], failed["reason"]) == ("True", reason), status
    assert field in status["message"], status
    warned = [e for e in events(kube, op.namespace, name) if e.reason == reason]
    assert len(warned) == 1 and warned[0].type == "Warning" and field in warned[0].message, warned
    return status


def ended_at_its_deadline(
    kube: kubernetes.client.ApiClient,
    op: OperatorHandle,
    pg_dsn: str,
    name: str,
    spec: dict[str, Any],
    reason: str,
    deadline: int,
) -> tuple[str, list[store.Attempt]]:
    """Run ``name`` created and failed by ``reason`` (its message naming the deadline field) ``deadline`` s
    after its first attempt started, or a margin later at most: its uid and attempts."""
    field = {
        "DeadlineExceeded": "activeDeadlineSeconds",
        "ProgressDeadlineExceeded": "progressDeadlineSeconds",
    }
    uid = str(create_run(kube, op.namespace, name, spec)["metadata"]["uid"])
    assert_failed_by(kube, op, name, reason, f"{field[reason]}={deadline}")
    row, attempts = ended(pg_dsn, uid)
    assert (row.status, row.status_reason) == ("failed", reason)
    assert row.finished_at is not None
    took = (row.finished_at - attempts[0].started_at).total_seconds()
    assert deadline <= took <= deadline + MARGIN, (took, attempts)
    return uid, attempts


def test_a_looping_heartbeating_graph_ends_at_its_active_deadline(
    kube: kubernetes.client.ApiClient, operator: OperatorHandle, pg_dsn: str, tmp_path: Path
) -> None:
    ns, out, deadline = operator.namespace, tmp_path / "ticks.txt", 15
    # progress is made all along (a step every 0.2 s): only the active deadline can end it
    spec = deadline_spec(
        LOOP, {"path": str(out), "tick": 0.2}, activeDeadlineSeconds=deadline, progressDeadlineSeconds=10
    )
    uid, attempts = ended_at_its_deadline(
        kube, operator, pg_dsn, "looper", spec, "DeadlineExceeded", deadline
    )
    assert len(attempts) == 1  # no new attempt after the deadline
    # The worker is stopped (its Pod deleted) ...
    wait_for(
        lambda: no_live_worker(kube, ns, "looper"), 120, "the worker Pod to stop", on_timeout=operator.logs
    )
    # ... and every effect it performed (a line at the provider) is in the ledger, under its key: none lost
    # mid-flight, none performed after the fence without a row.
    performed = lines(out)
    assert len(performed) >= 3, performed  # it looped
    with db(pg_dsn) as conn:
        ledger = {e.idempotency_key: e.status for e in store.list_effects(conn, uid)}
    assert {line.split(" ", 1)[0] for line in performed} <= set(ledger), (performed, ledger)
    assert len(ledger) - len(performed) in (0, 1), (performed, ledger)  # reserved, not yet performed
    # at most the one in flight keeps its row as it stood (pending: its outcome unknown, settled on a retry)
    assert sum(1 for s in ledger.values() if s not in ("sent", "confirmed")) <= 1, ledger


def test_a_step_that_heartbeats_forever_ends_at_its_progress_deadline(
    kube: kubernetes.client.ApiClient, operator: OperatorHandle, pg_dsn: str
) -> None:
    ns, deadline = operator.namespace, 8
    spec = deadline_spec(STUCK, {}, progressDeadlineSeconds=deadline)
    uid, _ = ended_at_its_deadline(
        kube, operator, pg_dsn, "stuck", spec, "ProgressDeadlineExceeded", deadline
    )
    with db(pg_dsn) as conn:
        assert store.list_heartbeats(conn, uid), "the worker was alive and heartbeating in its step"
        assert not store.list_step_events(conn, uid)  # and never finished a step
    wait_for(
        lambda: no_live_worker(kube, ns, "stuck"), 120, "the worker Pod to stop", on_timeout=operator.logs
    )


@pytest.fixture
def manager(kube: kubernetes.client.ApiClient, namespace: str, identity: Callable[..., Path]) -> Path:
    bind(kube, namespace, "manager", "agentrun-approver")
    return identity("manager", ["managers"])


def test_time_parked_on_an_approval_is_not_counted(
    kube: kubernetes.client.ApiClient, operator: OperatorHandle, pg_dsn: str, tmp_path: Path, manager: Path
) -> None:
    ns, out = operator.namespace, tmp_path / "out.txt"
    spec = deadline_spec(APPROVAL, {"path": str(out), "line": "approved-line"}, progressDeadlineSeconds=60)
    uid = create_run(kube, ns, "parked", spec)["metadata"]["uid"]
    status = wait_phase(kube, ns, "parked", "WaitingApproval", 120, operator)
    approval_id = status["pendingApproval"]["id"]
    _, attempts = ended(pg_dsn, uid)
    first = attempts[0]
    assert first.ended_at is not None  # the worker exited: the run is parked, no attempt runs
    ran = (first.ended_at - first.started_at).total_seconds()
    # An active deadline the first attempt used part of: 40 s left for the resumed attempt.
    budget = math.ceil(ran) + 40
    patch_spec(kube, ns, "parked", {"activeDeadlineSeconds": budget})

    def parked_for() -> float:
        with db(pg_dsn) as conn:
            _, now = store.get_run_now(conn, uid)
        assert first.ended_at is not None
        return (now - first.ended_at).total_seconds()

    # Parked longer than the whole budget (by Postgres' clock, the one the deadline is measured on).
    wait_for(lambda: parked_for() > budget + 5, budget + 60, "the run to be parked past its deadline")
    status = run_status(kube, ns, "parked")
    assert status["phase"] == "WaitingApproval", status
    assert not [e for e in events(kube, ns, "parked") if "Deadline" in e.reason]
    proc = kubectl(
        manager, "annotate", "-n", ns, "--overwrite", "ar/parked", f"agentrun.dev/approve={approval_id}"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    status = wait_phase(kube, ns, "parked", ("Succeeded", "Failed"), 180, operator)
    assert status["phase"] == "Succeeded", status
    assert len(lines(out)) == 1
    row, attempts = ended(pg_dsn, uid)
    assert row.status == "succeeded" and len(attempts) == 2
    span = (attempts[-1].ended_at or datetime.datetime.now(datetime.UTC)) - attempts[0].started_at
    assert span.total_seconds() > budget  # wall-clock past the deadline: only the parked time made it fit


def test_time_suspended_is_not_counted(
    kube: kubernetes.client.ApiClient, operator: OperatorHandle, pg_dsn: str, tmp_path: Path
) -> None:
    ns, out, deadline = operator.namespace, tmp_path / "ticks.txt", 30
    spec = deadline_spec(LOOP, {"path": str(out), "tick": 0.2}, activeDeadlineSeconds=deadline)
    uid = create_run(kube, ns, "pausing", spec)["metadata"]["uid"]
    wait_for(lambda: len(lines(out)) >= 3, 120, "the loop to tick", on_timeout=operator.logs)
    patch_spec(kube, ns, "pausing", {"suspend": True})
    wait_phase(kube, ns, "pausing", ("Suspended", "Failed"), 120, operator)
    status = run_status(kube, ns, "pausing")
    assert status["phase"] == "Suspended", status  # stopped before its deadline

    def suspended_for() -> float:
        _, attempts = ended(pg_dsn, uid)
        with db(pg_dsn) as conn:
            _, now = store.get_run_now(conn, uid)
        end = attempts[0].ended_at
        return (now - end).total_seconds() if end is not None and len(attempts) == 1 else 0.0

    # Suspended longer than the whole deadline (Postgres' clock): it still has active time left.
    wait_for(
        lambda: suspended_for() > deadline + 5, deadline + 90, "the run to stay suspended past its deadline"
    )
    assert run_status(kube, ns, "pausing")["phase"] == "Suspended"
    patch_spec(kube, ns, "pausing", {"suspend": False})
    assert_failed_by(kube, operator, "pausing", "DeadlineExceeded", "activeDeadlineSeconds=30")
    row, attempts = ended(pg_dsn, uid)
    assert len(attempts) == 2 and row.finished_at is not None
    first, second = attempts
    assert first.ended_at is not None
    active = (first.ended_at - first.started_at + row.finished_at - second.started_at).total_seconds()
    assert deadline <= active <= deadline + MARGIN, (active, attempts)
    # the wall clock went well past the deadline: only the suspended time made that fit
    assert (row.finished_at - first.started_at).total_seconds() > 2 * deadline
