"""A human's decision never vanishes, the deadline and a decision are decided once by Postgres, and the
operator refuses decisions when the admission policies that guard them are gone. Real operator, real workers,
real API server and Postgres; faults are injected in Postgres itself (a trigger), not mocked.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes
import psycopg
import pytest
from test_approval_flow import annotate, lines, spec

from agentrun_core import store
from tests.support import pg
from tests.support.approvals import Scene, scene_fixture, wait_condition
from tests.support.kube import bind, condition, create_run, events, kubectl, run_status
from tests.support.operator_proc import REPO, OperatorHandle
from tests.support.waiting import wait_for, wait_phase

scene = scene_fixture()


@pytest.fixture
def manager(kube: kubernetes.client.ApiClient, namespace: str, identity: Callable[..., Path]) -> Path:
    bind(kube, namespace, "manager", "agentrun-approver")
    return identity("manager", ["managers"])


def _pending(kube: kubernetes.client.ApiClient, op: OperatorHandle, name: str) -> dict[str, Any]:
    status = wait_phase(kube, op.namespace, name, "WaitingApproval", 120, op)
    return dict(status["pendingApproval"])


# --- 11.1: the decision is stored before its annotations go -----------------------------------------------

FAIL_ONCE = """
CREATE SEQUENCE test_decide_fault;
CREATE FUNCTION test_decide_fault() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    -- nextval is not rolled back with the failed transaction: exactly the first decision fails.
    IF nextval('test_decide_fault') = 1 THEN
        RAISE EXCEPTION 'injected fault: decide_approval fails once';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER test_decide_fault BEFORE UPDATE ON agentrun_approvals FOR EACH ROW
    WHEN (OLD.status = 'pending' AND NEW.status <> 'pending') EXECUTE FUNCTION test_decide_fault();
"""


def test_decide_failing_once_still_applies_the_decision_exactly_once(
    kube: kubernetes.client.ApiClient, operator: OperatorHandle, manager: Path, tmp_path: Path, pg_dsn: str
) -> None:
    ns, out = operator.namespace, tmp_path / "effects.txt"
    uid = create_run(kube, ns, "flaky", spec(out))["metadata"]["uid"]
    approval_id = _pending(kube, operator, "flaky")["id"]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(FAIL_ONCE.encode())
    code, text = annotate(
        manager, ns, "flaky", f"agentrun.dev/approve={approval_id}", "agentrun.dev/comment=ok"
    )
    assert code == 0, text
    status = wait_phase(kube, ns, "flaky", "Succeeded", 120, operator)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        calls = conn.execute("SELECT last_value FROM test_decide_fault").fetchone()[0]  # type: ignore[index]
        (row,) = store.list_approvals(conn, uid)
    assert calls >= 2, "the fault never fired"
    assert "injected fault" in operator.logs()
    assert (row.status, row.decided_by, row.comment) == ("approved", "manager", "ok")
    assert [a["by"] for a in status["approvals"]] == ["manager"]
    assert [e.reason for e in events(kube, ns, "flaky")].count("Approved") == 1
    assert len(lines(out)) == 1  # the effect, once


# --- 11.1: the deadline and a decision, decided by one comparison in Postgres ------------------------------


def test_approve_and_expire_race_in_postgres(pg_dsn: str) -> None:
    """Store level, many reps: an approval and an expiry sent together right at the deadline — exactly one
    wins each time, judged by Postgres's clock against the deadline Postgres stored."""
    reps = max(20, int(os.environ.get("AGENTRUN_CHAOS_REPS", "40")))
    wins: dict[str, int] = {"approved": 0, "expired": 0}
    pool = concurrent.futures.ThreadPoolExecutor(2)
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        for i in range(reps):
            run_id = f"race-{i}"
            pg.admit(admin, run_id=run_id, approval_policy={"timeoutSeconds": 0.3, "onTimeout": "cancel"})
            store.claim_run(admin, run_id=run_id, epoch=1, holder="p")
            approval = store.record_approval(
                admin, run_id=run_id, epoch=1, approval_id=f"a-{i}", interrupt_id="i", prompt={}
            )
            assert approval.deadline is not None
            # Aim both at the deadline (Postgres's clock), with a spread so both orders happen.
            lag = (approval.deadline - admin.execute("SELECT now()").fetchone()[0]).total_seconds()  # type: ignore[index]
            time.sleep(max(0.0, lag + (i % 5 - 3) * 0.015))

            def decide(decision: str, run_id: str = run_id, i: int = i) -> bool:
                with psycopg.connect(pg_dsn, autocommit=True) as conn:
                    return store.decide_approval(
                        conn,
                        approval_id=f"a-{i}",
                        run_id=run_id,
                        decision=decision,
                        decided_by="manager" if decision == "approved" else "agentrun-operator",
                        deadline_action="cancel" if decision == "expired" else None,
                    )

            approve = pool.submit(decide, "approved")
            expire = pool.submit(decide, "expired")
            won = [d for d, f in (("approved", approve), ("expired", expire)) if f.result()]
            if not won:  # the expiry came a hair early by Postgres's clock and the approval a hair late
                deadline = time.monotonic() + 5
                while not won and time.monotonic() < deadline:
                    time.sleep(0.05)
                    won = ["expired"] if decide("expired") else []
            assert len(won) == 1, (i, won)
            wins[won[0]] += 1
            row = store.get_approval(admin, run_id=run_id, approval_id=f"a-{i}")
            assert row is not None and row.status == won[0]
            if won[0] == "approved":  # never after the deadline Postgres stored
                assert row.decided_at is not None and row.deadline is not None
                assert row.decided_at < row.deadline
    pool.shutdown()
    print(f"\napprove vs expire at the deadline, {reps} reps: {wins}")


