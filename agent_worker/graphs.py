"""Loading a run's graph from ``package.module:attr`` and compiling it with our checkpointer.

``attr`` may be a compiled graph (``Pregel``), a ``StateGraph`` builder, or a zero-argument factory returning
either. A compiled graph is re-bound to our checkpointer with ``copy(update=...)`` rather than mutated: the
module-level object may be shared.
"""

from __future__ import annotations

import importlib
from typing import Any

from langgraph.graph import StateGraph
from langgraph.pregel import Pregel

from agent_worker import errors


def parse_ref(ref: str) -> tuple[str, str]:
    module, sep, attr = ref.partition(":")
    if not sep or not module or not attr or any(not p.isidentifier() for p in module.split(".")):
        raise errors.GraphLoadError(f"graph reference {ref!r} is not of the form package.module:attr")
    return module, attr


def load(ref: str) -> Any:
    """Import the object named by ``ref`` (clear ``GraphLoadError`` when it is not there)."""
    module_name, attr = parse_ref(ref)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise errors.GraphLoadError(f"graph reference {ref!r}: module {exc.name!r} not found") from exc
    except Exception as exc:
        raise errors.GraphLoadError(
            f"graph reference {ref!r}: importing {module_name} failed: {exc!r}"
        ) from exc
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise errors.GraphLoadError(
                f"graph reference {ref!r}: {module_name} has no attribute {attr!r}"
            ) from None
    return obj


def compile_graph(obj: Any, checkpointer: Any, *, ref: str = "?") -> Pregel[Any, Any, Any, Any]:
    """A compiled graph bound to ``checkpointer``."""
    if isinstance(obj, StateGraph):
        return obj.compile(checkpointer=checkpointer)
    if isinstance(obj, Pregel):
        return obj.copy(update={"checkpointer": checkpointer})
    if callable(obj):
        try:
            made = obj()
        except Exception as exc:
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
