"""Approve with edits, or respond, on the dev cluster: the support-ticket agent's manager edits the reply
before it is sent (``kubectl agentrun approve NAME --id ID --set body=...``), or answers with text instead of
sending (``kubectl agentrun respond``). Real identities, the real admission policies, the operator and real
worker Pods; emails counted and read at a real SMTP sink. The adversarial cases are refused by the API
server itself (``kubectl annotate`` as each identity), and leave the approval pending."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest

from agentrun_core import store
from agentrun_dev import smtp_sink
from tests.support.approvals import Scene, bodies, create_as, pending, scene_fixture, ticket_spec
from tests.support.kube import APPROVAL_PEOPLE, Team, get_run, kubectl, run_status
from tests.support.waiting import wait_phase

EDITED_BODY = "Dear Ada, we refunded the duplicate charge; it shows within 3 days. (edited by the manager)"
EDITED_SUBJECT = "Your refund for T-7"
scene = scene_fixture()


@pytest.fixture
def people(team: Team) -> dict[str, Path]:
    """manager approves; mallory edits AgentRuns (patch) but may not approve; alice creates runs and may
    approve too (so only the self-approval rule stops her)."""
    return team(APPROVAL_PEOPLE)


def test_manager_edits_the_reply_before_it_is_sent_and_malformed_or_forbidden_edits_are_refused(
    scene: Scene, sink: smtp_sink.SmtpSink
) -> None:
    kube, operator, people, ns = scene.kube, scene.operator, scene.people, scene.ns
    create_as(people["alice"], ns, "t", ticket_spec(sink))
    wait_phase(kube, ns, "t", "WaitingApproval", 240, operator)
    aid = str(pending(kube, ns, "t")["id"])
    prompt = run_status(kube, ns, "t")["pendingApproval"]["prompt"]
    assert prompt["editable"] == ["subject", "body"] and prompt["action"] == "send_email"

    def annotate(who: str, *pairs: str) -> str:
        proc = kubectl(people[who], "annotate", "-n", ns, "--overwrite", "ar/t", *pairs)
        assert proc.returncode != 0, (who, pairs, proc.stdout)
        return proc.stderr

    approve = f"agentrun.dev/approve={aid}"
    # Who: an edit is part of an approval, so every rule of deciding holds for it.
    assert 'needs the RBAC verb "approve"' in annotate("mallory", approve, "edit.agentrun.dev/body=x")
    assert "self-approval refused" in annotate("alice", approve, "edit.agentrun.dev/body=x")
    mine = kubectl(people["alice"], "agentrun", "approve", "t", "-n", ns, "--id", aid, "--set", "body=x")
    assert mine.returncode != 0 and "self-approval refused" in mine.stderr, mine.stderr
    # Shape: only with the approval, only the prompt's editable fields, bounded.
    alone = annotate("manager", "edit.agentrun.dev/body=x")
    assert "go in the same request as agentrun.dev/approve" in alone, alone
    rejected = annotate("manager", f"agentrun.dev/reject={aid}", "edit.agentrun.dev/body=x")
    assert "go in the same request as agentrun.dev/approve" in rejected, rejected
    to = annotate("manager", approve, "edit.agentrun.dev/to=eve@example.com")
    assert "cannot edit to of AgentRun" in to and 'lists under "editable"' in to, to
    assert "at most 16384 characters" in annotate("manager", approve, "edit.agentrun.dev/body=" + "x" * 16385)
    response = annotate("manager", approve, "agentrun.dev/response=looks good")
    assert "goes in the same request as agentrun.dev/reject" in response, response
    # The CLI refuses before sending anything.
    cli = kubectl(people["manager"], "agentrun", "approve", "t", "-n", ns, "--id", aid, "--set", "to=eve@x")
    assert (
        cli.returncode == 1
        and "cannot edit to: the pending approval lets you edit subject, body" in cli.stderr
    )
    bad_file = scene.tmp_path / "bad.yaml"
    bad_file.write_text("- body\n")
    cli = kubectl(
        people["manager"], "agentrun", "approve", "t", "-n", ns, "--id", aid, "--edits", str(bad_file)
    )
    assert cli.returncode == 1 and "expected a mapping of field: text" in cli.stderr, cli.stderr
    # Nothing of all that landed: still pending, no decision or edit annotations, no email.
    annotations = get_run(kube, ns, "t")["metadata"].get("annotations") or {}
    assert not [k for k in annotations if k.startswith("edit.") or k.endswith(("/approve", "/reject"))]
    assert run_status(kube, ns, "t")["pendingApproval"]["id"] == aid and bodies(sink) == []

    edits = scene.tmp_path / "edits.yaml"
    edits.write_text(json.dumps({"subject": EDITED_SUBJECT}))
    ok = kubectl(
        people["manager"], "agentrun", "approve", "t", "-n", ns, "--id", aid,
        "--set", f"body={EDITED_BODY}", "--edits", str(edits), "--comment", "tightened the wording",
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert f"approved: approval {aid} with edits of body, subject" in ok.stdout
    wait_phase(kube, ns, "t", "Succeeded", 240, operator)
    [mail] = bodies(sink)  # one email, with the manager's text
    assert mail.strip() == EDITED_BODY
    [meta] = sink.store.find(None)
    assert meta["subject"] == EDITED_SUBJECT
    [entry] = run_status(kube, ns, "t")["approvals"]
    assert (entry["decision"], entry["by"], entry["type"], entry["edited"]) == (
        "approved", "manager", "edit", ["body", "subject"],
    )  # fmt: skip
    uid = get_run(kube, ns, "t")["metadata"]["uid"]
    with psycopg.connect(scene.pg_dsn, autocommit=True) as conn:
        [row] = store.list_approvals(conn, uid)
    assert row.decided_by == "manager" and row.comment == "tightened the wording"
    assert row.payload["type"] == "edit" and row.payload["args"] == {
        "action": "send_email",
        "args": {"body": EDITED_BODY, "subject": EDITED_SUBJECT},
    }
    annotations = get_run(kube, ns, "t")["metadata"].get("annotations") or {}
    assert not [k for k in annotations if k.startswith("edit.")]  # consumed with the decision
    traced = kubectl(people["manager"], "agentrun", "trace", "t", "-n", ns, "-o", "json", dsn=scene.pg_dsn)
    assert traced.returncode == 0, traced.stderr
    [decided] = json.loads(traced.stdout)["approvals"]
    assert decided["by"] == "manager" and decided["payload"]["args"]["args"]["body"] == EDITED_BODY


def test_respond_answers_without_sending_and_only_deciders_may(
    scene: Scene, sink: smtp_sink.SmtpSink
) -> None:
    kube, operator, people, ns = scene.kube, scene.operator, scene.people, scene.ns
    create_as(people["alice"], ns, "r", ticket_spec(sink))
    aid = str(pending(kube, ns, "r")["id"])
    text = "Please ask the customer for the invoice number first."
    refused = kubectl(people["mallory"], "agentrun", "respond", "r", "-n", ns, "--id", aid, "--message", text)
    assert refused.returncode == 1 and 'needs the RBAC verb "approve"' in refused.stderr, refused.stderr
    empty = kubectl(people["manager"], "agentrun", "respond", "r", "-n", ns, "--id", aid, "--message", "")
    assert empty.returncode == 1 and "--message must be 1 to 4096 characters" in empty.stderr
    stale = kubectl(
        people["manager"], "agentrun", "respond", "r", "-n", ns, "--id", "a-nope", "--message", "x"
    )
    assert stale.returncode == 1 and "is not the pending approval" in stale.stderr
    # The creator may respond (it is not an approval: nothing is sent), like rejecting her own run.
    ok = kubectl(people["alice"], "agentrun", "respond", "r", "-n", ns, "--id", aid, "--message", text)
    assert ok.returncode == 0, ok.stderr
    status = wait_phase(kube, ns, "r", "Succeeded", 240, operator)
    with psycopg.connect(scene.pg_dsn, autocommit=True) as conn:
        run = store.get_run(conn, get_run(kube, ns, "r")["metadata"]["uid"])
    assert run is not None and run.result["outcome"] == "responded", run
    assert run.result["decision"]["args"] == text  # the graph got the text (LangGraph's "response")
    [entry] = status["approvals"]
    assert (entry["decision"], entry["by"], entry["type"], entry["response"]) == (
        "rejected",
        "alice",
        "response",
        text,
    )
    assert bodies(sink) == []  # nothing sent
