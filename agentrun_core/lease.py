"""The run's Kubernetes Lease: acquisition by compare-and-swap, background renewal, release, fencing epoch.

One ``LeaseKeeper`` per worker attempt::

    keeper = lease.LeaseKeeper(api, lease.LeaseConfig(namespace, name, holder=pod_name), on_lost=...)
    epoch = keeper.acquire(wait_seconds=30)   # the fencing token, written to agentrun_runs.lease_epoch
    keeper.start()                            # renews every duration/3 from a background thread
    ... before each effect: keeper.check()    # raises LeaseLost when may_act() is False
    keeper.release()                          # on park / finish: clear holderIdentity by CAS

Every write is a PUT carrying the ``resourceVersion`` last read, so the API server refuses it (409) if
anyone else wrote in between: two keepers can never both believe their write took the Lease. Expiry of
somebody else's Lease is judged by ``lease_math.LeaseObserver`` (locally observed time, never the holder's
clock). See docs/leases.md for the safety argument.

Renewal runs in a ``threading.Thread``, not on the event loop and not on the main thread, so a tool that
blocks either (a synchronous HTTP call, a CPU-bound loop) cannot starve it. Pure-Python code releases the GIL
every few milliseconds; only a C extension holding the GIL for longer than the renew deadline could.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import kubernetes.client

from agentrun_core import faults, kube, lease_math

logger = logging.getLogger(__name__)


class LeaseError(Exception):
    """Base of the lease errors."""


class LeaseHeld(LeaseError):
    """``acquire`` timed out: somebody else holds the Lease and keeps renewing it."""

    def __init__(self, message: str, holder: str) -> None:
        super().__init__(message)
        self.holder = holder


class LeaseLost(LeaseError):
    """We no longer hold the Lease (another holder, deleted, renewals failing past the deadline, released)."""


@dataclasses.dataclass(frozen=True)
class LeaseConfig:
    namespace: str
    name: str  # agentrun-<run name>
    holder: str  # holderIdentity: the pod name; must be unique per process that may hold the Lease
    duration_seconds: int = 15  # leaseDurationSeconds; renew every 1/3, stop acting at 2/3
    owner: dict[str, Any] | None = None  # an ownerReference (the AgentRun), set on create
    labels: dict[str, str] | None = None  # e.g. {"agentrun.dev/run": name}, set on create


class LeaseKeeper:
    """Holds one Lease for one process. Thread-safe: ``may_act``/``check`` may be called from any thread."""

    def __init__(
        self,
        api: kubernetes.client.ApiClient,
        config: LeaseConfig,
        on_lost: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        *,
        on_renewed: Callable[[], None] | None = None,
    ) -> None:
        self.api = api
        self.config = config
        self.on_lost = on_lost
        self.on_renewed = on_renewed  # heartbeat hook; runs on its own thread, after each renewal
        self.clock = clock
        self._lock = threading.Lock()
        self._body: kube.LeaseBody | None = None  # last version we wrote or confirmed as ours
        self._epoch: int | None = None
        self._last_renewed: float | None = None  # monotonic start of the last successful write
        self._lost: str | None = None
        self._released = False
        self._renewals = 0
        self._stop = threading.Event()
        self._renewed = threading.Event()
        self._thread: threading.Thread | None = None
        self._hook_thread: threading.Thread | None = None

    # --- properties ------------------------------------------------------------------------------------

    @property
    def duration(self) -> float:
        return float(self.config.duration_seconds)

    @property
    def timeout(self) -> float:
        return lease_math.request_timeout(self.duration)

    @property
    def epoch(self) -> int:
        """The fencing token: ``leaseTransitions`` right after our acquisition."""
        if self._epoch is None:
            raise LeaseError("the lease was never acquired")
        return self._epoch

    @property
    def renewals(self) -> int:
        """Successful renewals since acquisition (not counting the acquisition itself)."""
        return self._renewals

    @property
    def last_renewed(self) -> float | None:
        """Monotonic time at which the last successful write (acquisition or renewal) was sent."""
        return self._last_renewed

    @property
    def lost_reason(self) -> str | None:
        return self._lost

    # --- acquisition ----------------------------------------------------------------------------------

    def acquire(self, wait_seconds: float, *, min_epoch: int = 0) -> int:
        """Take the Lease, waiting up to ``wait_seconds`` for it to be free or expire; return the epoch.

        Taken when absent (create), free, already ours, or expired by our own observation. The epoch is
        never below ``min_epoch`` (pass the run's stored epoch + 1 so even a re-created Lease or an
        "already ours" take yields a fresh token). Raises ``LeaseHeld`` on timeout, ``LeaseError`` when
        the API server stayed unreachable.
        """
        deadline = self.clock() + wait_seconds
        observer = lease_math.LeaseObserver(default_duration_seconds=self.duration)
        last_error: Exception | None = None
        while True:
            try:
                got = self._try_acquire(observer, min_epoch)
            except kube.Conflict as exc:  # raced with another writer: re-read at once
                last_error = exc
                got = None
                delay = 0.0
            except kube.KubeError as exc:  # unreachable, forbidden, ...: retry until the deadline
                last_error = exc
                got = None
                delay = lease_math.retry_delay(self.duration)
            else:
                delay = self._wait_delay(observer)
            if got is not None:
                return got
            now = self.clock()
            if now >= deadline:
                last = observer.last
                if last is not None and not last.free:
                    raise LeaseHeld(
                        f"lease {self.config.namespace}/{self.config.name} is held by {last.holder!r}"
                        f" (observed unchanged for {observer.unchanged_for(now):.1f}s"
                        f" of its {observer.duration():g}s)",
                        holder=last.holder,
                    )
                raise LeaseError(f"could not acquire lease {self.config.name}: {last_error}")
            time.sleep(max(0.0, min(delay, deadline - now)))

    def _wait_delay(self, observer: lease_math.LeaseObserver) -> float:
        poll = lease_math.poll_interval(observer.duration())
        left = observer.expires_in(self.clock())
        # Wake just after the observer would call it expired, or at the next poll, whichever is first.
        return poll if left is None else min(poll, left + 0.01)

    def _try_acquire(self, observer: lease_math.LeaseObserver, min_epoch: int) -> int | None:
        cfg = self.config
        try:
            current: kube.LeaseBody | None = kube.get_lease(
                self.api, cfg.namespace, cfg.name, timeout=self.timeout
            )
        except kube.NotFound:
            current = None
        summary = lease_math.LeaseSummary.from_body(current) if current is not None else None
        state = observer.observe(summary, self.clock())
        if summary is not None and state == lease_math.LeaseState.HELD and summary.holder != cfg.holder:
            return None
        transitions = lease_math.next_transitions(summary, cfg.holder, min_epoch)
        now_text = kube.micro_time()
        started = self.clock()
        if current is None:
            metadata: dict[str, Any] = {"name": cfg.name}
            if cfg.labels:
                metadata["labels"] = dict(cfg.labels)
            if cfg.owner:
                metadata["ownerReferences"] = [dict(cfg.owner)]
            body = {"metadata": metadata, "spec": self._spec(transitions, now_text, now_text)}
            written = kube.create_lease(self.api, cfg.namespace, body, timeout=self.timeout)
        else:
            body = copy.deepcopy(current)  # keeps metadata.resourceVersion: the CAS
            spec = body.get("spec") or {}
            acquire_time = spec.get("acquireTime") if summary and summary.holder == cfg.holder else None
            body["spec"] = {**spec, **self._spec(transitions, acquire_time or now_text, now_text)}
            try:
                written = kube.replace_lease(self.api, cfg.namespace, cfg.name, body, timeout=self.timeout)
            except kube.NotFound:
                return None  # deleted between our read and write: start over
        with self._lock:
            self._body = written
            self._epoch = lease_math.LeaseSummary.from_body(written).transitions
            self._last_renewed = started
            self._lost = None
            self._released = False
        logger.info("lease %s/%s acquired by %s, epoch %d", cfg.namespace, cfg.name, cfg.holder, self._epoch)
        return self._epoch

    def _spec(self, transitions: int, acquire_time: str, renew_time: str) -> dict[str, Any]:
        return {
            "holderIdentity": self.config.holder,
            "leaseDurationSeconds": self.config.duration_seconds,
            "acquireTime": acquire_time,
            "renewTime": renew_time,
            "leaseTransitions": transitions,
        }

    # --- acting under the lease ------------------------------------------------------------------------

    def may_act(self) -> bool:
        """False once the renew deadline passed since the last successful renewal, or the Lease is lost."""
        with self._lock:
            if self._lost is not None or self._released:
                return False
            return lease_math.may_act(self._last_renewed, self.clock(), self.duration)

    def check(self) -> None:
        """Raise ``LeaseLost`` unless we may act right now (call before every effect)."""
        with self._lock:
            lost, released, last = self._lost, self._released, self._last_renewed
        if lost is not None:
            raise LeaseLost(lost)
        if released:
            raise LeaseLost("the lease was released")
        if last is None:
            raise LeaseLost("the lease was never acquired")
        if not lease_math.may_act(last, self.clock(), self.duration):
            raise LeaseLost(
                f"no successful renewal for {self.clock() - last:.1f}s"
                f" (renew deadline {lease_math.renew_deadline(self.duration):.1f}s)"
            )

    # --- renewal thread -------------------------------------------------------------------------------

    def start(self) -> None:
        """Start renewing in the background (after ``acquire``)."""
        if self._epoch is None:
            raise LeaseError("start() before acquire()")
        if self._thread is not None:
            return
        self._stop.clear()
        self._renewed.clear()
        self._thread = threading.Thread(
            target=self._renew_loop, name=f"lease-renew-{self.config.name}", daemon=True
        )
        self._thread.start()
        if self.on_renewed is not None:
            self._hook_thread = threading.Thread(
                target=self._hook_loop, name=f"lease-heartbeat-{self.config.name}", daemon=True
            )
            self._hook_thread.start()

    def _renew_loop(self) -> None:
        interval = lease_math.renew_interval(self.duration)
        delay = interval
        while not self._stop.wait(max(0.0, delay)):
            faults.hit("before_lease_renew")
            started = self.clock()
            outcome = self._renew_once(started)
            if outcome is None:  # renewed
                delay = interval - (self.clock() - started)
                continue
            with self._lock:
                last = self._last_renewed
            if outcome.startswith("lost:"):
                self._mark_lost(outcome[len("lost:") :])
                return
            assert last is not None
            if lease_math.presumed_lost(last, self.clock(), self.duration):
                self._mark_lost(f"no successful renewal for a full lease duration; last error: {outcome}")
                return
            delay = lease_math.retry_delay(self.duration)

    def _renew_once(self, started: float) -> str | None:
        """One CAS renewal. None on success, "lost:<why>" when deposed, else the transient error text."""
        cfg = self.config
        with self._lock:
            if self._body is None:
                return "lost:no lease body"
            body = copy.deepcopy(self._body)
        body.setdefault("spec", {})["renewTime"] = kube.micro_time()
        try:
            written = kube.replace_lease(self.api, cfg.namespace, cfg.name, body, timeout=self.timeout)
        except kube.NotFound:
            return "lost:the Lease was deleted"
        except kube.Conflict:
            # Somebody wrote since our version. Still ours (a label edit?) → adopt and retry; else deposed.
            try:
                current = kube.get_lease(self.api, cfg.namespace, cfg.name, timeout=self.timeout)
            except kube.NotFound:
                return "lost:the Lease was deleted"
            except kube.KubeError as exc:
                return f"conflict, then re-read failed: {exc}"
            summary = lease_math.LeaseSummary.from_body(current)
            if summary.holder == cfg.holder and summary.transitions == self._epoch:
                with self._lock:
                    self._body = current
                return "conflict with a write that kept us as holder; retrying"
            return f"lost:the Lease is now held by {summary.holder!r} at epoch {summary.transitions}"
        except kube.KubeError as exc:
            logger.warning("lease %s/%s renewal failed: %s", cfg.namespace, cfg.name, exc)
            return str(exc)
        with self._lock:
            if self._lost is not None or self._released:
                return None
            self._body = written
            self._last_renewed = started
            self._renewals += 1
        self._renewed.set()
        return None

    def _hook_loop(self) -> None:
        # Coalescing: a slow heartbeat write skips renewals instead of queueing them or delaying renewal.
        assert self.on_renewed is not None
        # ``_halt`` sets ``_renewed`` as well as ``_stop``, so this wait needs no timeout: release() used to
        # wait for a 0.5 s poll here, on every attempt's exit path.
        while not self._stop.is_set():
            self._renewed.wait()
            self._renewed.clear()
            if self._stop.is_set():
                return
            try:
                self.on_renewed()
            except Exception:
                logger.exception("lease on_renewed hook failed")

    def _mark_lost(self, reason: str) -> None:
        with self._lock:
            if self._lost is not None or self._released:
                return
            self._lost = reason
        self._halt()  # ends the heartbeat thread too
        logger.error("lease %s/%s lost: %s", self.config.namespace, self.config.name, reason)
        if self.on_lost is not None:
            try:
                self.on_lost(reason)
            except Exception:
                logger.exception("lease on_lost callback failed")

    def _halt(self) -> None:
        """Tell both threads to stop, waking the heartbeat thread from its wait at once."""
        self._stop.set()
        self._renewed.set()

    def stop(self) -> None:
        """Stop the background threads (without releasing)."""
        self._halt()
        for thread in (self._thread, self._hook_thread):
            if thread is not None and thread is not threading.current_thread():
                thread.join(timeout=self.timeout * 2 + 1)
        self._thread = self._hook_thread = None

    # --- release --------------------------------------------------------------------------------------

    def release(self) -> bool:
        """Stop renewing and clear ``holderIdentity`` by CAS, only if still ours. True if released.

        Best effort: if the API server is unreachable the Lease simply expires. ``leaseTransitions`` is
        kept, so the next holder's epoch is higher than ours.
        """
        with self._lock:
            self._released = True  # may_act() is False from here on
            lost = self._lost
        self.stop()
        if lost is not None or self._body is None:
            return False
        cfg = self.config
        body = copy.deepcopy(self._body)
        for _ in range(3):
            spec = body.setdefault("spec", {})
            spec["holderIdentity"] = ""
            spec["renewTime"] = kube.micro_time()
            try:
                kube.replace_lease(self.api, cfg.namespace, cfg.name, body, timeout=self.timeout)
            except kube.Conflict:
                try:
                    body = kube.get_lease(self.api, cfg.namespace, cfg.name, timeout=self.timeout)
                except kube.KubeError:
                    return False
                summary = lease_math.LeaseSummary.from_body(body)
                if summary.holder != cfg.holder or summary.transitions != self._epoch:
                    return False  # somebody else's now: nothing of ours to release
                continue
            except kube.KubeError as exc:
                logger.warning("lease %s/%s release failed: %s", cfg.namespace, cfg.name, exc)
                return False
            logger.info("lease %s/%s released by %s", cfg.namespace, cfg.name, cfg.holder)
            return True
        return False