def test_approval_racing_the_deadline_end_to_end(
    kube: kubernetes.client.ApiClient, operator: OperatorHandle, manager: Path, tmp_path: Path, pg_dsn: str
) -> None:
    """Runs with onTimeout: cancel, approved right at their deadline: each ends Succeeded with its effect
    once, or Cancelled with none — never an effect after a cancel, never both decisions."""
    reps = max(1, int(os.environ.get("AGENTRUN_CHAOS_REPS", "20")))
    ns = operator.namespace
    names = [f"race-{i}" for i in range(reps)]
    uids = {}
    for name in names:
        body = spec(tmp_path / f"{name}.txt", timeoutSeconds=45, onTimeout="cancel")
        uids[name] = create_run(kube, ns, name, body)["metadata"]["uid"]
    pending: dict[str, dict[str, Any]] = {}

    def all_asked() -> bool:
        for name in names:
            if name not in pending:
                found = run_status(kube, ns, name).get("pendingApproval")
                if found and found.get("deadline"):
                    pending[name] = dict(found)
        return len(pending) == len(names)

    wait_for(all_asked, 240, "every run waiting for its approval", interval=0.5, on_timeout=operator.logs)
    # Annotate each run as close to its deadline as we can (by the API server's clock), spread around it.
    order = sorted(names, key=lambda n: pending[n]["deadline"])
    codes: dict[str, int] = {}
    for i, name in enumerate(order):
        deadline = datetime.datetime.fromisoformat(pending[name]["deadline"].replace("Z", "+00:00"))
        offset = (i % 5 - 2) * 0.15
        wait = (deadline - datetime.datetime.now(datetime.UTC)).total_seconds() + offset
        if wait > 0:
            time.sleep(wait)
        codes[name], _ = annotate(manager, ns, name, f"agentrun.dev/approve={pending[name]['id']}")
    outcome: dict[str, str] = {}
    for name in names:
        status = wait_phase(kube, ns, name, ("Succeeded", "Cancelled"), 180, operator)
        outcome[name] = status["phase"]
    time.sleep(2)  # a wrong effect after a cancel would need a worker to start: give it the chance
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for name in names:
            (row,) = store.list_approvals(conn, uids[name])
            effects = lines(tmp_path / f"{name}.txt")
            if outcome[name] == "Succeeded":
                assert row.status == "approved" and row.decided_by == "manager" and len(effects) == 1, name
                assert row.decided_at is not None and row.deadline is not None
                assert row.decided_at < row.deadline
            else:
                assert row.status == "expired" and effects == [], (name, row, effects)
    counts = {p: list(outcome.values()).count(p) for p in ("Succeeded", "Cancelled")}
    refused = sum(1 for c in codes.values() if c != 0)
    print(f"\napproval at the deadline, {reps} runs: {counts}; annotations refused by admission: {refused}")


