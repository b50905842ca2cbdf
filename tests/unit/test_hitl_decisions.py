"""A HumanInTheLoopMiddleware batch decided per action: the operator's plan (every rule of an approval, then
the decisions checked against the prompt Postgres recorded), the status it shows, the CLI's checks."""

from __future__ import annotations

import dataclasses
import datetime
import json
from typing import Any

import pytest

from agent_operator.decide import actions, model, reconcile
from agentrun import batch_cli, cluster, render, trace
from agentrun_core import hitl, store
from agentrun_core.api import meta
from tests.support import rowmaker
from tests.support.trace_rows import inputs
from tests.unit.reconcile_world import NOW, parked, world


def request(name: str, to: str) -> dict[str, Any]:
    args = {"to": to, "subject": "Notice", "body": f"Dear {to}"}
    return {"name": name, "args": args, "description": f"Tool execution requires approval\n\nArgs: {args}"}


PROMPT = {  # as the middleware asks it (langchain 1.5, batched mode), as Postgres recorded it
    "action_requests": [request("send_email", "ada@x.org"), request("send_email", "bob@x.org"),
                        request("refund", "eve@x.org")],
    "review_configs": [
        {"action_name": "send_email", "allowed_decisions": ["approve", "edit", "reject", "respond"]},
        {"action_name": "send_email", "allowed_decisions": ["approve", "edit", "reject", "respond"]},
        {"action_name": "refund", "allowed_decisions": ["approve", "reject"]},
    ],
}  # fmt: skip
PENDING = rowmaker.approval(
    approval_id="a-222222222222",
    status="pending",
    prompt=PROMPT,
    deadline=NOW + datetime.timedelta(seconds=60),
)
MIXED = [
    {"type": "approve"},
    {"type": "edit", "edited_action": {"name": "send_email", "args": {"body": "edited"}}},
    {"type": "reject", "message": "not a customer"},
]


def annotated(
    ann: dict[str, str],
    *,
    by: str = "manager",
    creator: str = "alice",
    approvals: tuple[store.Approval, ...] = (PENDING,),
    **kw: Any,
) -> model.World:
    return parked(*approvals, annotations={meta.CREATED_BY: creator, meta.DECIDED_BY: by, **ann}, **kw)


def decided(plan: actions.Plan) -> list[actions.Decide]:
    return [a for a in plan.actions if isinstance(a, actions.Decide)]


def warnings(plan: actions.Plan) -> list[tuple[str, str]]:
    return [(e.reason, e.message) for e in plan.events if e.type == "Warning"]


def test_per_action_decisions_ride_on_the_approval_and_reach_the_decide_action() -> None:
    ann = {meta.APPROVE: PENDING.approval_id, meta.DECISIONS: json.dumps(MIXED)}
    plan = reconcile.decide(annotated(ann))
    [decide] = decided(plan)
    assert decide.decision == "approved" and decide.decided_by == "manager"
    assert decide.decisions is not None and [d["type"] for d in decide.decisions] == [
        "approve",
        "edit",
        "reject",
    ]
    # merged over the model's arguments: only the body changed
    assert decide.decisions[1]["edited_action"]["args"] == {
        **PROMPT["action_requests"][1]["args"],
        "body": "edited",
    }
    assert actions.RemoveDecisionAnnotations() in plan.actions


def test_a_plain_decision_answers_every_action_and_a_response_rejects_each_with_it() -> None:
    approve = reconcile.decide(annotated({meta.APPROVE: PENDING.approval_id}))
    assert [d["type"] for d in decided(approve)[0].decisions or []] == ["approve"] * 3
    respond = reconcile.decide(
        annotated({meta.REJECT: PENDING.approval_id, meta.RESPONSE: "ask legal"}, by="alice")
    )  # the creator may reject / respond: nothing runs
    [decide] = decided(respond)
    assert decide.decisions == [{"type": "reject", "message": "ask legal"}] * 3


@pytest.mark.parametrize(
    ("ann", "by", "reason", "why"),
    [
        ({meta.DECISIONS: "[{"}, "manager", "DecisionPayloadRefused", "not JSON"),
        ({meta.DECISIONS: json.dumps(MIXED[:2])}, "manager", "DecisionPayloadRefused", "3 actions, 2"),
        (
            {meta.DECISIONS: json.dumps([*MIXED[:2], {"type": "edit", "edited_action": {"args": {}}}])},
            "manager",
            "DecisionPayloadRefused",
            "action 2 (refund) allows approve, reject, not edit",
        ),
        (
            {
                meta.DECISIONS: json.dumps(
                    [*MIXED[:2], {"type": "approve", "edited_action": {"name": "x"}}]
                )
            },
            "alice",  # the creator: one approved action is an approval, and self-approval is refused
            "SelfApprovalRefused",
            "alice created this run",
        ),
    ],
)
def test_malformed_or_forbidden_decisions_are_refused_whole_and_the_approval_stays_pending(
    ann: dict[str, str], by: str, reason: str, why: str
) -> None:
    plan = reconcile.decide(annotated({meta.APPROVE: PENDING.approval_id, **ann}, by=by))
    assert decided(plan) == []
    [(got, message)] = warnings(plan)
    assert got == reason and why in message, message
    assert actions.RemoveDecisionAnnotations() in plan.actions  # consumed: the human decides again


def test_a_rejection_may_not_carry_a_decision_that_lets_a_tool_run() -> None:
    ann = {meta.REJECT: PENDING.approval_id, meta.DECISIONS: json.dumps(MIXED)}
    plan = reconcile.decide(annotated(ann, by="alice"))
    assert decided(plan) == []
    [(reason, message)] = warnings(plan)
    assert reason == "DecisionPayloadRefused" and "go with an approval" in message


