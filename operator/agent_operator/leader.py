"""Leader election with one ``coordination.k8s.io/v1`` Lease (not kopf peering).

Only the leader runs kopf's watchers and handlers; standby replicas wait in ``acquire``. A standby takes
the Lease when it is free (released by a leader that shut down cleanly: failover at once) or when it has
seen it unchanged for a full lease duration by its own monotonic clock (``lease_math.LeaseObserver``:
no comparison of clocks across machines). The leader renews every third of the duration and exits the
process when it cannot renew within the renew deadline (two thirds): by then a standby may take over, and
a deposed leader must not reconcile a moment longer. Exiting, rather than "stepping down", leaves no
half-stopped kopf state behind; the Deployment restarts the process as a standby.

Renewal runs on a thread of its own (``Keeper``), never on the event loop's thread pool: reconciles that
block in Postgres or the API server fill that pool, and a renewal queued behind them would miss its deadline
although nothing is wrong with this replica. One renewal is bounded: a conflict is re-read and retried a
few times (someone edited a label), never recursively without end. ``may_act()`` says whether this replica
is still within its renew deadline; the runner checks it before every status write.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from agent_operator import kube
from agent_operator import settings as settings_
from agentrun_core import lease_math

logger = logging.getLogger(__name__)

EXIT_LEADERSHIP_LOST = 3
RENEW_CONFLICT_RETRIES = 3  # re-reads after a 409 within one renewal (a label edit, not another holder)


class Elector:
    def __init__(self, api: kube.ApiClient, cfg: settings_.LeaderSettings) -> None:
        self.api = api
        self.cfg = cfg
        self.observer = lease_math.LeaseObserver(cfg.duration_seconds)
        self.last_renewed_at: float | None = None  # monotonic start of the last successful write
        self._body: dict[str, Any] | None = None

    @property
    def identity(self) -> str:
        return self.cfg.identity

    def _spec(self, transitions: int, acquire: bool) -> dict[str, Any]:
        now = kube.micro_time()
        spec: dict[str, Any] = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.cfg.duration_seconds)),
            "renewTime": now,
            "leaseTransitions": transitions,
        }
        if acquire:
            spec["acquireTime"] = now
        elif self._body is not None:
            spec["acquireTime"] = (self._body.get("spec") or {}).get("acquireTime", now)
        return spec

    def try_acquire(self) -> bool:
        """One attempt (sync). True when this process holds the Lease afterwards."""
        timeout = lease_math.request_timeout(self.cfg.duration_seconds)
        started = time.monotonic()
        try:
            body = kube.get_lease(self.api, self.cfg.namespace, self.cfg.name, timeout=timeout)
        except kube.NotFound:
            try:
                self._body = kube.create_lease(
                    self.api,
                    self.cfg.namespace,
                    {
                        "metadata": {
                            "name": self.cfg.name,
                            "namespace": self.cfg.namespace,
                            "labels": {"app.kubernetes.io/name": "agentrun-operator"},
                        },
                        "spec": self._spec(1, acquire=True),
                    },
                    timeout=timeout,
                )
            except kube.AlreadyExists:
                return False
            self.last_renewed_at = started
            return True
        summary = lease_math.LeaseSummary.from_body(body)
        state = self.observer.observe(summary, time.monotonic())
        if summary.holder != self.identity and state == lease_math.LeaseState.HELD:
            return False
        transitions = lease_math.next_transitions(summary, self.identity)
        new = {"metadata": body["metadata"], "spec": self._spec(transitions, acquire=True)}
        try:
            self._body = kube.replace_lease(self.api, self.cfg.namespace, self.cfg.name, new, timeout=timeout)
        except (kube.Conflict, kube.NotFound):
            return False
        self.last_renewed_at = started
        if summary.holder and summary.holder != self.identity:
            logger.warning("took over leadership from %s (its Lease expired)", summary.holder)
        return True

    def renew(self) -> bool:
        """Renew (sync). False when someone else holds the Lease now; raises ``KubeError`` when it could not
        tell (unreachable, or conflicting more than ``RENEW_CONFLICT_RETRIES`` times in a row)."""
        timeout = lease_math.request_timeout(self.cfg.duration_seconds)
        for _ in range(RENEW_CONFLICT_RETRIES + 1):
            started = time.monotonic()
            body = self._body
            if body is None:
                return False
            spec = body.get("spec") or {}
            new = {
                "metadata": body["metadata"],
                "spec": self._spec(int(spec.get("leaseTransitions") or 1), False),
            }
            try:
                self._body = kube.replace_lease(
                    self.api, self.cfg.namespace, self.cfg.name, new, timeout=timeout
                )
            except kube.Conflict:
                current = kube.get_lease(self.api, self.cfg.namespace, self.cfg.name, timeout=timeout)
                if (current.get("spec") or {}).get("holderIdentity") != self.identity:
                    return False
                self._body = current  # our own Lease, written by someone else (labels): retry on its version
                continue
            except kube.NotFound:
                return False
            self.last_renewed_at = started
            return True
        raise kube.Conflict(f"leader Lease renewal conflicted {RENEW_CONFLICT_RETRIES + 1} times in a row")

    def may_act(self) -> bool:
        """Still within the renew deadline of the last successful renewal (by our monotonic clock)."""
        return lease_math.may_act(self.last_renewed_at, time.monotonic(), self.cfg.duration_seconds)

    def release(self) -> None:
        """Clear ``holderIdentity`` so a standby takes over without waiting for expiry."""
        body = self._body
        if body is None:
            return
        spec = dict(body.get("spec") or {})
        if spec.get("holderIdentity") != self.identity:
            return
        spec["holderIdentity"] = ""
        spec["renewTime"] = kube.micro_time()
        try:
            kube.replace_lease(
                self.api,
                self.cfg.namespace,
                self.cfg.name,
                {"metadata": body["metadata"], "spec": spec},
                timeout=2.0,
            )
            logger.info("released leadership Lease %s/%s", self.cfg.namespace, self.cfg.name)
        except kube.KubeError as exc:
            logger.warning("could not release the leadership Lease: %s", exc)
        self._body = None


async def acquire(elector: Elector) -> None:
    """Wait until this process is the leader."""
    announced = False
    while True:
        try:
            if await asyncio.to_thread(elector.try_acquire):
                logger.info(
                    "leader: %s holds Lease %s/%s", elector.identity, elector.cfg.namespace, elector.cfg.name
                )
                return
        except kube.KubeError as exc:
            logger.warning("leader election: %s", exc)
        if not announced:
            logger.info(
                "standby: %s waits for Lease %s/%s", elector.identity, elector.cfg.namespace, elector.cfg.name
            )
            announced = True
        await asyncio.sleep(lease_math.poll_interval(elector.cfg.duration_seconds))


class Keeper:
    """Renews on its own daemon thread; calls ``on_lost`` (default: exit the process) when leadership is
    lost: another holder, or no successful renewal within the renew deadline."""

    def __init__(self, elector: Elector, on_lost: Callable[[Elector, str], None] | None = None) -> None:
        self.elector = elector
        self.on_lost = on_lost or _lost
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="leader-renewal", daemon=True)

    def start(self) -> Keeper:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=lease_math.request_timeout(self.elector.cfg.duration_seconds) * 2 + 1)

    def _run(self) -> None:
        elector, duration = self.elector, self.elector.cfg.duration_seconds
        while not self.stopped.wait(lease_math.renew_interval(duration)):
            while True:
                try:
                    if elector.renew():
                        break
                    self.on_lost(elector, "another replica holds the Lease")
                    return
                except kube.KubeError as exc:
                    logger.warning("leader: renewal failed: %s", exc)
                if not elector.may_act():
                    self.on_lost(elector, "no successful renewal within the renew deadline")
                    return
                if self.stopped.wait(lease_math.retry_delay(duration)):
                    return


def _lost(elector: Elector, why: str) -> None:
    logger.critical("leadership lost (%s): exiting so that only one replica reconciles", why)
    logging.shutdown()
    os._exit(EXIT_LEADERSHIP_LOST)
