"""The support-ticket agent of the demo: analyze → retrieve → draft → manager approval → send the email.

Graph reference for an AgentRun: ``agentrun_examples.support_ticket:graph`` (an uncompiled ``StateGraph``;
the worker compiles it with its Postgres checkpointer). ``build_graph`` is the same as a factory.

``graph`` is built on first access so that importing the pure parts (``retrieval``, ``analysis``,
``drafting``) does not import LangGraph or the worker.
"""

from __future__ import annotations

from typing import Any

import agentrun_examples


def build_graph() -> Any:
    from agentrun_examples.support_ticket import workflow

    return workflow.build()


__getattr__ = agentrun_examples.lazy_graph(__name__, build_graph)
