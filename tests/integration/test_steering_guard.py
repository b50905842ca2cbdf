"""Issue 35.3 end to end: a fork does not walk past an approval gate. The support-ticket agent on the dev
cluster with the operator, real worker Pods, real identities and the shipped admission policies; emails are
counted at a real SMTP sink (started here, on loopback).

The attack of the issue: the manager REJECTS a reply; an editor (create + get, no approve) forks the run at
``review`` with ``--set-json decision={"approved": true} --set draft.body=…``. On main the fork sent the
edited text nobody approved. Now: the API server refuses the edited fork (it needs the RBAC verb approve on
the source), the operator refuses a plain fork from after the decided approval, a fork from before the
approval asks for it again, and someone who may approve can still fork past the gate (their decision)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import kubernetes
import pytest

from agentrun_dev import smtp_sink
from tests.support.approvals import Scene, bodies, scene_fixture, ticket_spec, wait_condition
from tests.support.kube import (
    Team,
    bind,
    condition,
    create_run,
    events,
    get_run,
    kubectl,
    run_gone,
    run_status,
)
from tests.support.operator_proc import REPO, OperatorHandle
from tests.support.waiting import wait_for, wait_phase

FLAKY = "tests.integration.steer_graphs:flaky"
UNAPPROVED = "Dear Ada, here is a reply the manager never saw."
scene = scene_fixture()


@pytest.fixture
def people(team: Team) -> dict[str, Path]:
    """dev: editor (create, get; no approve); manager: approver; lead: editor and approver."""
    return team(
        {
            "dev": ("devs", "agentrun-editor"),
            "manager": ("managers", "agentrun-approver"),
            "lead": ("leads", "agentrun-editor", "agentrun-approver"),
        }
    )


def test_a_fork_does_not_walk_past_a_rejected_approval(scene: Scene, sink: smtp_sink.SmtpSink) -> None:
    kube, operator, people, ns = scene.kube, scene.operator, scene.people, scene.ns
    create_run(kube, ns, "t1", ticket_spec(sink))
    asked = wait_for(lambda: run_status(kube, ns, "t1").get("pendingApproval"), 240, "t1 to ask", interval=1)
    rejected = kubectl(people["manager"], "agentrun", "reject", "t1", "-n", ns, "--id", asked["id"], "--yes")
    assert rejected.returncode == 0, rejected.stderr
    wait_phase(kube, ns, "t1", "Succeeded", 240, operator)  # closed: rejected
    assert bodies(sink) == []

    def fork(who: str, *args: str) -> tuple[int, str]:
        proc = kubectl(people[who], "agentrun", "fork", "t1", "-n", ns, *args)
        return proc.returncode, proc.stdout + proc.stderr

    # 1. The attack: an editor's fork with edits past the gate. Refused by the API server.
    code, text = fork(
        "dev", "--step", "review", "--name", "f1",
        "--set-json", 'decision={"approved": true}', "--set", f"draft.body={UNAPPROVED}",
    )  # fmt: skip
    assert code == 1 and "may not fork AgentRun" in text and 'needs the RBAC verb "approve"' in text, text
    assert run_gone(kube, ns, "f1")
    # 2. Without edits, from the checkpoint after the rejection: the operator refuses it (the state holds
    #    the decision), and the CLI deletes the fork.
    code, text = fork("dev", "--step", "review", "--name", "f2")
    assert code == 1 and "was written after its approval" in text and "(rejected) was decided" in text, text
    assert "--approve" in text and "was deleted: nothing ran" in text
    # The delete is accepted at once; the object goes when the operator has released its finalizer.
    wait_for(lambda: run_gone(kube, ns, "f2"), 120, "the refused fork f2 to be gone", interval=1)
    # 3. --approve by someone without the approve verb: refused by the API server.
    code, text = fork("dev", "--step", "review", "--name", "f3", "--approve")
    assert code == 1 and 'needs the RBAC verb "approve"' in text, text
    # 4. From before the approval: admitted, and the fork asks for the approval again (its own).
    code, text = fork("dev", "--step", "draft", "--name", "f4")
    assert code == 0, (text, operator.logs()[-4000:])
    again = wait_for(
        lambda: run_status(kube, ns, "f4").get("pendingApproval"),
        240,
        "f4 to ask again",
        on_timeout=lambda: f"{run_status(kube, ns, 'f4')}\n{operator.logs()[-5000:]}",
    )
    assert again["id"] != asked["id"]
    # 5. Someone who may approve decides to send the edited reply: their fork passes, and sends it once.
    code, text = fork(
        "lead", "--step", "review", "--name", "f5",
        "--set-json", 'decision={"approved": true}', "--set", f"draft.body={UNAPPROVED}",
    )  # fmt: skip
    assert code == 0, (text, operator.logs()[-4000:])
    assert get_run(kube, ns, "f5")["spec"]["forkOf"]["approve"] is True
    wait_phase(kube, ns, "f5", "Succeeded", 240, operator)
    mails = bodies(sink)
    assert len(mails) == 1 and mails[0].strip() == UNAPPROVED, mails  # only the approver's fork sent


# --- issue 35.4: no steering while a steering policy is not as shipped ------------------------------------


# serial: it narrows the cluster-wide steering policy, which every test beside it would feel
# (scripts/test runs it alone, after the rest).
@pytest.mark.serial
def test_operator_refuses_a_retry_while_the_steering_policy_is_narrowed_to_create(
    kube: kubernetes.client.ApiClient,
    operator: OperatorHandle,
    identity: Callable[..., Path],
    admin_kubeconfig: Path,
    namespace: str,
    tmp_path: Path,
) -> None:
    """The steering policy narrowed to CREATE (its matchConstraints): an editor's patch raises
    retryGeneration without the retry verb, and the API server stamps retried-by. On main the operator
    applied it; now it refuses it and says which policy."""
    ns, out, flag = operator.namespace, tmp_path / "effects.txt", tmp_path / "fixed"
    bind(kube, namespace, "mallory", "agentrun-editor")
    bind(kube, namespace, "oncall", "agentrun-retrier")
    mallory, oncall = identity("mallory", ["devs"]), identity("oncall", ["sre"])
    body = {"path": str(out), "flag": str(flag), "fail_with": "bug"}
    create_run(kube, ns, "fix", {"graph": FLAKY, "input": body, "lease": {"durationSeconds": 8}})
    wait_phase(kube, ns, "fix", "Failed", 120, operator)
    flag.touch()  # a retry would now succeed: only the operator's refusal keeps the run Failed
    rule = "/spec/matchConstraints/resourceRules/0/operations"
    narrow = json.dumps([{"op": "replace", "path": rule, "value": ["CREATE"]}])
    done = kubectl(
        admin_kubeconfig,
        "patch",
        "validatingadmissionpolicy",
        "agentrun-steering",
        "--type=json",
        "-p",
        narrow,
    )
    assert done.returncode == 0, done.stderr
    try:
        patch = '{"spec": {"retryGeneration": 1}}'
        # The API server's policy informer takes a moment to see the narrowed policy: until then it refuses.
        wait_for(
            lambda: (
                kubectl(mallory, "patch", "ar", "fix", "-n", ns, "--type=merge", "-p", patch).returncode == 0
            ),
            60,
            "the narrowed policy to let mallory's retry through (unguarded)",
            interval=1,
        )
        assert get_run(kube, ns, "fix")["metadata"]["annotations"]["agentrun.dev/retried-by"] == "mallory"
        warned = wait_for(
            lambda: [e for e in events(kube, ns, "fix") if e.reason == "SteeringPolicyMissing"],
            90,
            "the SteeringPolicyMissing Warning",
            on_timeout=lambda: f"{run_status(kube, ns, 'fix')}\n{operator.logs()[-5000:]}",
        )
        assert "retry generation 1 ignored" in warned[0].message, warned[0].message
        assert "validatingadmissionpolicies/agentrun-steering (its spec" in warned[0].message
        status = wait_condition(kube, ns, "fix", "ApprovalPolicyMissing", 60)
        assert "agentrun-steering" in condition(status, "ApprovalPolicyMissing")["message"]
        assert status["phase"] == "Failed" and not status.get("reopened"), status
    finally:
        restored = kubectl(
            admin_kubeconfig, "apply", "--server-side", "--force-conflicts", "--field-manager=agentrun-dev",
            "-f", str(REPO / "deploy" / "admission" / "steer-validating-policy.yaml"),
        )  # fmt: skip
        assert restored.returncode == 0, restored.stderr
    wait_for(
        lambda: condition(run_status(kube, ns, "fix"), "ApprovalPolicyMissing").get("status") != "True",
        90,
        "condition ApprovalPolicyMissing no longer True",
        on_timeout=lambda: f"{run_status(kube, ns, 'fix')}\n{operator.logs()[-6000:]}",
    )
    assert run_status(kube, ns, "fix")["phase"] == "Failed"  # the refused retry stays refused
    retried = kubectl(oncall, "agentrun", "retry", "fix", "-n", ns)
    assert retried.returncode == 0, retried.stderr
    wait_phase(kube, ns, "fix", "Succeeded", 180, operator)
    assert len(out.read_text().splitlines()) == 1  # the effect before the failure was not repeated
