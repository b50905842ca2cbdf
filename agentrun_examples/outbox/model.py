"""A deterministic chat model for the outbox agent: what it answers is a function of the messages alone.

A ``ScriptedChatModel`` (``agent_worker.scripted``: why not ``GenericFakeChatModel``): no tool result since
the last user message -> one ``send_email`` call per address in that message (ids ``send-0``, ``send-1``, ...
so the calls are the same on every replay); otherwise -> a final answer listing the tool results.
"""

from __future__ import annotations

import re

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from agent_worker import scripted

ADDRESS = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")
SUBJECT = "Service notice"


def body_for(address: str) -> str:
    name = address.split("@", 1)[0].capitalize()
    return f"Dear {name}, our service was interrupted today between 09:00 and 09:40 UTC. We apologise."


class OutboxModel(scripted.ScriptedChatModel):
    """Asks for the emails the user wants, then reports what the tools answered."""

    @property
    def _llm_type(self) -> str:
        return "agentrun-outbox-scripted"

    def reply(self, messages: list[BaseMessage]) -> AIMessage:
        last_user = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=-1)
        results = [m for m in messages[last_user + 1 :] if isinstance(m, ToolMessage)]
        if results:
            lines = [f"- {m.content}" for m in results]
            reply = AIMessage(content="Done:\n" + "\n".join(lines))
        else:
            text = str(messages[last_user].content) if last_user >= 0 else ""
            calls = [
                {
                    "name": "send_email",
                    "args": {"to": to, "subject": SUBJECT, "body": body_for(to)},
                    "id": f"send-{i}",
                    "type": "tool_call",
                }
                for i, to in enumerate(dict.fromkeys(ADDRESS.findall(text)))
            ]
            reply = AIMessage(content="" if calls else "No address to write to.", tool_calls=calls)
        return reply
