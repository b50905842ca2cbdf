"""Example graphs shipped with agentrun (the support-ticket demo)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def lazy_graph(module: str, build: Callable[[], Any]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that builds ``graph`` when it is asked for: importing an example's package
    imports no LangChain until a worker resolves its graph reference (``package:graph``)."""

    def __getattr__(name: str) -> Any:
        if name == "graph":
            return build()
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__
