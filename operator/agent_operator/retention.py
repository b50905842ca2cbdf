"""Retention: the leader folds final runs into the metric rollups and purges runs whose AgentRun is gone, in
bounded batches, on a thread of its own.

A run is marked (``store.mark_for_purge``) when ``ttlSecondsAfterFinished`` deletes its AgentRun (purged at
once) and when its finalizer completes after any other delete (purged after ``AGENTRUN_RETENTION_SECONDS``,
so ``agentrun ledger`` still answers for a while). Each batch is one statement; a batch that comes back full
is followed by the next one at once, so a backlog of 10,000 runs drains in a few seconds without one huge
transaction. Errors are logged and retried at the next interval (Postgres may be restarting).

Folding (migration 0013) comes first at each interval: every final run's contribution to the collector's
counters and histograms moves into ``agentrun_metric_rollups`` (and folded_at is set) in one transaction per
batch, so a scrape aggregates only the runs not folded yet. A purge folds what is still unfolded in its own
transaction, so it never lowers a counter even when it runs before the fold.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from agentrun_core import store

logger = logging.getLogger(__name__)


class Purger:
    def __init__(self, db: Any, *, interval_seconds: float, batch: int,
                 after_purge: Callable[[], object] | None = None) -> None:
        self.db = db
        # Run after each purge pass (the operator drops the worker roles of namespaces gone and purged).
        self.after_purge = after_purge
        self.interval = max(0.1, interval_seconds)
        self.batch = max(1, batch)
        self.stopped = threading.Event()
        self.purged = 0
        self.folded = 0
        self.thread = threading.Thread(target=self._run, name="retention-purger", daemon=True)

    def start(self) -> Purger:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=10)

    def fold_now(self) -> int:
        """Fold every final run not folded yet, batch after batch; how many were folded."""
        total = 0
        while not self.stopped.is_set():
            done = store.fold_runs(self.db, batch=self.batch)
            total += done
            if done < self.batch:
                break
        if total:
            logger.info("retention: folded %d final runs into the metric rollups", total)
        self.folded += total
        return total

    def purge_now(self) -> int:
        """Purge every due run, batch after batch; how many were purged."""
        total = 0
        while not self.stopped.is_set():
            done = store.purge_due(self.db, batch=self.batch)
            total += len(done)
            if len(done) < self.batch:
                break
        if total:
            logger.info("retention: purged %d runs (rows and checkpoints)", total)
        self.purged += total
        return total

    def _run(self) -> None:
        while not self.stopped.wait(self.interval):
            try:
                self.fold_now()
                self.purge_now()
                if self.after_purge is not None:
                    self.after_purge()
            except Exception as exc:  # the next interval retries
                logger.warning("retention: purge failed: %s: %s", type(exc).__name__, exc)
