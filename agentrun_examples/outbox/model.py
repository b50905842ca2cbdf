"""A deterministic chat model for the outbox agent: what it answers is a function of the messages alone.

Why not ``GenericFakeChatModel``: it answers from an iterator, whose position lives in the process. A worker
that resumes a run after an approval is a new process, so the iterator would start over and ask for the
same tool calls again. This model reads the conversation instead: no tool result since the last user
message -> one ``send_email`` call per address in that message (ids ``send-0``, ``send-1``, ... so the
calls are the same on every replay); otherwise -> a final answer listing the tool results.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult

ADDRESS = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")
SUBJECT = "Service notice"


def body_for(address: str) -> str:
    name = address.split("@", 1)[0].capitalize()
    return f"Dear {name}, our service was interrupted today between 09:00 and 09:40 UTC. We apologise."


class OutboxModel(BaseChatModel):
    """Asks for the emails the user wants, then reports what the tools answered."""

    @property
    def _llm_type(self) -> str:
        return "agentrun-outbox-scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        # create_agent binds its tools; the script knows its one tool, so binding changes nothing.
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
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
        return ChatResult(generations=[ChatGeneration(message=reply)])
