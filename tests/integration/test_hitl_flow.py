"""LangChain 1.x ``HumanInTheLoopMiddleware`` on the dev cluster: the outbox example
(``agentrun_examples.outbox``: ``create_agent``, a deterministic model, ``send_email`` through the effect
ledger) asks for three emails in one turn; the middleware interrupts once for the batch; a second identity
decides each action (approve one, edit the second, reject the third) with ``kubectl agentrun approve``; the
run finishes and the real SMTP sink received exactly the approved emails, the edited one with the edit.
Real identities, admission policies, operator and worker Pods."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agentrun_core import store
from agentrun_dev import smtp_sink
from agentrun_examples.outbox import model
from tests.support.approvals import Scene, bodies, create_as, pending, scene_fixture
from tests.support.kube import APPROVAL_PEOPLE, Team, events, get_run, kubectl, run_status
from tests.support.specs import run_spec, smtp_env
from tests.support.waiting import wait_for, wait_phase

GRAPH = "agentrun_examples.outbox:graph"
ASK = "Send the outage notice to ada@example.com, bob@example.com, eve@example.com"
EDITED = "Dear Bob, the outage lasted 40 minutes; your credit is on its way. (edited by the manager)"
scene = scene_fixture()


def outbox_spec(sink: smtp_sink.SmtpSink) -> dict[str, Any]:
    return run_spec(GRAPH, {"messages": [{"role": "user", "content": ASK}]}, env=smtp_env("SUPPORT", sink))


@pytest.fixture
def people(team: Team) -> dict[str, Path]:
    """alice creates the run (and may approve, so only the self-approval rule stops her); manager approves;
    mallory may edit AgentRuns but not approve."""
    return team(APPROVAL_PEOPLE)


def parked(scene: Scene, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """alice's run ``name`` created and parked: the approval it asks for."""
    create_as(scene.people["alice"], scene.ns, name, spec)
    return pending(scene.kube, scene.ns, name)


def recipients(sink: smtp_sink.SmtpSink) -> list[str]:
    return sorted(str(m["to"]) for m in sink.store.find(None))


def test_a_plain_approve_answers_the_middleware_batch_and_sends_each_call_once(
    scene: Scene, sink: smtp_sink.SmtpSink
) -> None:
    kube, operator, people, ns = scene.kube, scene.operator, scene.people, scene.ns
    asked = parked(scene, "all", outbox_spec(sink))
    ok = kubectl(people["manager"], "agentrun", "approve", "all", "-n", ns, "--id", asked["id"], "--yes")
    assert ok.returncode == 0, ok.stderr
    # main: the worker resumed with {"type": "accept"} and the run failed: KeyError: 'decisions'
    status = wait_phase(kube, ns, "all", "Succeeded", 240, operator)
    assert recipients(sink) == ["ada@example.com", "bob@example.com", "eve@example.com"], status