# --- issue 10.7: no admission policies, no decisions ---------------------------------------------


# Deleted, or present under its name but weakened (failurePolicy Ignore: a CEL error lets anything through):
# either way the decision annotations are not guarded as shipped (agent_operator.decide.admission).
WEAKENINGS = {
    "binding-deleted": ("delete", "validatingadmissionpolicybinding", "agentrun-approvals"),
    "failure-policy-ignore": (
        "patch", "validatingadmissionpolicy", "agentrun-approvals", "--type=merge",
        "-p", '{"spec": {"failurePolicy": "Ignore"}}',
    ),
}


# serial: it deletes or weakens the cluster-wide approval policy, which every test beside it would feel
# (scripts/test runs it alone, after the rest).
@pytest.mark.serial
@pytest.mark.parametrize("weakening", sorted(WEAKENINGS))
def test_operator_refuses_decisions_without_the_admission_policies(
    scene: Scene, manager: Path, weakening: str
) -> None:
    kube, operator, ns = scene.kube, scene.operator, scene.ns
    out = scene.tmp_path / "effects.txt"
    uid = create_run(kube, ns, "bare", spec(out))["metadata"]["uid"]
    approval_id = _pending(kube, operator, "bare")["id"]
    policy = REPO / "deploy" / "admission" / "validating-policy.yaml"
    gone = kubectl(scene.admin, *WEAKENINGS[weakening])
    assert gone.returncode == 0, gone.stderr
    try:
        # Unguarded now: anyone who can patch could have written this, so the operator must not apply it.
        code, text = annotate(manager, ns, "bare", f"agentrun.dev/approve={approval_id}")
        assert code == 0, text
        warned = wait_for(
            lambda: [e for e in events(kube, ns, "bare") if e.reason == "ApprovalPolicyMissing"],
            60,
            "the ApprovalPolicyMissing Warning",
            on_timeout=operator.logs,
        )
        assert "not installed" in warned[0].message and warned[0].type == "Warning"
        status = wait_condition(kube, ns, "bare", "ApprovalPolicyMissing", 30, on_timeout=operator.logs)
        assert status["phase"] == "WaitingApproval" and lines(out) == []
        with psycopg.connect(scene.pg_dsn, autocommit=True) as conn:
            (row,) = store.list_approvals(conn, uid)
        assert row.status == "pending"
    finally:
        restored = subprocess.run(
            [
                "kubectl",
                "--kubeconfig",
                str(scene.admin),
                "apply",
                "--server-side",
                "--force-conflicts",
                "--field-manager=agentrun-dev",
                "-f",
                str(policy),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert restored.returncode == 0, restored.stderr
    # Policies back: the operator notices (condition False), and a fresh decision applies.
    wait_for(
        lambda: condition(run_status(kube, ns, "bare"), "ApprovalPolicyMissing").get("status") == "False",
        90,
        "condition ApprovalPolicyMissing back to False",
        on_timeout=operator.logs,
    )
    code, text = annotate(manager, ns, "bare", f"agentrun.dev/approve={approval_id}")
    assert code == 0, text
    wait_phase(kube, ns, "bare", "Succeeded", 120, operator)
    assert len(lines(out)) == 1
