"""Retention: the leader folds final runs into the metric rollups and purges runs whose AgentRun is gone, in
bounded batches, on a thread of its own.

Rule: a run's rows go only once its AgentRun is gone from the API server. A run is marked
(``store.mark_for_purge``) by its finalizer (``handlers.run_deleted``), once its worker is gone: due at once
when ``ttlSecondsAfterFinished`` deleted it, else after ``AGENTRUN_RETENTION_SECONDS`` (``agentrun ledger``
still answers meanwhile) — ``purge_delay``. The object may outlive the mark (another finalizer holds it), so
before each pass with due runs the leader lists the AgentRuns of their namespaces (a fresh read: ``alive``)
and Postgres skips every run that still exists, and every run of a namespace that could not be listed. A
delete that is refused or fails marks nothing. Each batch is one statement; a batch that comes back full is
followed by the next one at once, so a backlog of 10,000 runs drains in a few seconds without one huge
transaction. Errors are logged and retried at the next interval (Postgres may be restarting).

Folding (migration 0013) comes first at each interval: every final run's contribution to the collector's
counters and histograms moves into ``agentrun_metric_rollups`` (and folded_at is set) in one transaction per
batch, so a scrape aggregates only the runs not folded yet. A purge folds what is still unfolded in its own
transaction, so it never lowers a counter even when it runs before the fold.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Collection, Mapping
from typing import Any

from agent_operator.act import periodic
from agent_operator.decide import phases
from agentrun_core import store
from agentrun_core.api import status as api_status

logger = logging.getLogger(__name__)

# A TTL delete is told apart from any other by the time since the run finished: this much clock skew (a
# finish only the operator recorded is judged on its own clock) still counts as TTL; more only keeps the run
# longer, never less.
TTL_SLACK_SECONDS = 30.0

# (uids of the AgentRuns that exist, namespaces that could not be listed) in the namespaces given.
Alive = Callable[[Collection[str]], tuple[set[str], set[str]]]


def purge_delay(
    body: Mapping[str, Any],
    finished_at: datetime.datetime | None,
    now: datetime.datetime,
    retention_seconds: float,
) -> tuple[float, str]:
    """(seconds, reason) after which a deleted run's rows are due: 0 ("ttl") when its
    ``ttlSecondsAfterFinished`` had passed since it finished, else ``retention_seconds`` ("deleted"). Pure.

    ``finished_at`` and ``now``: Postgres' (the clock the TTL was judged on, ``endings.finish``); a run
    Postgres shows unfinished (an outcome the operator decided) is judged by its status' completionTime
    against ``now`` (then the operator's clock, which wrote it)."""
    ttl = (body.get("spec") or {}).get("ttlSecondsAfterFinished")
    status = body.get("status") or {}
    if finished_at is None and status.get("phase") in api_status.FINAL_PHASES:
        finished_at = phases.parse_time(status.get("completionTime"))
    since = (now - finished_at).total_seconds() if finished_at is not None else None
    if ttl is not None and since is not None and since + TTL_SLACK_SECONDS >= float(ttl):
        return 0.0, "ttl"
    return retention_seconds, "deleted"


class Purger(periodic.Periodic):
    def __init__(
        self,
        db: Any,
        *,
        interval_seconds: float,
        batch: int,
        alive: Alive,
        after_purge: Callable[[], object] | None = None,
    ) -> None:
        super().__init__("retention-purger", max(0.1, interval_seconds))
        self.db = db
        self.alive = alive  # which AgentRuns exist now (a fresh list of the namespaces asked about)
        # Run after each purge pass (the operator drops the worker roles of namespaces gone and purged).
        self.after_purge = after_purge
        self.batch = max(1, batch)
        self.purged = 0
        self.folded = 0

    def fold_now(self) -> int:
        """Fold every final run not folded yet, batch after batch; how many were folded."""
        total = self._in_batches(lambda: store.fold_runs(self.db, batch=self.batch))
        if total:
            logger.info("retention: folded %d final runs into the metric rollups", total)
        self.folded += total
        return total

    def purge_now(self) -> int:
        """Purge every due run whose AgentRun is gone, batch after batch; how many were purged. The runs of a
        namespace whose AgentRuns cannot be listed are kept until a pass that can list them."""
        namespaces = store.purge_due_namespaces(self.db)
        if not namespaces:
            return 0
        alive, held = self.alive([ns for ns in namespaces if ns])
        if held:
            logger.warning("retention: cannot list the AgentRuns of %s; their runs are kept", ", ".join(held))
        total = self._in_batches(
            lambda: len(store.purge_due(self.db, batch=self.batch, alive=alive, held_namespaces=held))
        )
        if total:
            logger.info("retention: purged %d runs (rows and checkpoints)", total)
        self.purged += total
        return total

    def _in_batches(self, one_batch: Callable[[], int]) -> int:
        """Run ``one_batch`` (how many rows it handled) until one handles fewer than a batch, or the purger is
        stopped; how many in all."""
        total = 0
        while not self.stopped.is_set():
            done = one_batch()
            total += done
            if done < self.batch:
                break
        return total

    def tick(self) -> None:
        self.fold_now()
        self.purge_now()
        if self.after_purge is not None:
            self.after_purge()
