"""The pure side of forks and of decisions that carry something: the fork's admission verdict, its edits of
the state, the resume payload's human-in-the-loop shape, and the CLI's requests (fork body, edits)."""

from __future__ import annotations

import dataclasses
import datetime
from pathlib import Path
from typing import Any

import pytest

from agent_operator.decide import actions, approvals, edits, endings, forks, model, reconcile
from agent_worker import forking
from agentrun import cluster, fork_cli, respond_cli
from agentrun_core.api import meta
from agentrun_core.api import status as api_status
from agentrun_core.store import rows
from tests.support import rowmaker

NOW = datetime.datetime(2026, 1, 1, 12, 0, 0, tzinfo=datetime.UTC)
FORK = {"run": "src", "runUid": "src-uid", "step": "draft", "set": {"draft.body": "new"}}


def world(fork_source: model.ForkSource | None, spec: dict[str, Any] | None = None) -> model.World:
    return model.World(
        run=model.RunRef(namespace="ns", name="f", uid="u", finalizers=(meta.FINALIZER,)),
        spec=model.RunSpec.from_body({"graph": "pkg.mod:graph", "forkOf": FORK, **(spec or {})}),
        status={},
        now=NOW,
        fork_source=fork_source,
    )


def test_a_resolved_fork_is_admitted_with_its_checkpoint() -> None:
    plan = reconcile.decide(world(model.ForkSource("src-uid", "cp-1")))
    assert actions.Admit(fork_source="src-uid", fork_checkpoint="cp-1") in plan.actions
    assert [e.reason for e in plan.events] == ["Forked"]


def test_a_fork_that_cannot_be_resolved_fails_once_with_the_reason_and_is_never_admitted() -> None:
    problem = "run src has no checkpoint after a step 'nosuch' (steps it completed: analyze, draft)"
    plan = reconcile.decide(world(model.ForkSource("src-uid", None, problem)))
    assert not [a for a in plan.actions if isinstance(a, actions.Admit)]
    assert plan.status is not None and plan.status["phase"] == "Failed"
    failed = {c["type"]: c for c in plan.status["conditions"]}["Failed"]
    assert failed["reason"] == api_status.FORK_REFUSED and problem in failed["message"]
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", api_status.FORK_REFUSED)]


def test_a_fork_not_looked_up_yet_is_not_admitted_as_a_plain_run() -> None:
    plan = reconcile.decide(world(None))
    assert not [a for a in plan.actions if isinstance(a, actions.Admit)]


def test_set_json_that_is_not_json_is_the_forks_problem() -> None:
    spec = model.RunSpec.from_body({"graph": "a:b", "forkOf": {**FORK, "setJson": {"options": "{nope"}}})
    assert spec.fork_of is not None and "setJson.options is not JSON" in (spec.fork_of.problem or "")
    ok = model.RunSpec.from_body({"graph": "a:b", "forkOf": {**FORK, "setJson": {"n": "[1, 2]"}}})
    assert ok.fork_of is not None and ok.fork_of.set["n"] == [1, 2] and ok.fork_of.set_keys == ("draft", "n")


def test_status_entry_of_a_fork() -> None:
    record = forks.admission_record("src-uid", "src", "cp-1", "draft", {"draft.body": "x"})
    assert forks.status_entry(record) == {
        "run": "src",
        "runUid": "src-uid",
        "checkpointId": "cp-1",
        "step": "draft",
        "set": ["draft.body"],
    }


def test_edited_values_replace_dotted_paths_without_touching_the_rest() -> None:
    values = {"draft": {"to": "a@x", "body": "old", "meta": {"n": 1}}, "outcome": "x"}
    out = forking.edited_values(values, {"draft.body": "new", "draft.meta.n": 2, "outcome": "y"})
    assert out == {"draft": {"to": "a@x", "body": "new", "meta": {"n": 2}}, "outcome": "y"}
    assert values["draft"]["body"] == "old"  # the checkpoint's values are not mutated


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"nosuch.x": 1}, "nosuch.x: the state has no 'nosuch'"),
        ({"outcome.x": 1}, "outcome.x: outcome is a str, not a mapping"),
        ({"draft.gone.x": 1}, "draft.gone.x: draft.gone does not exist"),
    ],
)
def test_edits_that_do_not_fit_the_state_are_refused_with_the_path(
    edit: dict[str, Any], message: str
) -> None:
    with pytest.raises(forking.ForkEditError, match=message.replace(".", r"\.")):
        forking.edited_values({"draft": {"body": "b"}, "outcome": "x"}, edit)


