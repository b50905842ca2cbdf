"""A daemon thread that makes one pass every ``interval`` seconds until it is stopped: the shape of the
operator's background loops (the retention purger, the tenant lock watch).

A pass that raises is logged and the next interval tries again: what fails there is Postgres restarting or
unreachable, which a later pass outlives; the thread itself never dies of it.
"""

from __future__ import annotations

import logging
import threading
from typing import Self

logger = logging.getLogger(__name__)


class Periodic:
    def __init__(self, name: str, interval: float) -> None:
        self.interval = interval
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> Self:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()
        if self.thread.is_alive():  # never started: nothing to wait for
            self.thread.join(timeout=10)

    def tick(self) -> None:
        """One pass."""
        raise NotImplementedError

    def failed(self) -> None:
        """After a pass raised (logged already): drop what the failure may have broken."""

    def _run(self) -> None:
        while not self.stopped.wait(self.interval):
            try:
                self.tick()
            except Exception as exc:  # the next interval tries again
                logger.warning("%s: pass failed: %s: %s", self.thread.name, type(exc).__name__, exc)
                self.failed()
