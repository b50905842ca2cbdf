"""The worker's error hierarchy. Each maps to one exit code of the worker pod contract (docs/design.md).

Rule: the signals that must stop the run (``Fenced``, ``NeedsHuman``) derive from ``BaseException`` through
``ControlSignal``, so graph code's ``except Exception`` cannot swallow them and let the node "succeed" (its
checkpoint would then record the step as done without its effect). LangGraph 1.2 propagates a
``BaseException`` raised in a node out of ``stream``/``invoke`` without retrying it and without marking the
task done (checked for sync, async and exit durability, with and without a node RetryPolicy); the run
context also keeps the signal sticky (``RunContext.stop``) so every later ledger call re-raises it.
"""

from __future__ import annotations

from agentrun_core.api import protocol


class WorkerError(Exception):
    """Base of the worker's own errors."""

    exit_code = protocol.EXIT_FAILED


class ConfigError(WorkerError):
    """Bad environment / usage (exit 2)."""

    exit_code = protocol.EXIT_USAGE


class WorkerIncompatible(WorkerError):
    """This worker's code does not run against the database's schema (``agentrun_core.compat``): exit 15,
    before the Lease or any write; the operator keeps the run waiting."""

    exit_code = protocol.EXIT_INCOMPATIBLE


class RunNotFound(WorkerError):
    """No admission row for the run id: nothing may execute (exit 2: the pod was started wrongly)."""

    exit_code = protocol.EXIT_USAGE


class GraphLoadError(WorkerError):
    """The run's graph reference cannot be loaded (exit 1, recorded as the run's error)."""

    exit_code = protocol.EXIT_FAILED


class ControlSignal(BaseException):
    """Stops the run whatever graph code catches: not an ``Exception`` on purpose (see the module doc)."""

    exit_code = protocol.EXIT_FAILED


class Fenced(ControlSignal):
    """A write was refused because a newer epoch holds the run: this worker is deposed (exit 12)."""

    exit_code = protocol.EXIT_FENCED

    def __init__(self, message: str, *, epoch: int | None = None, current_epoch: int | None = None) -> None:
        super().__init__(message)
        self.epoch = epoch
        self.current_epoch = current_epoch


class NeedsHuman(ControlSignal):
    """An effect's outcome is unknown and nothing could reconcile it (exit 13): never guess."""

    exit_code = protocol.EXIT_NEEDS_HUMAN

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class ReadOnlyRun(WorkerError):
    """The run is read-only (approval deadline policy): a new effect was refused. Raised inside the graph."""

    exit_code = protocol.EXIT_FAILED


class EffectFailed(WorkerError):
    """A tool failed for good (non-retryable or attempts exhausted); recorded ``failed`` in the ledger."""

    exit_code = protocol.EXIT_FAILED


class ApprovalReused(WorkerError):
    """An interrupt asks for an approval id that is already decided: the run fails instead of reusing it."""


class TooManyInterrupts(WorkerError):
    """The graph stopped with several interrupts pending at once; agentrun asks one approval at a time."""
