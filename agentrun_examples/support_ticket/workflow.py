"""The support-ticket agent: analyze → retrieve → draft → review (a manager approves) → send.

The run's input is the initial state::

    {"ticket": {"id": "T-1042", "customer": {"name": "Ada", "email": "ada@example.com"},
                "subject": "Charged twice", "body": "..."},
     "options": {"pause_seconds": {"retrieve": 6}}}     # optional, see below

``options.pause_seconds`` maps a step name to seconds to sleep in that step. It exists so the demo can evict
the worker while a step is running, deterministically; leave it out in real use.

``review`` calls ``interrupt()``: the worker parks the run (no pod) until someone annotates the AgentRun
with ``agentrun.dev/approve=<id>`` or ``agentrun.dev/reject=<id>`` (``kubectl agentrun approve|reject``;
``approve --set body=...`` edits the reply first, ``respond --message ...`` answers without sending). The
node holds nothing but the interrupt, because LangGraph re-runs a node from its start when it resumes.
``send`` goes through the effect ledger (see :mod:`agentrun_examples.support_ticket.tools`), so a crash
anywhere in it never sends a second email.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from agentrun_examples.support_ticket import analysis, drafting, retrieval, settings, tools

STEPS = ("analyze", "retrieve", "draft", "review", "send")

# Passages cited per reply: enough to answer, few enough for a manager to read.
TOP_K = 3


class TicketState(TypedDict, total=False):
    ticket: dict[str, Any]  # input
    options: dict[str, Any]  # input, optional
    analysis: dict[str, Any]
    passages: list[dict[str, Any]]
    draft: dict[str, Any]
    decision: dict[str, Any]  # the approval payload the run was resumed with
    email: dict[str, Any]  # the send effect's result
    outcome: str  # sent | rejected | responded | expired


def _pause(state: TicketState, step: str) -> None:
    options = state.get("options") or {}
    seconds = (options.get("pause_seconds") or {}).get(step, 0)
    if not isinstance(seconds, int | float) or seconds < 0:
        raise ValueError(f"options.pause_seconds.{step} must be a non-negative number, got {seconds!r}")
    if seconds:
        tools.pause(step, float(seconds))


def analyze(state: TicketState) -> TicketState:
    _pause(state, "analyze")
    ticket = analysis.parse_ticket(state.get("ticket"))
    return {"analysis": analysis.analyze(ticket).as_dict()}


def retrieve(state: TicketState) -> TicketState:
    _pause(state, "retrieve")
    passages = retrieval.search(state["analysis"]["query"], k=TOP_K)
    return {"passages": [p.as_dict() for p in passages]}


def draft(state: TicketState) -> TicketState:
    _pause(state, "draft")
    ticket = analysis.parse_ticket(state.get("ticket"))
    facts = state["analysis"]
    result = analysis.Analysis(
        category=facts["category"],
        urgency=facts["urgency"],
        tone=facts["tone"],
        keywords=tuple(facts["keywords"]),
        query=facts["query"],
    )
    return {"draft": drafting.draft(ticket, result, state["passages"], settings.from_env())}


# What the manager may change before the reply goes out (kubectl agentrun approve NAME --id ID --set body=.)
EDITABLE = ("subject", "body")


def review(state: TicketState) -> TicketState:
    """Ask the manager. The answer is LangGraph's human-in-the-loop response: accept (send as drafted), edit
    (send with the manager's subject/body), response (do not send; the manager's text is kept) or ignore."""
    reply = state["draft"]
    decision = interrupt(
        {
            "question": "Send this reply to the customer?",
            "action": "send_email",
            "editable": list(EDITABLE),
            "ticket": state["ticket"]["id"],
            "to": reply["to"],
            "subject": reply["subject"],
            "body": reply["body"],
        }
    )
    if not isinstance(decision, dict):
        # Resumed by hand (e.g. Command(resume=True) in a notebook): accept a bare bool.
        decision = {"approved": bool(decision)}
    update: TicketState = {"decision": decision}
    if decision.get("type") == "edit" and decision.get("approved") is True:
        edits = (decision.get("args") or {}).get("args") or {}
        # Only the fields the prompt offered; the ledger's key of the send is by position, so an edited
        # reply is still sent at most once.
        update["draft"] = {**reply, **{k: str(v) for k, v in edits.items() if k in EDITABLE}}
    return update


def route_after_review(state: TicketState) -> Literal["send", "closed"]:
    return "send" if state["decision"].get("approved") is True else "closed"


def send(state: TicketState) -> TicketState:
    _pause(state, "send")
    reply = state["draft"]
    result = tools.send_email(to=reply["to"], subject=reply["subject"], body=reply["body"])
    return {"email": result, "outcome": "sent"}


def closed(state: TicketState) -> TicketState:
    """Not approved: rejected by the manager (possibly with a response), or the approval deadline passed.
    Nothing is sent."""
    decision = state["decision"]
    if decision.get("expired"):
        return {"outcome": "expired"}
    return {"outcome": "responded" if decision.get("type") == "response" else "rejected"}


def build() -> StateGraph[TicketState]:
    """The uncompiled graph; the worker compiles it with its Postgres checkpointer."""
    builder: StateGraph[TicketState] = StateGraph(TicketState)
    builder.add_node("analyze", analyze)
    builder.add_node("retrieve", retrieve)
    builder.add_node("draft", draft)
    builder.add_node("review", review)
    builder.add_node("send", send)
    builder.add_node("closed", closed)
    builder.add_edge(START, "analyze")
    builder.add_edge("analyze", "retrieve")
    builder.add_edge("retrieve", "draft")
    builder.add_edge("draft", "review")
    builder.add_conditional_edges("review", route_after_review, ["send", "closed"])
    builder.add_edge("send", END)
    builder.add_edge("closed", END)
    return builder
