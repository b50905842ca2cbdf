"""Worker heartbeats, and staleness judged by locally observed time.

The worker writes ``agentrun_heartbeats`` row ``worker`` after each Lease renewal (from the LeaseKeeper's
hook thread, so a blocked tool or event loop cannot starve it), with a sequence number in ``details``.
Observers never compare ``beat_at`` (another machine's clock) with their own clock: ``Observer`` remembers
when it first saw each sequence number and calls a key stale once that number has not changed for longer
than the threshold of the observer's own monotonic time.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from typing import Any

from agentrun_core import store

WORKER_KEY = "worker"


class WorkerBeat:
    """Callable for ``LeaseKeeper(on_renewed=...)``: one heartbeat row per renewal."""

    def __init__(self, conn: store.Conn, run_id: str, attempt: int, epoch: Callable[[], int]) -> None:
        self.conn = conn
        self.run_id = run_id
        self.attempt = attempt
        self.epoch = epoch
        self.step: str | None = None
        self._seq = itertools.count(1)

    def __call__(self) -> None:
        details = {"attempt": self.attempt, "epoch": self.epoch(), "step": self.step, "seq": next(self._seq)}
        store.heartbeat(self.conn, run_id=self.run_id, key=WORKER_KEY, details=details)


@dataclasses.dataclass
class _Seen:
    token: Any
    first_seen: float


class Observer:
    """Pure staleness tracking: feed it (key, token, now) observations; ask ``stale(key, now)``."""

    def __init__(self, threshold_seconds: float) -> None:
        self.threshold = threshold_seconds
        self._seen: dict[str, _Seen] = {}

    def observe(self, key: str, token: Any, now: float) -> None:
        seen = self._seen.get(key)
        if seen is None or seen.token != token:
            self._seen[key] = _Seen(token, now)

    def age(self, key: str, now: float) -> float | None:
        seen = self._seen.get(key)
        return None if seen is None else now - seen.first_seen

    def stale(self, key: str, now: float) -> bool:
        age = self.age(key, now)
        return age is not None and age > self.threshold
