"""A LangChain 1.x ``create_agent`` agent whose emails a human reviews first (``HumanInTheLoopMiddleware``).

Graph reference for an AgentRun: ``agentrun_examples.outbox:graph``. Input: ``{"messages": [{"role":
"user", "content": "Send the outage notice to ada@example.com, bob@example.com"}]}``. The model asks for one
``send_email`` call per address in one turn; the middleware interrupts once for the whole batch, and the
approver decides each call (``kubectl agentrun approve NAME --id ID --reject 2="not a customer" --set
1.body=...``). Only the approved calls send, through the worker's effect ledger, to the SMTP server of
``SUPPORT_SMTP_HOST`` / ``SUPPORT_SMTP_PORT`` (the support-ticket agent's mail tool and settings).

The chat model is a deterministic stand-in (:mod:`agentrun_examples.outbox.model`) so the example runs
offline and in CI; any LangChain chat model with tool calling takes its place.

``graph`` is built on first access so that importing the package does not import LangChain.
"""

from __future__ import annotations

from typing import Any

import agentrun_examples


def build_graph() -> Any:
    from agentrun_examples.outbox import agent

    return agent.build()


__getattr__ = agentrun_examples.lazy_graph(__name__, build_graph)