def test_decisions_for_a_prompt_that_is_not_a_batch_are_refused() -> None:
    plain = dataclasses.replace(PENDING, prompt={"action": "send_email", "editable": ["body"]})
    ann = {meta.APPROVE: PENDING.approval_id, meta.DECISIONS: json.dumps(MIXED)}
    plan = reconcile.decide(annotated(ann, approvals=(plain,)))
    [(reason, message)] = warnings(plan)
    assert reason == "DecisionPayloadRefused" and "not a HumanInTheLoopMiddleware batch" in message


def test_an_expiry_rejects_every_action() -> None:
    late = dataclasses.replace(PENDING, deadline=NOW - datetime.timedelta(seconds=1))
    plan = reconcile.decide(parked(late, spec={"approval": {"onTimeout": "readOnly"}}))
    [decide] = decided(plan)
    assert decide.decision == "expired" and [d["type"] for d in decide.decisions or []] == ["reject"] * 3


def test_status_lists_the_batch_and_each_decision() -> None:
    plan = reconcile.decide(parked(PENDING, pods=[]))
    assert plan.status is not None
    assert plan.status["pendingApproval"]["actions"] == [
        {"tool": "send_email", "args": PROMPT["action_requests"][0]["args"],
         "allowedDecisions": ["approve", "edit", "reject", "respond"]},
        {"tool": "send_email", "args": PROMPT["action_requests"][1]["args"],
         "allowedDecisions": ["approve", "edit", "reject", "respond"]},
        {"tool": "refund", "args": PROMPT["action_requests"][2]["args"],
         "allowedDecisions": ["approve", "reject"]},
    ]  # fmt: skip
    [decide] = decided(
        reconcile.decide(
            annotated({meta.APPROVE: PENDING.approval_id, meta.DECISIONS: json.dumps(MIXED)})
        )
    )
    payload = {"decisions": decide.decisions, "approved": True}
    done = dataclasses.replace(
        PENDING, status="approved", decided_by="manager", decided_at=NOW, payload=payload
    )
    shown = reconcile.decide(world(db="running", status={"attempts": 1}, approvals=(done,)))
    assert shown.status is not None and "pendingApproval" not in shown.status
    [entry] = shown.status["approvals"]
    assert entry["actions"] == [
        {"tool": "send_email", "decision": "approve"},
        {"tool": "send_email", "decision": "edit", "edited": ["body"]},
        {"tool": "refund", "decision": "reject", "message": "not a customer"},
    ]


STATUS = {"pendingApproval": {"id": PENDING.approval_id, "prompt": PROMPT}}


def test_cli_builds_per_action_decisions_from_flags() -> None:
    made = batch_cli.decisions(STATUS, "approved", edits={"1.body": "edited"}, rejects=["2=not a customer"])
    assert made is not None and json.loads(made) == [
        {"type": "approve"},
        {"type": "edit", "edited_action": {
            "name": "send_email", "args": {**PROMPT["action_requests"][1]["args"], "body": "edited"}}},
        {"type": "reject", "message": "not a customer"},
    ]  # fmt: skip
    assert batch_cli.decisions(STATUS, "approved") is None  # the operator answers every action: approve
    assert (
        json.loads(batch_cli.decisions(STATUS, "approved", given=json.dumps(MIXED)) or "")[2]["type"]
        == "reject"
    )


@pytest.mark.parametrize(
    ("kwargs", "why"),
    [
        ({"edits": {"body": "x"}}, "say which action it edits"),
        ({"edits": {"7.body": "x"}}, "there is no action '7': the batch has 3 actions (0-2)"),
        ({"rejects": ["x"]}, "there is no action 'x'"),
        ({"edits": {"2.to": "x"}}, "action 2 (refund) allows approve, reject, not edit"),
        ({"rejects": ["0", "1", "2"]}, "use reject"),
        ({"rejects": ["1"], "edits": {"1.body": "x"}}, "action 1 is given both --set and --reject"),
        ({"given": "[{"}, "not JSON"),
        ({"given": "[]"}, "3 actions, 0 decisions"),
        ({"given": "[]", "rejects": ["1"]}, "--decisions gives every action's decision"),
    ],
)
def test_cli_refuses_decisions_that_do_not_fit_before_anything_is_sent(
    kwargs: dict[str, Any], why: str
) -> None:
    with pytest.raises(
        cluster.CliError, match=r"nothing annotated|--decisions gives|given both|say which"
    ) as exc:
        batch_cli.decisions(STATUS, "approved", **kwargs)
    assert why in str(exc.value)


def test_cli_refuses_a_plain_decision_an_action_does_not_allow_and_shows_the_batch() -> None:
    no_reject = json.loads(json.dumps(STATUS))
    no_reject["pendingApproval"]["prompt"]["review_configs"][2]["allowed_decisions"] = ["approve", "edit"]
    with pytest.raises(cluster.CliError, match=r"action 2 \(refund\) allows approve, edit, not reject"):
        batch_cli.decisions(no_reject, "rejected")
    shown = batch_cli.describe(STATUS["pendingApproval"]) or ""
    assert "3 tool calls to review" in shown and "[2] refund  (allows approve, reject)" in shown
    assert "to: bob@x.org" in shown
    assert batch_cli.describe({"prompt": {"q": "send?"}}) is None


def test_trace_lists_the_pending_batch() -> None:
    data = trace.build(inputs([], []))
    pending = {"id": PENDING.approval_id, "actions": hitl.pending_actions(PROMPT)}
    text = render.trace({**data, "run": {**data["run"], "pendingApproval": pending}})
    assert f"pending approval {PENDING.approval_id}" in text
    assert '  [2] refund {"to": "eve@x.org"' in text and "(allows approve, reject)" in text, text
