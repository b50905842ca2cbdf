"""A run's timeline: ``agentrun_core.trace``, named here as the CLI has always imported it (the operator's
read API builds the same data, and the operator may not import the CLI)."""

from __future__ import annotations

from agentrun_core.trace import (
    Inputs,
    Rerun,
    arg_changes,
    build,
    effect_json,
    gather,
    lineage,
    reruns,
    step_usage,
    total_usage,
)

__all__ = [
    "Inputs",
    "Rerun",
    "arg_changes",
    "build",
    "effect_json",
    "gather",
    "lineage",
    "reruns",
    "step_usage",
    "total_usage",
]
