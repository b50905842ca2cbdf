"""The worker's error hierarchy. Each maps to one exit code of the worker pod contract (docs/design.md)."""

from __future__ import annotations


class WorkerError(Exception):
    """Base of the worker's own errors."""

    exit_code = 1


class ConfigError(WorkerError):
    """Bad environment / usage (exit 2)."""

    exit_code = 2


class RunNotFound(WorkerError):
    """No admission row for the run id: nothing may execute (exit 2: the pod was started wrongly)."""

    exit_code = 2


class GraphLoadError(WorkerError):
    """The run's graph reference cannot be loaded (exit 1, recorded as the run's error)."""

    exit_code = 1


class Fenced(WorkerError):
    """A write was refused because a newer epoch holds the run: this worker is deposed (exit 12)."""

    exit_code = 12

    def __init__(self, message: str, *, epoch: int | None = None, current_epoch: int | None = None) -> None:
        super().__init__(message)
        self.epoch = epoch
        self.current_epoch = current_epoch


class NeedsHuman(WorkerError):
    """An effect's outcome is unknown and nothing could reconcile it (exit 13): never guess."""

    exit_code = 13

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class ReadOnlyRun(WorkerError):
    """The run is read-only (approval deadline policy): a new effect was refused. Raised inside the graph."""

    exit_code = 1


class EffectFailed(WorkerError):
    """A tool failed for good (non-retryable or attempts exhausted); recorded ``failed`` in the ledger."""

    exit_code = 1
