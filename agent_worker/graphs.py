"""Loading a run's graph from ``package.module:attr`` and compiling it with our checkpointer.

``attr`` may be a compiled graph (``Pregel``), a ``StateGraph`` builder, or a zero-argument factory returning
either. A compiled graph is re-bound to our checkpointer with ``copy(update=...)`` rather than mutated: the
module-level object may be shared.

An import that fails *transiently* (``OSError``: a network filesystem, a timeout, a dependency that
connects at import) is retried with backoff before the run is failed as ``GraphLoadError`` (InvalidSpec,
final); a missing module or attribute, a syntax error, and ``SystemExit``/``KeyboardInterrupt`` raised by
the module or a factory are final at once — a graph reference must never end the worker with exit 0.
"""

from __future__ import annotations

import importlib
import logging
import sys
import time
from typing import Any

from langgraph.graph import StateGraph
from langgraph.pregel import Pregel

from agentrun_core import errors

logger = logging.getLogger(__name__)

IMPORT_RETRY_DELAYS = (0.5, 1.0, 2.0, 4.0)  # seconds between tries of a transiently failing import


def parse_ref(ref: str) -> tuple[str, str]:
    module, sep, attr = ref.partition(":")
    if not sep or not module or not attr or any(not p.isidentifier() for p in module.split(".")):
        raise errors.GraphLoadError(f"graph reference {ref!r} is not of the form package.module:attr")
    return module, attr


def load(ref: str) -> Any:
    """Import the object named by ``ref`` (clear ``GraphLoadError`` when it is not there)."""
    module_name, attr = parse_ref(ref)
    module = _import(ref, module_name)
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise errors.GraphLoadError(
                f"graph reference {ref!r}: {module_name} has no attribute {attr!r}"
            ) from None
    return obj


def _import(ref: str, module_name: str, sleep: Any = time.sleep) -> Any:
    for delay in (*IMPORT_RETRY_DELAYS, None):
        try:
            return importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            raise errors.GraphLoadError(f"graph reference {ref!r}: module {exc.name!r} not found") from exc
        except OSError as exc:  # transient by nature: try again before calling the spec invalid
            if delay is None:
                raise errors.GraphLoadError(
                    f"graph reference {ref!r}: importing {module_name} kept failing: {exc!r}"
                ) from exc
            logger.warning("importing %s failed (%r); retrying in %.1fs", module_name, exc, delay)
            sys.modules.pop(module_name, None)
            sleep(delay)
        except (Exception, SystemExit, KeyboardInterrupt) as exc:
            raise errors.GraphLoadError(
                f"graph reference {ref!r}: importing {module_name} failed: {exc!r}"
            ) from exc
    raise AssertionError("unreachable")


def compile_graph(obj: Any, checkpointer: Any, *, ref: str = "?") -> Pregel[Any, Any, Any, Any]:
    """A compiled graph bound to ``checkpointer``."""
    if isinstance(obj, StateGraph):
        return obj.compile(checkpointer=checkpointer)
    if isinstance(obj, Pregel):
        return obj.copy(update={"checkpointer": checkpointer})
    if callable(obj):
        try:
            made = obj()
        except (Exception, SystemExit) as exc:
            raise errors.GraphLoadError(f"graph reference {ref!r}: the factory raised {exc!r}") from exc
        if isinstance(made, StateGraph | Pregel):
            return compile_graph(made, checkpointer, ref=ref)
        raise errors.GraphLoadError(
            f"graph reference {ref!r}: the factory returned {type(made).__name__}, not a graph"
        )
    raise errors.GraphLoadError(
        f"graph reference {ref!r} is a {type(obj).__name__}: "
        "expected a compiled graph, a StateGraph or a factory"
    )


def needs_async(compiled: Any) -> bool:
    """Whether the graph, or a subgraph of it, has a node or a tool with only an async form (``async def``):
    such a graph runs only under LangGraph's async API (checked on langgraph 1.2: the sync stream raises)."""
    pregels = [compiled, *(sub for _, sub in compiled.get_subgraphs(recurse=True))]
    return any(_async_only(node.bound) for pregel in pregels for node in pregel.nodes.values())


def _async_only(runnable: Any, depth: int = 0) -> bool:
    if depth > 8:  # runnables nest shallowly; a cycle is not a graph we drive
        return False
    if getattr(runnable, "afunc", None) is not None and hasattr(runnable, "func") and runnable.func is None:
        return True  # LangGraph's RunnableCallable of an async def
    tools = getattr(runnable, "tools_by_name", None)  # a ToolNode (also create_agent's)
    if isinstance(tools, dict) and any(_async_tool(t) for t in tools.values()):
        return True
    steps = getattr(runnable, "steps", None)  # RunnableSeq / RunnableSequence
    return isinstance(steps, list | tuple) and any(_async_only(s, depth + 1) for s in steps)


def _async_tool(tool: Any) -> bool:
    """A LangChain tool that cannot run synchronously (``@tool`` on an ``async def``)."""
    return getattr(tool, "coroutine", None) is not None and getattr(tool, "func", True) is None
