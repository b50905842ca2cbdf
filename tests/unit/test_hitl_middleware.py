"""LangChain 1.x ``HumanInTheLoopMiddleware``: the payload agentrun stores with a decision answers the real
middleware in its own shape (``{"decisions": [...]}``, one per action request of the batch).

The agent is the outbox example (``create_agent`` + the middleware + a deterministic model) run with
LangGraph's in-memory saver; its ``send_email`` tool is replaced by a recording one (the effect ledger and
the SMTP sink are the integration test's, tests/integration/test_hitl_flow.py)."""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.messages import ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from agentrun_core import hitl
from agentrun_core.store import rows
from agentrun_examples.outbox import model

ASK = "Send the outage notice to ada@example.com, bob@example.com, eve@example.com"


def agent(sent: list[dict[str, Any]], interrupt_on: dict[str, Any] | None = None) -> Any:
    @tool
    def send_email(to: str, subject: str, body: str) -> str:
        """Send one email."""
        sent.append({"to": to, "subject": subject, "body": body})
        return f"sent to {to}"

    return create_agent(
        model=model.OutboxModel(),
        tools=[send_email],
        middleware=[HumanInTheLoopMiddleware(interrupt_on=interrupt_on or {"send_email": True})],
        checkpointer=InMemorySaver(),
    )


def park(graph: Any, thread: str) -> tuple[dict[str, Any], Any]:
    config = {"configurable": {"thread_id": thread}}
    graph.invoke({"messages": [{"role": "user", "content": ASK}]}, config)
    [interrupt] = graph.get_state(config).interrupts
    return config, interrupt


def resume(graph: Any, config: dict[str, Any], interrupt: Any, payload: Any) -> dict[str, Any]:
    # What agent_worker.resume hands the graph: the stored payload, keyed by the interrupt's id.
    out: dict[str, Any] = graph.invoke(Command(resume={interrupt.id: payload}), config)
    return out


def answer(
    prompt: Any, decision: str, *, asked: Any = None, response: str | None = None, comment: str | None = None
) -> dict[str, Any]:
    """The payload Postgres stores with the manager's decision of approval a-1 on ``prompt`` (the batch's
    decisions as ``agentrun_core.hitl`` checks them; an expiry's carries its deadline action)."""
    return rows.resume_payload(
        approval_id="a-1",
        decision=decision,
        decided_by="manager",
        comment=comment,
        deadline_action="read_only" if decision == "expired" else None,
        response=response,
        decisions=hitl.decide(prompt, decision, decisions=asked, response=response),
    )


def test_a_plain_approval_of_a_middleware_batch_resumes_it_and_sends_every_call() -> None:
    sent: list[dict[str, Any]] = []
    graph = agent(sent)
    config, interrupt = park(graph, "plain")
    prompt = interrupt.value
    assert [a["name"] for a in prompt["action_requests"]] == ["send_email"] * 3
    payload = answer(prompt, "approved")
    # before: {"type": "accept", ...} -> KeyError: 'decisions' inside the middleware
    out = resume(graph, config, interrupt, payload)
    assert sorted(s["to"] for s in sent) == ["ada@example.com", "bob@example.com", "eve@example.com"]
    assert out["messages"][-1].content.startswith("Done:")


def test_per_action_decisions_approve_one_edit_the_second_reject_the_third() -> None:
    sent: list[dict[str, Any]] = []
    graph = agent(sent)
    config, interrupt = park(graph, "mixed")
    asked = [
        {"type": "approve"},
        {"type": "edit", "edited_action": {"name": "send_email", "args": {"body": "Dear Bob, edited."}}},
        {"type": "reject", "message": "Eve is not a customer."},
    ]
    payload = answer(interrupt.value, "approved", asked=asked, comment="one edited, one refused")
    out = resume(graph, config, interrupt, payload)
    assert sorted((s["to"], s["body"]) for s in sent) == [  # the tool calls run in parallel
        ("ada@example.com", model.body_for("ada@example.com")),
        ("bob@example.com", "Dear Bob, edited."),  # an edit merges over the model's arguments
    ]
    rejected = [m for m in out["messages"] if isinstance(m, ToolMessage) and m.status == "error"]
    assert len(rejected) == 1 and "Eve is not a customer." in str(rejected[0].content)


def test_a_rejection_and_an_expiry_answer_every_action_of_the_batch_with_reject() -> None:
    for decision, response in (("rejected", "Ask legal first."), ("rejected", None), ("expired", None)):
        sent: list[dict[str, Any]] = []
        graph = agent(sent)
        config, interrupt = park(graph, f"{decision}-{response}")
        payload = answer(interrupt.value, decision, response=response)
        out = resume(graph, config, interrupt, payload)
        assert sent == []
        refusals = [m for m in out["messages"] if isinstance(m, ToolMessage)]
        assert len(refusals) == 3 and all(m.status == "error" for m in refusals)
        if response:
            assert all(response in str(m.content) for m in refusals)


def test_decisions_that_do_not_fit_the_batch_are_refused_with_the_reason() -> None:
    graph = agent([], {"send_email": {"allowed_decisions": ["approve", "reject"]}})
    _, interrupt = park(graph, "refused")
    prompt = interrupt.value
    approve = {"type": "approve"}
    cases = [
        ([approve, approve], "3 actions, 2 decisions"),
        ({"0": approve}, "a JSON list"),
        ([approve, approve, {"type": "edit", "edited_action": {"args": {"to": "x"}}}], "action 2"),
        ([approve, approve, {"type": "maybe"}], "unknown decision type"),
        ([approve, approve, {"type": "reject", "message": 7}], "message"),
        ("[{", "not JSON"),
    ]
    for asked, why in cases:
        with pytest.raises(hitl.DecisionRefused, match=why):
            hitl.decide(prompt, "approved", decisions=asked)
    with pytest.raises(hitl.DecisionRefused, match=r"action 2 \(send_email\) allows approve, reject"):
        hitl.decide(prompt, "approved", decisions=[approve, approve, {"type": "edit"}])
    with pytest.raises(hitl.DecisionRefused, match="use reject"):
        hitl.decide(prompt, "approved", decisions=[{"type": "reject"}] * 3)
    with pytest.raises(hitl.DecisionRefused, match="go with an approval"):
        hitl.decide(prompt, "rejected", decisions=[approve, {"type": "reject"}, {"type": "reject"}])
    graph = agent([], {"send_email": {"allowed_decisions": ["approve", "edit"]}})
    _, interrupt = park(graph, "no-reject")
    with pytest.raises(hitl.DecisionRefused, match=r"action 0 \(send_email\) allows approve, edit"):
        hitl.decide(interrupt.value, "rejected")
