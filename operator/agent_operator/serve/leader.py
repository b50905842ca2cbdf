"""Leader election with one ``coordination.k8s.io/v1`` Lease (not kopf peering), on the shared Lease engine.

The Lease itself is held by ``agentrun_core.lease.LeaseKeeper``, the same engine the worker holds its run's
Lease with (compare-and-swap writes, expiry by locally observed time, renewal on its own thread). This module
keeps only what is the operator's: the standby wait on kopf's event loop, the leader Lease's identity and
labels, and exiting the process when leadership is lost.

Only the leader runs kopf's watchers and handlers; standby replicas wait in ``acquire``. A standby takes
the Lease when it is free (released by a leader that shut down cleanly: failover at once) or when it has
seen it unchanged for a full lease duration by its own monotonic clock (``lease_math.LeaseObserver``:
no comparison of clocks across machines). The leader renews every third of the duration and exits the
process when it cannot renew within the renew deadline (two thirds, ``lost_at_deadline``): by then a standby
may take over, and a deposed leader must not reconcile a moment longer. Exiting, rather than "stepping
down", leaves no half-stopped kopf state behind; the Deployment restarts the process as a standby.

Renewal runs on the engine's thread, never on the event loop's thread pool: reconciles that block in
Postgres or the API server fill that pool, and a renewal queued behind them would miss its deadline although
nothing is wrong with this replica. ``may_act()`` says whether this replica is still within its renew
deadline; the runner checks it before every status write.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable

from agent_operator import settings as settings_
from agentrun_core import kube, lease, lease_math

logger = logging.getLogger(__name__)

EXIT_LEADERSHIP_LOST = 3
RELEASE_TIMEOUT = 2.0  # seconds per request of the release at shutdown
LABELS = {"app.kubernetes.io/name": "agentrun-operator"}


class Elector:
    """This replica's hold on the leader Lease: one engine keeper, acquired by ``acquire``."""

    def __init__(self, api: lease.ApiClient, cfg: settings_.LeaderSettings) -> None:
        self.cfg = cfg
        self.keeper = lease.LeaseKeeper(
            api,
            lease.LeaseConfig(
                namespace=cfg.namespace,
                name=cfg.name,
                holder=cfg.identity,
                duration_seconds=cfg.duration_seconds,
                labels=dict(LABELS),
            ),
            lost_at_deadline=True,
        )

    @property
    def identity(self) -> str:
        return self.cfg.identity

    def try_acquire(self) -> bool:
        """One attempt (sync). True when this process holds the Lease afterwards. Raises ``kube.Conflict``
        when another replica wrote first, ``kube.KubeError`` when the API server could not be asked."""
        if self.keeper.try_acquire() is None:
            return False
        previous = self.keeper.observer.last  # what we read, then took over
        if previous is not None and previous.holder and previous.holder != self.identity:
            logger.warning("took over leadership from %s (its Lease expired)", previous.holder)
        return True

    def may_act(self) -> bool:
        """Still within the renew deadline of the last successful renewal (by our monotonic clock)."""
        return self.keeper.may_act()

    def release(self) -> None:
        """Clear ``holderIdentity`` so a standby takes over without waiting for expiry."""
        # 2 s per request, as before the shared engine: with a short leader Lease (tests use 4 s) the
        # renewal timeout is under a second, and a release that times out makes the standby wait for expiry.
        if self.keeper.release(timeout=RELEASE_TIMEOUT):
            logger.info("released leadership Lease %s/%s", self.cfg.namespace, self.cfg.name)


async def acquire(elector: Elector) -> None:
    """Wait until this process is the leader.

    One attempt at a time on a worker thread, the waiting on the event loop: a standby stopped meanwhile
    (SIGTERM) is cancelled here at once instead of leaving a thread blocked in a long ``LeaseKeeper.acquire``.
    """
    announced = False
    while True:
        try:
            if await asyncio.to_thread(elector.try_acquire):
                logger.info(
                    "leader: %s holds Lease %s/%s", elector.identity, elector.cfg.namespace, elector.cfg.name
                )
                return
        except kube.Conflict:
            pass  # another replica wrote first: it leads, or the next attempt sees why not
        except kube.KubeError as exc:
            logger.warning("leader election: %s", exc)
        if not announced:
            logger.info(
                "standby: %s waits for Lease %s/%s", elector.identity, elector.cfg.namespace, elector.cfg.name
            )
            announced = True
        await asyncio.sleep(lease_math.poll_interval(elector.cfg.duration_seconds))


class Keeper:
    """Renews the leader Lease on the engine's daemon thread; calls ``on_lost`` (default: exit the process)
    when leadership is lost: another holder, the Lease deleted, or no successful renewal within the renew
    deadline."""

    def __init__(self, elector: Elector, on_lost: Callable[[Elector, str], None] | None = None) -> None:
        self.elector = elector
        self.on_lost = on_lost or _lost
        elector.keeper.on_lost = lambda why: self.on_lost(elector, why)

    def start(self) -> Keeper:
        self.elector.keeper.start()
        return self

    def stop(self) -> None:
        self.elector.keeper.stop()


def _lost(elector: Elector, why: str) -> None:
    logger.critical("leadership lost (%s): exiting so that only one replica reconciles", why)
    logging.shutdown()
    os._exit(EXIT_LEADERSHIP_LOST)
