"""The chat models of the test graphs: scripted, deterministic where the test needs it, no network."""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult


class ScriptModel(BaseChatModel):
    """A model whose answer is ``reply(messages)``. Binding tools changes nothing: the script knows them
    (``create_agent`` binds its tools to the model it is given)."""

    def reply(self, messages: list[BaseMessage]) -> AIMessage:
        raise NotImplementedError

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self.reply(messages))])
