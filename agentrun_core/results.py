"""A finished run's result as Postgres keeps it and the AgentRun's status shows it.

Rule: a result whose JSON is at most ``RESULT_LIMIT_BYTES`` is kept whole; a larger one as a summary (its
size and its first ``PREVIEW_CHARS`` characters), both in ``agentrun_runs.result`` and in the status. The
whole is the state of the run's last checkpoint (``agentrun_runs.head_checkpoint_id``), which a finished run
keeps until retention purges it. Why not the whole in the run row too: a run's result is its graph's final
state, and for a long conversation that is every message again, stored a second time beside the checkpoint
that holds it (bench P5, 200-turn ``add_messages``, ``exit``: ~100 B per turn in the run row, as much as the
checkpoint), to be read by nothing but this summary.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

RESULT_LIMIT_BYTES = 8192  # of the result's JSON
PREVIEW_CHARS = 500


def summarise(result: Any, *, default: Callable[[Any], Any] = str) -> Any:
    """``result`` itself (as JSON, non-JSON leaves as ``default`` gives them) when small, else
    ``{"truncated": true, "bytes": n, "preview": ...}``; a summary of one is itself. One serialisation: the
    worker's final state may be a long conversation. A run row written before the worker summarised its
    result is summarised by the operator with this too."""
    if result is None:
        return None
    try:
        text = json.dumps(result, default=default)
    except (TypeError, ValueError):
        return {"summary": str(result)[:PREVIEW_CHARS]}
    if len(text) <= RESULT_LIMIT_BYTES:
        return json.loads(text)
    return {"truncated": True, "bytes": len(text), "preview": text[:PREVIEW_CHARS]}
