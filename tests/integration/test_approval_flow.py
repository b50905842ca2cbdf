"""Approvals end to end: a real worker parks on interrupt(); people decide with real ``kubectl annotate`` as
real identities; the operator applies the decision exactly once and the next attempt resumes with it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import kubernetes
import psycopg
import pytest

from agentrun_core import store
from tests.support.approvals import Scene, scene_fixture
from tests.support.kube import APPROVAL_PEOPLE, Team, condition, create_run, events, kubectl, pods, run_status
from tests.support.operator_proc import OperatorHandle
from tests.support.specs import approval_spec, lines
from tests.support.waiting import wait_for, wait_phase

scene = scene_fixture()


def spec(path: Path, **approval: Any) -> dict[str, Any]:
    return approval_spec(path, **approval)


@pytest.fixture
def people(team: Team) -> dict[str, Path]:
    return team(APPROVAL_PEOPLE)


def annotate(kubeconfig: Path, ns: str, name: str, *pairs: str) -> tuple[int, str]:
    proc = kubectl(kubeconfig, "annotate", "-n", ns, "--overwrite", f"ar/{name}", *pairs)
    return proc.returncode, proc.stdout + proc.stderr


def waiting(kube: kubernetes.client.ApiClient, op: OperatorHandle, name: str) -> str:
    status = wait_phase(kube, op.namespace, name, "WaitingApproval", 90, op)
    assert condition(status, "WaitingApproval")["status"] == "True"
    approval_id = str(status["pendingApproval"]["id"])
    assert approval_id.startswith("a-") and len(approval_id) == 14
    return approval_id


def approved_once(scene: Scene, name: str, approval_id: str, out: Path) -> dict[str, Any]:
    """The manager approves: the run succeeds, its effect performed once."""
    code, text = annotate(scene.people["manager"], scene.ns, name, f"agentrun.dev/approve={approval_id}")
    assert code == 0, text
    status = scene.wait_phase(name, "Succeeded", 90)
    assert len(lines(out)) == 1
    return status


def test_approve_happy_path(scene: Scene) -> None:
    kube, operator, people, ns = scene.kube, scene.operator, scene.people, scene.ns
    out = scene.tmp_path / "effects.txt"
    uid = create_run(kube, ns, "ok", spec(out))["metadata"]["uid"]
    approval_id = waiting(kube, operator, "ok")
    assert lines(out) == []
    code, text = annotate(
        people["manager"], ns, "ok", f"agentrun.dev/approve={approval_id}", "agentrun.dev/comment=looks good"
    )
    assert code == 0, text
    status = wait_phase(kube, ns, "ok", "Succeeded", 90, operator)
    assert len(lines(out)) == 1
    assert status["approvals"] == [
        {
            "id": approval_id,
            "decision": "approved",
            "by": "manager",
            "at": status["approvals"][0]["at"],
            "comment": "looks good",
        }
    ]
    assert status["attempts"] == 2 and status["attemptReason"] == "approval"
    with psycopg.connect(scene.pg_dsn) as conn:
        (row,) = store.list_approvals(conn, uid)
    assert (row.status, row.decided_by, row.comment) == ("approved", "manager", "looks good")
    assert "Approved" in [e.reason for e in events(kube, ns, "ok")]
    ann = (
        kubernetes.client.CustomObjectsApi(kube)
        .get_namespaced_custom_object("agentrun.dev", "v1alpha1", ns, "agentruns", "ok")["metadata"]
        .get("annotations", {})
    )
    assert "agentrun.dev/approve" not in ann  # consumed


def test_a_waiting_runs_pod_goes_after_the_retention_and_the_approval_still_resumes_it(scene: Scene) -> None:
    """A run may wait for days: its parked attempt's Pod (the worker exited) is deleted after
    ``AGENTRUN_FINISHED_POD_RETENTION_SECONDS``, as a finished run's is; the run goes on waiting (no attempt
    judged lost), and the approval resumes it with its effect done once."""
    kube, operator, ns = scene.kube, scene.operator, scene.ns
    operator.restart(hard=False, extra_env={"AGENTRUN_FINISHED_POD_RETENTION_SECONDS": "3"})
    operator.wait_leader(kube, timeout=30)
    out = scene.tmp_path / "effects.txt"
    create_run(kube, ns, "days", spec(out))
    approval_id = waiting(kube, operator, "days")
    wait_for(
        lambda: not pods(kube, ns, "days"),
        90,
        "the parked attempt's Pod deleted after the retention",
        on_timeout=operator.logs,
    )
    status = run_status(kube, ns, "days")
    assert (status["phase"], status["attempts"], status["pendingApproval"]["id"]) == (
        "WaitingApproval",
        1,
        approval_id,
    )
    assert "AttemptLost" not in [e.reason for e in events(kube, ns, "days")]
    status = approved_once(scene, "days", approval_id, out)
    assert status["attempts"] == 2 and status["attemptReason"] == "approval"


def test_double_annotate_one_resume_one_effect(scene: Scene) -> None:
    kube, operator, people, ns = scene.kube, scene.operator, scene.people, scene.ns
    out = scene.tmp_path / "effects.txt"
    create_run(kube, ns, "twice", spec(out))
    approval_id = waiting(kube, operator, "twice")
    code, text = annotate(people["manager"], ns, "twice", f"agentrun.dev/approve={approval_id}")
    assert code == 0, text
    # Once applied the run no longer waits on this id: the API server may refuse the later clicks.
    annotate(people["manager"], ns, "twice", f"agentrun.dev/approve={approval_id}")
    time.sleep(1.5)
    annotate(people["manager"], ns, "twice", f"agentrun.dev/approve={approval_id}")
    status = wait_phase(kube, ns, "twice", "Succeeded", 90, operator)
    time.sleep(1.5)
    assert len(lines(out)) == 1
    assert run_status(kube, ns, "twice")["attempts"] == 2
    assert len(status["approvals"]) == 1
    reasons = [e.reason for e in events(kube, ns, "twice")]
    assert reasons.count("Approved") == 1, reasons


def test_stale_and_unknown_ids_are_refused(scene: Scene) -> None:
    kube, operator, people, ns = scene.kube, scene.operator, scene.people, scene.ns
    out = scene.tmp_path / "effects.txt"
    create_run(kube, ns, "stale", spec(out))
    approval_id = waiting(kube, operator, "stale")
    code, text = annotate(people["manager"], ns, "stale", "agentrun.dev/approve=a-000000000000")
    assert code != 0 and "is not the pending approval" in text  # the API server refuses it
    time.sleep(1)
    assert run_status(kube, ns, "stale")["phase"] == "WaitingApproval"
    assert lines(out) == []
    approved_once(scene, "stale", approval_id, out)


def test_reject_path(scene: Scene) -> None:
    kube, operator, people, ns = scene.kube, scene.operator, scene.people, scene.ns
    out = scene.tmp_path / "effects.txt"
    create_run(kube, ns, "nope", spec(out))
    approval_id = waiting(kube, operator, "nope")
    code, text = annotate(
        people["manager"], ns, "nope", f"agentrun.dev/reject={approval_id}", "agentrun.dev/comment=wrong tone"
    )
    assert code == 0, text
    status = wait_phase(kube, ns, "nope", "Succeeded", 90, operator)
    assert lines(out) == []
    assert status["approvals"][0]["decision"] == "rejected" and status["approvals"][0]["by"] == "manager"
    assert (
        status["result"]["outcome"] == "rejected"
        if isinstance(status.get("result"), dict) and "outcome" in status["result"]
        else True
    )


def test_unauthorized_and_self_approval_refused_on_a_waiting_run(scene: Scene) -> None:
    kube, operator, people, ns = scene.kube, scene.operator, scene.people, scene.ns
    out = scene.tmp_path / "effects.txt"
    import json
    import subprocess

    manifest = json.dumps(
        {
            "apiVersion": "agentrun.dev/v1alpha1",
            "kind": "AgentRun",
            "metadata": {"name": "alices"},
            "spec": spec(out),
        }
    )
    created = subprocess.run(
        ["kubectl", "--kubeconfig", str(people["alice"]), "create", "-n", ns, "-f", "-"],
        input=manifest,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert created.returncode == 0, created.stderr
    approval_id = waiting(kube, operator, "alices")
    code, text = annotate(people["mallory"], ns, "alices", f"agentrun.dev/approve={approval_id}")
    assert code != 0 and "may not approve or reject" in text
    code, text = annotate(people["alice"], ns, "alices", f"agentrun.dev/approve={approval_id}")
    assert code != 0 and "self-approval refused" in text
    time.sleep(1)
    assert run_status(kube, ns, "alices")["phase"] == "WaitingApproval" and lines(out) == []
    code, text = annotate(people["manager"], ns, "alices", f"agentrun.dev/approve={approval_id}")
    assert code == 0, text
    assert wait_phase(kube, ns, "alices", "Succeeded", 90, operator)["approvals"][0]["by"] == "manager"


def pending_id(kube: kubernetes.client.ApiClient, op: OperatorHandle, name: str) -> str:
    """The approval id once recorded (the phase may still be Running while the worker parks, and a short
    deadline may pass before the Pod is gone)."""

    def found() -> str | None:
        status = run_status(kube, op.namespace, name)
        if status.get("pendingApproval"):
            return str(status["pendingApproval"]["id"])
        decided = status.get("approvals") or []
        return str(decided[0]["id"]) if decided else None

    result: str = wait_for(found, 90, f"{name}'s approval id", on_timeout=op.logs)
    return result


def test_deadline_escalate_then_late_approval(scene: Scene) -> None:
    kube, operator, ns = scene.kube, scene.operator, scene.ns
    out = scene.tmp_path / "effects.txt"
    create_run(kube, ns, "slow", spec(out, timeoutSeconds=2, onTimeout="escalate"))
    approval_id = pending_id(kube, operator, "slow")
    status = wait_for(
        lambda: (s := run_status(kube, ns, "slow")) and condition(s, "ApprovalEscalated") and s,
        20,
        "ApprovalEscalated",
        on_timeout=operator.logs,
    )
    assert status["phase"] == "WaitingApproval" and status["pendingApproval"]["escalated"] is True
    assert "ApprovalEscalated" in [e.reason for e in events(kube, ns, "slow")]
    approved_once(scene, "slow", approval_id, out)


def test_deadline_cancel(scene: Scene) -> None:
    kube, operator, people, ns = scene.kube, scene.operator, scene.people, scene.ns
    out = scene.tmp_path / "effects.txt"
    uid = create_run(kube, ns, "late", spec(out, timeoutSeconds=2, onTimeout="cancel"))["metadata"]["uid"]
    approval_id = pending_id(kube, operator, "late")
    status = wait_phase(kube, ns, "late", "Cancelled", 30, operator)
    assert status["approvals"][0]["decision"] == "expired"
    # approving after expiry changes nothing: exactly one of approve / expire wins (the API server refuses
    # it already: the run no longer waits)
    code, text = annotate(people["manager"], ns, "late", f"agentrun.dev/approve={approval_id}")
    assert code != 0 and "is not waiting for an approval" in text, text
    time.sleep(2)
    assert run_status(kube, ns, "late")["phase"] == "Cancelled" and lines(out) == []
    with psycopg.connect(scene.pg_dsn) as conn:
        (row,) = store.list_approvals(conn, uid)
        assert row.status == "expired" and row.deadline_action == "cancel"
        assert store.get_run(conn, uid).status == "cancelled"  # type: ignore[union-attr]


def test_deadline_read_only(scene: Scene) -> None:
    kube, operator, ns = scene.kube, scene.operator, scene.ns
    out = scene.tmp_path / "effects.txt"
    uid = create_run(kube, ns, "ro", spec(out, timeoutSeconds=2, onTimeout="readOnly"))["metadata"]["uid"]
    pending_id(kube, operator, "ro")
    status = wait_phase(kube, ns, "ro", ("Succeeded", "Failed"), 60, operator)
    assert status["phase"] == "Succeeded", status
    assert status["readOnly"] is True and condition(status, "ReadOnly")["status"] == "True"
    assert status["attemptReason"] == "deadline"
    assert lines(out) == []
    with psycopg.connect(scene.pg_dsn) as conn:
        (row,) = store.list_approvals(conn, uid)
        assert row.status == "expired" and row.deadline_action in ("read_only", "readOnly")
        assert store.get_run(conn, uid).read_only is True  # type: ignore[union-attr]
