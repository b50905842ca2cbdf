"""A deterministic chat model for demos, benchmarks and tests of agents that agentrun runs.

Why not LangChain's ``GenericFakeChatModel``: it answers from an iterator, whose position lives in the
process. A worker that resumes a run (after an approval, a lost Pod, an upgrade) is a new process that replays
the graph from its checkpoint, so the iterator would start over and ask for the same tool calls again. A
``ScriptedChatModel`` answers from the conversation instead: subclass it and write ``reply``, a function of
the messages alone, and every replay asks for the same calls (give them stable ids, as the ledger keys an
effect by the tool call it serves).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult


class ScriptedChatModel(BaseChatModel):
    """``reply(messages)`` is the model's answer. Binding tools changes nothing (``create_agent`` binds its
    tools; the script knows them)."""

    @property
    def _llm_type(self) -> str:
        return "agentrun-scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self

    def reply(self, messages: list[BaseMessage]) -> AIMessage:
        raise NotImplementedError(f"{type(self).__name__}.reply: the script's answer to the messages")

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self.reply(messages))])
