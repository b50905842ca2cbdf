"""A graph that spends model tokens, for spec.budget (tests/integration/test_budgets.py).

``FakeUsageModel`` is a LangChain chat model that reports ``usage_metadata`` as a provider does. It bills
each call at its "provider": one line appended (and fsynced) to the file named by ``BUDGET_MODEL_LOG``
before the answer is returned, so a test counts the calls really made, kills included, never from our own
tables.
"""

from __future__ import annotations

import json
import operator
import os
from typing import Annotated, Any, TypedDict

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.graph import END, START, StateGraph

from agent_worker.scripted import ScriptedChatModel

INPUT_TOKENS, OUTPUT_TOKENS = 100, 50  # per call
LOG_ENV = "BUDGET_MODEL_LOG"


class FakeUsageModel(ScriptedChatModel):
    model_name: str = "fake-usage-1"

    @property
    def _llm_type(self) -> str:
        return "fake-usage"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": self.model_name}

    def reply(self, messages: list[BaseMessage]) -> AIMessage:
        return self._answer(messages, asynchronous=False)

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        # A native async provider (not LangChain's default: _generate in a thread pool), as ainvoke of a
        # real async client runs: in the node's event loop.
        return ChatResult(generations=[ChatGeneration(message=self._answer(messages, asynchronous=True))])

    def _answer(self, messages: list[BaseMessage], asynchronous: bool) -> AIMessage:
        text = f"answer to {messages[-1].content}"
        path = os.environ.get(LOG_ENV)
        if path:  # the provider bills the call: on disk before the answer leaves
            bill = {"prompt": str(messages[-1].content), "pid": os.getpid(), "async": asynchronous}
            line = json.dumps(bill) + "\n"
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line.encode())
                os.fsync(fd)
            finally:
                os.close(fd)
        usage = {
            "input_tokens": INPUT_TOKENS,
            "output_tokens": OUTPUT_TOKENS,
            "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS,
        }
        message = AIMessage(
            content=text,
            usage_metadata=usage,
            response_metadata={"model_name": self.model_name},  # type: ignore[arg-type]
        )
        return message


class State(TypedDict, total=False):
    steps: int  # model steps to take
    calls: int  # model calls per step
    done: int
    answers: Annotated[list[str], operator.add]


def think(state: State) -> State:
    model = FakeUsageModel()
    n = state.get("done", 0)
    answers = [str(model.invoke(f"step {n} call {i}").content) for i in range(state.get("calls", 1))]
    return {"done": n + 1, "answers": answers}


async def athink(state: State) -> State:
    """``think`` with ``await model.ainvoke``: the graph is driven with astream (agent_worker.drive)."""
    model = FakeUsageModel()
    n = state.get("done", 0)
    answers = []
    for i in range(state.get("calls", 1)):
        answers.append(str((await model.ainvoke(f"step {n} call {i}")).content))
    return {"done": n + 1, "answers": answers}


def _more(state: State) -> str:
    return "think" if state.get("done", 0) < state.get("steps", 1) else END


def _build(node: Any = think) -> StateGraph[State]:
    g: StateGraph[State] = StateGraph(State)
    g.add_node("think", node)
    g.add_edge(START, "think")
    g.add_conditional_edges("think", _more, ["think", END])
    return g


graph = _build()
async_graph = _build(athink)  # tests.graphs.budget_graphs:async_graph