def test_resume_payload_has_langgraphs_human_in_the_loop_shape() -> None:
    base = {"approval_id": "a-1", "decided_by": "m", "comment": None, "deadline_action": None}
    accept = rows.resume_payload(decision="approved", **base)
    assert (accept["approved"], accept["type"], accept["args"]) == (True, "accept", None)
    edit = rows.resume_payload(decision="approved", edits={"body": "b"}, action="send_email", **base)
    assert (edit["approved"], edit["type"]) == (True, "edit")
    assert edit["args"] == {"action": "send_email", "args": {"body": "b"}}
    response = rows.resume_payload(decision="rejected", response="ask first", **base)
    assert (response["approved"], response["type"], response["args"]) == (False, "response", "ask first")
    ignore = rows.resume_payload(decision="rejected", **base)
    assert (ignore["type"], ignore["args"]) == ("ignore", None)
    with pytest.raises(ValueError, match="edits go with an approval only"):
        rows.resume_payload(decision="rejected", edits={"body": "b"}, **base)
    with pytest.raises(ValueError, match="a response goes with a rejection only"):
        rows.resume_payload(decision="approved", response="x", **base)


PROMPT = {"action": "send_email", "editable": ["subject", "body"], "body": "..."}


@pytest.mark.parametrize(
    ("decision", "edited", "response", "message"),
    [
        ("rejected", {"body": "x"}, None, "go with an approval only"),
        ("approved", {}, "x", "goes with agentrun.dev/reject only"),
        ("approved", {"to": "x"}, None, "cannot edit to: the approval's prompt lets you edit subject, body"),
        ("approved", {"body": "x" * 16385}, None, "longer than 16384 characters"),
        ("rejected", {}, "", "must be 1 to 4096 characters"),
    ],
)
def test_the_operator_refuses_a_payload_that_does_not_fit(
    decision: str, edited: dict[str, str], response: str | None, message: str
) -> None:
    assert message in (edits.problem(decision, edited, response, PROMPT) or "")


def test_a_decision_carries_its_edits_from_the_annotations_to_the_decide_action() -> None:
    ann = {
        meta.APPROVE: "a-1",
        meta.DECIDED_BY: "manager",
        "edit.agentrun.dev/body": "new body",
    }
    request, refusal = approvals.parse(ann)
    assert refusal is None and request is not None and dict(request.edits) == {"body": "new body"}
    approval = rowmaker.approval(approval_id="a-1", status="pending", prompt=PROMPT)
    w = dataclasses.replace(world(None), annotations_handled=False, approvals=(approval,))
    w = dataclasses.replace(w, run=dataclasses.replace(w.run, annotations=ann))
    plan = actions.Plan(requeue_after=1.0)
    assert approvals.from_annotations(w, plan, finished=False)
    [decide] = [a for a in plan.actions if isinstance(a, actions.Decide)]
    assert decide.edits == {"body": "new body"} and decide.action == "send_email"
    bad = {**ann, "edit.agentrun.dev/to": "eve@x"}
    w = dataclasses.replace(w, run=dataclasses.replace(w.run, annotations=bad))
    plan = actions.Plan(requeue_after=1.0)
    assert not approvals.from_annotations(w, plan, finished=False)
    assert [e.reason for e in plan.events] == ["DecisionPayloadRefused"]
    assert actions.RemoveDecisionAnnotations() in plan.actions  # refused, and the human decides again


SOURCE = {
    "metadata": {"name": "src", "namespace": "ns", "uid": "src-uid"},
    "spec": {"graph": "a:b", "input": {"x": 1}, "retryGeneration": 2, "cancel": True, "approval": {}},
}


def test_fork_body_copies_the_spec_without_its_steering_and_names_the_source() -> None:
    body = fork_cli.fork_body(
        SOURCE, "f", checkpoint=None, step="draft", sets={"draft.body": "x"}, set_json={}
    )
    assert body["metadata"] == {"name": "f", "namespace": "ns"}
    assert body["spec"] == {
        "graph": "a:b",
        "input": {"x": 1},
        "approval": {},
        "forkOf": {
            "run": "src",
            "runUid": "src-uid",
            "step": "draft",
            "set": {"draft.body": "x"},
            "approve": True,  # edits are the forker's decision (issue 35.3)
        },
    }
    plain = fork_cli.fork_body(SOURCE, "f", checkpoint=None, step="draft", sets={}, set_json={})
    assert "approve" not in plain["spec"]["forkOf"]
    vouched = fork_cli.fork_body(
        SOURCE, "f", checkpoint=None, step="draft", sets={}, set_json={}, approve=True
    )
    assert vouched["spec"]["forkOf"]["approve"] is True


