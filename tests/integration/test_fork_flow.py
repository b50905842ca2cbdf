"""Forks on the dev cluster, as users would: ``kubectl agentrun fork`` with real identities, the real
admission policies, the operator and real worker Pods of the support-ticket agent. Emails are counted at a
real SMTP sink (started here, on loopback), never inferred from our own tables."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes
import psycopg
import pytest

from agentrun_core import store
from agentrun_dev import smtp_sink
from tests.support.approvals import Scene, bodies, pending, scene_fixture, ticket_spec
from tests.support.kube import bind, condition, create_run, get_run, kubectl, run_status
from tests.support.specs import TICKET_GRAPH
from tests.support.waiting import wait_phase

GRAPH = TICKET_GRAPH
scene = scene_fixture()
EDITED = "Dear Ada, we refunded the duplicate charge today. (edited in the fork)"


@pytest.fixture
def people(
    kube: kubernetes.client.ApiClient, namespace: str, identity: Callable[..., Path]
) -> dict[str, Path]:
    """dev edits AgentRuns (create, get) and may approve (a fork with edits approves them: issue 35.3);
    manager approves; blind may create AgentRuns but read none."""
    bind(kube, namespace, "dev", "agentrun-editor")
    bind(kube, namespace, "dev", "agentrun-approver")
    bind(kube, namespace, "manager", "agentrun-approver")
    role: dict[str, Any] = {
        "metadata": {"name": "create-only"},
        "rules": [{"apiGroups": ["agentrun.dev"], "resources": ["agentruns"], "verbs": ["create"]}],
    }
    kubernetes.client.RbacAuthorizationV1Api(kube).create_namespaced_role(namespace, role)
    bind(kube, namespace, "blind", "create-only", kind="Role")
    return {
        "dev": identity("dev", ["devs"]),
        "manager": identity("manager", ["managers"]),
        "blind": identity("blind", ["devs"]),
    }


def approve(kube: kubernetes.client.ApiClient, who: Path, ns: str, name: str) -> None:
    asked = pending(kube, ns, name, 180)
    done = kubectl(who, "agentrun", "approve", name, "-n", ns, "--id", asked["id"], "--yes")
    assert done.returncode == 0, done.stderr


def test_fork_after_draft_with_an_edit_sends_its_own_email_and_both_traces_link(
    scene: Scene, sink: smtp_sink.SmtpSink
) -> None:
    kube, operator, people, ns = scene.kube, scene.operator, scene.people, scene.ns
    source = create_run(kube, ns, "t1", ticket_spec(sink))
    wait_phase(kube, ns, "t1", "WaitingApproval", 240, operator)
    approve(kube, people["manager"], ns, "t1")
    wait_phase(kube, ns, "t1", "Succeeded", 240, operator)
    [original] = bodies(sink)
    assert "Refunds and double charges" in original and EDITED not in original

    forked = kubectl(
        people["dev"], "agentrun", "fork", "t1", "--step", "draft", "--name", "t2", "-n", ns,
        "--set", f"draft.body={EDITED}",
    )  # fmt: skip
    assert forked.returncode == 0, (forked.stderr, operator.logs()[-6000:])
    assert "agentrun/t2 forked from t1 (after step draft) with edits draft.body" in forked.stdout
    status = run_status(kube, ns, "t2")
    assert status["forkOf"]["run"] == "t1" and status["forkOf"]["runUid"] == source["metadata"]["uid"]
    assert status["forkOf"]["step"] == "draft" and status["forkOf"]["set"] == ["draft.body"]
    wait_phase(kube, ns, "t2", "WaitingApproval", 240, operator)
    prompt = run_status(kube, ns, "t2")["pendingApproval"]["prompt"]
    assert prompt["body"] == EDITED  # the edited state, as the manager is asked about it
    approve(kube, people["manager"], ns, "t2")
    wait_phase(kube, ns, "t2", "Succeeded", 240, operator)

    mails = bodies(sink)
    assert len(mails) == 2  # one each: the fork's send is its own effect, under its own run id
    assert mails[0] == original and mails[1].strip() == EDITED
    t2_uid = get_run(kube, ns, "t2")["metadata"]["uid"]
    with psycopg.connect(scene.pg_dsn, autocommit=True) as conn:
        keys = {
            e.idempotency_key
            for uid in (source["metadata"]["uid"], t2_uid)
            for e in store.list_effects(conn, uid)
        }
    assert len(keys) == 2

    trace1 = kubectl(people["dev"], "agentrun", "trace", "t1", "-n", ns, dsn=scene.pg_dsn)
    trace2 = kubectl(people["dev"], "agentrun", "trace", "t2", "-n", ns, dsn=scene.pg_dsn)
    assert trace1.returncode == 0 and trace2.returncode == 0, trace1.stderr + trace2.stderr
    assert "forks: t2 (at " in trace1.stdout, trace1.stdout
    assert f"forked from t1 (uid {source['metadata']['uid']}) at checkpoint " in trace2.stdout, trace2.stdout
    assert "(after step draft), edits draft.body" in trace2.stdout


def test_bad_forks_are_refused_clearly_and_leave_nothing(scene: Scene, sink: smtp_sink.SmtpSink) -> None:
    kube, operator, people, ns = scene.kube, scene.operator, scene.people, scene.ns
    create_run(kube, ns, "s", ticket_spec(sink))
    wait_phase(kube, ns, "s", "WaitingApproval", 240, operator)

    def fork(who: str, *args: str) -> subprocess.CompletedProcess[str]:
        return kubectl(people[who], "agentrun", "fork", "s", "-n", ns, *args)

    cases = [
        (
            ("--step", "nosuch", "--name", "f1"),
            "run s has no checkpoint after a step 'nosuch' (steps it completed:",
        ),
        (("--checkpoint", "1f0-nope", "--name", "f2"), "'1f0-nope' is not a checkpoint of run s"),
        (("--step", "draft", "--name", "f3", "--set", "nosuch.x=1"), "cannot set 'nosuch': not in the state"),
    ]
    for args, message in cases:
        refused = fork("dev", *args)
        assert refused.returncode == 1 and message in refused.stderr, (args, refused.stderr)
        assert "was deleted: nothing ran" in refused.stderr
    bad_path = fork("dev", "--step", "draft", "--name", "f4", "--set", "draft..body=x")
    assert bad_path.returncode == 1 and "a state path is identifiers joined by dots" in bad_path.stderr
    bad_json = fork("dev", "--step", "draft", "--name", "f5", "--set-json", "draft={nope")
    assert bad_json.returncode == 1 and "the value is not JSON" in bad_json.stderr
    # Through the API server directly: not the fork verb, the same rules.
    body = {
        "apiVersion": "agentrun.dev/v1alpha1",
        "kind": "AgentRun",
        "metadata": {"name": "f6", "namespace": ns},
        "spec": {"graph": GRAPH, "forkOf": {"run": "s", "step": "draft"}},
    }
    proc = subprocess.run(
        ["kubectl", "create", "-f", "-"], input=json.dumps(body), capture_output=True, text=True, timeout=60,
        env={**os.environ, "KUBECONFIG": str(people["blind"])},
    )  # fmt: skip
    assert proc.returncode != 0 and "may not fork AgentRun" in proc.stderr and '"get"' in proc.stderr, (
        proc.stderr
    )
    both = dict(body, spec={"graph": GRAPH, "forkOf": {"run": "s", "step": "draft", "checkpoint": "x"}})
    proc = subprocess.run(
        ["kubectl", "create", "-f", "-"], input=json.dumps(both), capture_output=True, text=True, timeout=60,
        env={**os.environ, "KUBECONFIG": str(people["dev"])},
    )  # fmt: skip
    assert proc.returncode != 0 and "exactly one of checkpoint" in proc.stderr, proc.stderr
    listed: dict[str, Any] = kubernetes.client.CustomObjectsApi(kube).list_namespaced_custom_object(
        "agentrun.dev", "v1alpha1", ns, "agentruns"
    )
    names = {r["metadata"]["name"] for r in listed["items"]}
    assert names == {"s"}  # every refused fork is gone
    with psycopg.connect(scene.pg_dsn, autocommit=True) as conn:
        assert [r.name for r in store.list_runs(conn)] == ["s"]  # nothing admitted, nothing copied


def test_fork_at_a_checkpoint_id_with_a_json_edit(scene: Scene, sink: smtp_sink.SmtpSink) -> None:
    """``--checkpoint`` (an id read from ``agentrun trace -o json``) and ``--set-json``: a whole new draft."""
    kube, operator, people, ns = scene.kube, scene.operator, scene.people, scene.ns
    create_run(kube, ns, "src", ticket_spec(sink))
    wait_phase(kube, ns, "src", "WaitingApproval", 240, operator)
    traced = kubectl(people["dev"], "agentrun", "trace", "src", "-n", ns, "-o", "json", dsn=scene.pg_dsn)
    assert traced.returncode == 0, traced.stderr
    [checkpoint] = [
        s["checkpointId"] for s in json.loads(traced.stdout)["steps"] if s["step"].startswith("draft")
    ]
    draft = {"to": "ada@example.com", "subject": "Re: T-7", "body": EDITED}
    forked = kubectl(
        people["dev"], "agentrun", "fork", "src", "--checkpoint", checkpoint, "--name", "c1", "-n", ns,
        "--set-json", f"draft={json.dumps(draft)}",
    )  # fmt: skip
    assert forked.returncode == 0, (forked.stderr, operator.logs()[-6000:])
    assert f"agentrun/c1 forked from src ({checkpoint}) with edits draft" in forked.stdout
    wait_phase(kube, ns, "c1", "WaitingApproval", 240, operator)
    prompt = run_status(kube, ns, "c1")["pendingApproval"]["prompt"]
    assert (prompt["subject"], prompt["body"]) == ("Re: T-7", EDITED)
    assert run_status(kube, ns, "c1")["forkOf"]["checkpointId"] == checkpoint
    assert bodies(sink) == []  # neither run has sent anything: nothing was approved
    # An edit that fits the admission check (draft is in the state) but not the state itself (draft.body is
    # text, not a mapping): the fork's worker refuses it before writing anything, and says which path.
    odd = kubectl(
        people["dev"],
        "agentrun",
        "fork",
        "src",
        "--step",
        "draft",
        "--name",
        "c2",
        "-n",
        ns,
        "--set",
        "draft.body.x=1",
    )
    assert odd.returncode == 0, odd.stderr
    status = wait_phase(kube, ns, "c2", "Failed", 240, operator)
    assert condition(status, "Failed")["reason"] == "ForkEditRefused", status
    assert "draft.body.x: draft.body is a str, not a mapping" in status["message"], status["message"]
