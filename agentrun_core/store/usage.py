"""Model usage of runs (``agentrun_model_usage``, migration 30): what the worker counts against
``spec.budget``. Rows are written once per model call (a repeat of the same key is a no-op) and never
changed; sums are ``agentrun_core.budget.Usage``.
"""

from __future__ import annotations

from agentrun_core import budget
from agentrun_core.store import db


def record_model_usage(
    conn: db.Conn,
    *,
    run_id: str,
    call_key: str,
    attempt: int,
    step: str,
    model: str | None,
    usage: budget.Usage,
) -> bool:
    """Record one call's usage; False when a row of that key was already there (nothing changed)."""
    return (
        db.execute(
            conn,
            "record_model_usage",
            {
                "run_id": run_id,
                "call_key": call_key,
                "attempt": attempt,
                "step": step,
                "model": model,
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "total_tokens": usage.total_tokens,
                "cost_micro": usage.cost_micro,
            },
        )
        == 1
    )


def _usage(row: dict[str, object]) -> budget.Usage:
    return budget.Usage(
        int(row["input_tokens"] or 0),  # type: ignore[call-overload]
        int(row["output_tokens"] or 0),  # type: ignore[call-overload]
        int(row["total_tokens"] or 0),  # type: ignore[call-overload]
        int(row["cost_micro"] or 0),  # type: ignore[call-overload]
    )


def model_usage(conn: db.Conn, run_id: str) -> tuple[budget.Usage, int]:
    """(what the run spent, the number of calls counted)."""
    row = db.fetch_one(conn, "model_usage_total", {"run_id": run_id})
    if row is None:
        return budget.Usage(), 0
    return _usage(row), int(row["calls"])


def model_usage_by_step(conn: db.Conn, run_id: str) -> dict[tuple[int, str], tuple[budget.Usage, int]]:
    """(attempt, step as node:step) -> (what its model calls spent, how many), for the trace."""
    return {
        (int(r["attempt"]), str(r["step"])): (_usage(r), int(r["calls"]))
        for r in db.fetch_all(conn, "model_usage_by_step", {"run_id": run_id})
    }
