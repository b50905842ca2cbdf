"""The outbox agent: ``create_agent`` + ``HumanInTheLoopMiddleware`` + a ``send_email`` tool on the ledger."""

from __future__ import annotations

from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.tools import tool

from agentrun_examples.outbox import model
from agentrun_examples.support_ticket import tools as mail_tools


@tool
def send_email(to: str, subject: str, body: str) -> str:
    """Send one email."""
    # Through the effect ledger (agent_worker.effects): exactly once per tool call, whatever is killed.
    sent = mail_tools.send_email(to=to, subject=subject, body=body)
    return f"sent to {to} ({sent['message_id']})"


def build() -> Any:
    """The compiled agent, without a checkpointer (the worker binds its Postgres one)."""
    return create_agent(
        model=model.OutboxModel(),
        tools=[send_email],
        # Every send_email waits for a human; all four decisions (approve, edit, reject, respond) allowed.
        middleware=[HumanInTheLoopMiddleware(interrupt_on={"send_email": True})],
    )