def test_each_action_of_the_batch_is_decided_on_its_own_by_a_second_identity_and_bad_decisions_never_apply(
    scene: Scene, sink: smtp_sink.SmtpSink
) -> None:
    kube, operator, people, ns = scene.kube, scene.operator, scene.people, scene.ns
    asked = parked(scene, "mix", outbox_spec(sink))
    aid = asked["id"]
    everything = ["approve", "edit", "reject", "respond"]
    assert [(a["tool"], a["args"]["to"], a["allowedDecisions"]) for a in asked["actions"]] == [
        ("send_email", "ada@example.com", everything),
        ("send_email", "bob@example.com", everything),
        ("send_email", "eve@example.com", everything),
    ]
    mixed = json.dumps([{"type": "approve"}, {"type": "reject"}, {"type": "reject"}])

    def annotate(who: str, *pairs: str) -> subprocess.CompletedProcess[str]:
        return kubectl(people[who], "annotate", "-n", ns, "--overwrite", "ar/mix", *pairs)

    # Who: decisions ride on a decision, so every rule of deciding holds (API server).
    refused = annotate("mallory", f"agentrun.dev/approve={aid}", f"agentrun.dev/decisions={mixed}")
    assert refused.returncode != 0 and 'needs the RBAC verb "approve"' in refused.stderr, refused.stderr
    refused = annotate("alice", f"agentrun.dev/approve={aid}", f"agentrun.dev/decisions={mixed}")
    assert refused.returncode != 0 and "self-approval refused" in refused.stderr, refused.stderr
    alone = annotate("manager", f"agentrun.dev/decisions={mixed}")
    assert alone.returncode != 0 and "in the same request as agentrun.dev/approve" in alone.stderr, (
        alone.stderr
    )
    # The CLI refuses what does not fit the batch before anything is sent.
    for flags, why in (
        (["--reject", "5"], "there is no action '5': the batch has 3 actions (0-2)"),
        (["--decisions", "[{"], "the decisions are not JSON"),
        (["--decisions", '[{"type": "approve"}]'], "the batch has 3 actions, 1 decisions were given"),
        (["--set", "body=x"], "say which action it edits"),
    ):
        cli = kubectl(people["manager"], "agentrun", "approve", "mix", "-n", ns, "--id", aid, *flags)
        assert cli.returncode == 1 and why in cli.stderr, (flags, cli.stderr)
    # Past the CLI (kubectl annotate as the manager), the operator refuses it: reported, never applied.
    short = json.dumps([{"type": "approve"}])
    landed = annotate("manager", f"agentrun.dev/approve={aid}", f"agentrun.dev/decisions={short}")
    assert landed.returncode == 0, landed.stderr
    wait_for(
        lambda: [e for e in events(kube, ns, "mix") if e.reason == "DecisionPayloadRefused"],
        120,
        "the operator to refuse the decisions",
    )
    [event] = [e for e in events(kube, ns, "mix") if e.reason == "DecisionPayloadRefused"]
    assert "the batch has 3 actions, 1 decisions were given" in event.message, event.message
    wait_for(
        lambda: (
            "agentrun.dev/decisions" not in (get_run(kube, ns, "mix")["metadata"].get("annotations") or {})
        ),
        60,
        "the refused decision's annotations to be removed",
    )
    assert run_status(kube, ns, "mix")["pendingApproval"]["id"] == aid and recipients(sink) == []

    ok = kubectl(
        people["manager"], "agentrun", "approve", "mix", "-n", ns, "--id", aid,
        "--set", f"1.body={EDITED}", "--reject", "2=Eve is not a customer.", "--comment", "two of three",
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert f"approved: approval {aid} per action: 0 approve, 1 edit, 2 reject" in ok.stdout, ok.stdout
    status = wait_phase(kube, ns, "mix", "Succeeded", 240, operator)
    # Exactly the approved effects, counted at the SMTP sink, the edited one with the manager's text.
    assert recipients(sink) == ["ada@example.com", "bob@example.com"]
    assert sorted(b.strip() for b in bodies(sink)) == sorted([model.body_for("ada@example.com"), EDITED])
    [entry] = status["approvals"]
    assert (entry["decision"], entry["by"], entry["comment"]) == ("approved", "manager", "two of three")
    assert entry["actions"] == [
        {"tool": "send_email", "decision": "approve"},
        {"tool": "send_email", "decision": "edit", "edited": ["body"]},
        {"tool": "send_email", "decision": "reject", "message": "Eve is not a customer."},
    ]
    uid = get_run(kube, ns, "mix")["metadata"]["uid"]
    with psycopg.connect(scene.pg_dsn, autocommit=True) as conn:
        [row] = store.list_approvals(conn, uid)
        run = store.get_run(conn, uid)
    assert row.decided_by == "manager" and [d["type"] for d in row.payload["decisions"]] == [
        "approve",
        "edit",
        "reject",
    ]
    assert run is not None and run.status == "succeeded"


def test_killed_after_sending_an_approved_call_the_resumed_batch_sends_each_approved_call_once(
    scene: Scene, sink: smtp_sink.SmtpSink
) -> None:
    """The decisions are read again from Postgres by every attempt: a worker SIGKILLed right after reading
    them, the next one after the SMTP server took the first approved email (before the ledger recorded it),
    the next at its first step checkpoint: each approved email is delivered once, the rejected one never."""
    kube, operator, people, ns = scene.kube, scene.operator, scene.people, scene.ns
    spec = outbox_spec(sink)
    spec["worker"]["env"] += [
        {"name": "AGENTRUN_FAULT_POINTS_ATTEMPT_2", "value": "after_resume_read"},
        {"name": "AGENTRUN_FAULT_POINTS_ATTEMPT_3", "value": "after_call"},
        {"name": "AGENTRUN_FAULT_POINTS_ATTEMPT_4", "value": "after_checkpoint"},
    ]
    aid = parked(scene, "kill", spec)["id"]
    ok = kubectl(
        people["manager"], "agentrun", "approve", "kill", "-n", ns, "--id", aid,
        "--set", f"1.body={EDITED}", "--reject", "2=Eve is not a customer.",
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    status = wait_phase(kube, ns, "kill", "Succeeded", 300, operator)
    assert status["attempts"] >= 5, status  # parked, killed three times, finished
    assert recipients(sink) == ["ada@example.com", "bob@example.com"]
    assert sorted(b.strip() for b in bodies(sink)) == sorted([model.body_for("ada@example.com"), EDITED])


def test_the_creator_may_reject_the_whole_batch_with_a_reason_and_nothing_is_sent(
    scene: Scene, sink: smtp_sink.SmtpSink
) -> None:
    kube, operator, people, ns = scene.kube, scene.operator, scene.people, scene.ns
    aid = parked(scene, "no", outbox_spec(sink))["id"]
    why = "Hold all notices until the postmortem is out."
    ok = kubectl(people["alice"], "agentrun", "respond", "no", "-n", ns, "--id", aid, "--message", why)
    assert ok.returncode == 0, ok.stderr  # rejecting her own run is allowed: nothing runs
    status = wait_phase(kube, ns, "no", "Succeeded", 240, operator)
    assert recipients(sink) == []
    [entry] = status["approvals"]
    assert entry["decision"] == "rejected" and entry["by"] == "alice"
    assert entry["actions"] == [{"tool": "send_email", "decision": "reject", "message": why}] * 3
    with psycopg.connect(scene.pg_dsn, autocommit=True) as conn:
        run = store.get_run(conn, get_run(kube, ns, "no")["metadata"]["uid"])
    assert run is not None and why in json.dumps(run.result)  # the model was told why
