"""A callback handler attached to every LangChain run started while it is active: ``langchain_core``'s
configure hook (``register_configure_hook``), how the budget's ``Meter`` and the positions ``Tracker`` see
every LangGraph task, subgraph and tool run of the graph without the graph passing them.

Rule: one ``Hook`` per kind of handler, made once at import (LangChain keeps the hooks for the process);
``activate`` / ``deactivate`` bracket a graph run, as a context variable's ``set`` / ``reset`` do.
"""

from __future__ import annotations

import contextvars
from typing import Generic, TypeVar

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.tracers.context import register_configure_hook

H = TypeVar("H", bound=BaseCallbackHandler)


class Hook(Generic[H]):
    def __init__(self, name: str) -> None:
        self._active: contextvars.ContextVar[H | None] = contextvars.ContextVar(name, default=None)
        # inheritable: child callback managers (tasks, subgraphs, subgraph tasks) get the handler too.
        register_configure_hook(self._active, True)

    def activate(self, handler: H) -> contextvars.Token[H | None]:
        return self._active.set(handler)

    def deactivate(self, token: contextvars.Token[H | None]) -> None:
        self._active.reset(token)