def test_a_fork_past_a_decided_approval_is_refused_unless_it_approves() -> None:
    """Issue 35.3: the state after a decided approval holds the decision; a fork from there acts on it."""
    carried = ("a-0123456789ab (rejected)",)
    why = forks.carried_problem("src", "cp-9", carried, approve=False)
    assert why is not None and "after its approval a-0123456789ab (rejected) was decided" in why
    assert "--approve" in why and "RBAC verb approve on src" in why
    assert forks.carried_problem("src", "cp-9", carried, approve=True) is None
    assert forks.carried_problem("src", "cp-1", (), approve=False) is None
    # Edits imply approving: the admission policy asked for the approve verb.
    edited = model.RunSpec.from_body({"graph": "a:b", "forkOf": FORK}).fork_of
    plain = model.RunSpec.from_body({"graph": "a:b", "forkOf": {"run": "src", "step": "x"}}).fork_of
    vouched = model.RunSpec.from_body(
        {"graph": "a:b", "forkOf": {"run": "src", "step": "x", "approve": True}}
    )
    assert edited is not None and edited.approve
    assert plain is not None and not plain.approve
    assert vouched.fork_of is not None and vouched.fork_of.approve


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"new_name": "Bad_Name"}, "an AgentRun name is"),
        ({"new_name": "src"}, "--name must name a new AgentRun"),
        ({"checkpoint": "../x", "step": None}, "is not a checkpoint id"),
        ({"sets": {"a": "1"}, "set_json": {"a": "1"}}, "given with both --set and --set-json"),
    ],
)
def test_fork_body_refuses_bad_requests(kwargs: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {"new_name": "f", "checkpoint": None, "step": "draft", "sets": {}, "set_json": {}}
    args.update(kwargs)
    new_name = args.pop("new_name")
    with pytest.raises(cluster.CliError, match=message):
        fork_cli.fork_body(SOURCE, new_name, **args)


def test_fork_cli_edit_pairs() -> None:
    assert fork_cli._edits(["draft.body=a=b"], False) == {"draft.body": "a=b"}
    with pytest.raises(cluster.CliError, match="expected PATH=VALUE"):
        fork_cli._edits(["draft.body"], False)
    with pytest.raises(cluster.CliError, match="the value is not JSON"):
        fork_cli._edits(["n={x"], True)


def test_approve_edits_from_flags_and_file(tmp_path: Path) -> None:
    file = tmp_path / "e.yaml"
    file.write_text("subject: Hello\n")
    assert respond_cli.parse_edits(["body=a=b"], str(file)) == {"subject": "Hello", "body": "a=b"}
    file.write_text("subject: 3\n")
    with pytest.raises(cluster.CliError, match="subject is a int; edited fields are text"):
        respond_cli.parse_edits([], str(file))
    with pytest.raises(cluster.CliError, match="given twice"):
        respond_cli.parse_edits(["body=a", "body=b"], None)
    with pytest.raises(cluster.CliError, match="is not a field name"):
        respond_cli.parse_edits(["bo dy=a"], None)
    status = {"pendingApproval": {"prompt": PROMPT}}
    respond_cli.check_editable(status, {"body": "x"})
    with pytest.raises(
        cluster.CliError, match="cannot edit to: the pending approval lets you edit subject, body"
    ):
        respond_cli.check_editable(status, {"to": "x"})


def test_status_shows_edits_and_responses_only() -> None:
    base = {"approval_id": "a-1", "decided_by": "m", "comment": None, "deadline_action": None}
    assert edits.status_fields(rows.resume_payload(decision="approved", **base)) == {}
    assert edits.status_fields(rows.resume_payload(decision="rejected", **base)) == {}
    edited = rows.resume_payload(decision="approved", edits={"body": "b", "subject": "s"}, **base)
    assert edits.status_fields(edited) == {"type": "edit", "edited": ["body", "subject"]}
    answered = rows.resume_payload(decision="rejected", response="ask first", **base)
    assert edits.status_fields(answered) == {"type": "response", "response": "ask first"}


def test_a_fork_edit_refused_by_the_worker_is_its_own_failure_reason() -> None:
    db = rowmaker.run(
        status="failed", status_reason="ForkEditRefused", error="fork edit refused: draft.body.x: ..."
    )
    assert endings.db_outcome(db) == (
        "Failed",
        api_status.FORK_EDIT_REFUSED,
        "fork edit refused: draft.body.x: ...",
    )


def test_no_fork_is_admitted_while_a_steering_policy_is_not_as_shipped() -> None:
    """Issue 35.4: the fork policy (get/approve on the source) may be gone: admit nothing, say which."""
    missing = ("validatingadmissionpolicies/agentrun-fork (failurePolicy Ignore (must be Fail))",)
    w = dataclasses.replace(
        world(model.ForkSource("src-uid", "cp-1")), admission_ok=False, admission_missing=missing
    )
    plan = reconcile.decide(w)
    assert not [a for a in plan.actions if isinstance(a, actions.Admit)]
    failed = {c["type"]: c for c in (plan.status or {})["conditions"]}["Failed"]
    assert (
        failed["reason"] == api_status.FORK_REFUSED
        and "agentrun-fork (failurePolicy Ignore" in failed["message"]
    )
    unknown = reconcile.decide(dataclasses.replace(w, admission_ok=None))
    assert not [a for a in unknown.actions if isinstance(a, actions.Admit)] and unknown.status is None
