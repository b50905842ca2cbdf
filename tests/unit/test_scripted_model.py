"""``agent_worker.scripted.ScriptedChatModel``: the answer is a function of the conversation alone, so a new
process replaying the same messages gets the same tool calls (what a resumed run needs)."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from agent_worker import scripted


class Echo(scripted.ScriptedChatModel):
    def reply(self, messages: list[BaseMessage]) -> AIMessage:
        text = str(messages[-1].content)
        call = {"name": "echo", "args": {"text": text}, "id": f"echo-{text}"}
        return AIMessage(content="", tool_calls=[call])


def test_the_same_messages_get_the_same_calls_from_a_new_model() -> None:
    messages: list[BaseMessage] = [HumanMessage("hi")]
    first, replayed = Echo().invoke(messages), Echo().bind_tools([]).invoke(messages)
    assert isinstance(first, AIMessage) and isinstance(replayed, AIMessage)
    assert first.tool_calls == replayed.tool_calls == [
        {"name": "echo", "args": {"text": "hi"}, "id": "echo-hi", "type": "tool_call"}
    ]


def test_a_script_without_a_reply_says_what_is_missing() -> None:
    with pytest.raises(NotImplementedError, match=r"ScriptedChatModel\.reply"):
        scripted.ScriptedChatModel().invoke([HumanMessage("hi")])
