"""agent_worker.store: the only module that runs SQL (see docs/design.md for the public functions)."""

from __future__ import annotations

from agent_worker.store.schema import migrate

__all__ = ["migrate"]
