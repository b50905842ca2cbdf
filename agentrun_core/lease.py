"""The one Lease engine: acquisition by compare-and-swap, renewal on a thread, release, fencing epoch.

Used by the worker for its run's Lease (``agent_worker.leasing``) and by the operator for leadership
(``agent_operator.serve.leader``). One ``LeaseKeeper`` per holder::

    keeper = lease.LeaseKeeper(api, lease.LeaseConfig(namespace, name, holder=pod_name), on_lost=...)
    epoch = keeper.acquire(wait_seconds=30)   # the fencing token, written to agentrun_runs.lease_epoch
    keeper.start()                            # renews every duration/3 from a background thread
    ... before each effect: keeper.check()    # raises LeaseLost when may_act() is False
    keeper.release()                          # on park / finish: clear holderIdentity by CAS

A waiter that must stay cancellable (the operator's standby, on its event loop) calls ``try_acquire()`` on
its own schedule instead of ``acquire``. The writes themselves, each one compare-and-swap step, are in
``agentrun_core.lease_cas``; this module owns state and time: the observer, the renew schedule, the loss
decision and ``may_act``. Expiry of somebody else's Lease is judged by ``lease_math.LeaseObserver``
(locally observed time, never the holder's clock). See docs/leases.md for the safety argument.

Renewal runs in a ``threading.Thread``, not on the event loop and not on the main thread, so a tool that
blocks either (a synchronous HTTP call, a CPU-bound loop) or reconciles that fill the operator's thread pool
cannot starve it. Pure-Python code releases the GIL every few milliseconds; only a C extension holding the
GIL for longer than the renew deadline could. A conflicting renewal is re-read once and retried on the
renew schedule, never recursively: the loss deadline bounds it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import kubernetes.client

from agentrun_core import faults, kube, lease_cas, lease_math

logger = logging.getLogger(__name__)

LeaseConfig = lease_cas.LeaseConfig  # the public name callers build; defined next to the writes it shapes
# The client a keeper is given (``kube.load_api_client``): named here so that its users (the operator) need
# not import the kubernetes package, which only the core may.
ApiClient = kubernetes.client.ApiClient


class LeaseError(Exception):
    """Base of the lease errors."""


class LeaseHeld(LeaseError):
    """``acquire`` timed out: somebody else holds the Lease and keeps renewing it."""

    def __init__(self, message: str, holder: str) -> None:
        super().__init__(message)
        self.holder = holder


class LeaseLost(LeaseError):
    """We no longer hold the Lease (another holder, deleted, renewals failing past the deadline, released)."""


class LeaseKeeper:
    """Holds one Lease for one process. Thread-safe: ``may_act``/``check`` may be called from any thread.

    ``lost_at_deadline`` chooses when failing renewals count as a loss. False (the worker): once a full
    duration passed without a successful renewal, since until then a renewal that gets through proves
    nobody took the Lease and acting resumes. True (the operator): as soon as ``may_act()`` turns False at
    the renew deadline, because its ``on_lost`` exits the process rather than idle half-stopped.
    """

    def __init__(
        self,
        api: ApiClient,
        config: LeaseConfig,
        on_lost: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        *,
        on_renewed: Callable[[], None] | None = None,
        lost_at_deadline: bool = False,
    ) -> None:
        self.api = api
        self.config = config
        self.on_lost = on_lost  # called once, from the renewal thread
        self.on_renewed = on_renewed  # heartbeat hook; runs on its own thread, after each renewal
        self.clock = clock
        self.lost_at_deadline = lost_at_deadline
        # What this process saw of the Lease, across the attempts of one acquisition (``acquire`` starts a
        # fresh one; a caller looping over ``try_acquire`` keeps it, so its expiry timer keeps running).
        self.observer = lease_math.LeaseObserver(default_duration_seconds=self.duration)
        self._lock = threading.Lock()
        self._body: kube.LeaseBody | None = None  # last version we wrote or confirmed as ours
        self._epoch: int | None = None
        self._last_renewed: float | None = None  # monotonic start of the last successful write
        # (renewTime sent, monotonic start) of the last renewal whose answer was lost: see _renew_once
        self._unconfirmed: tuple[str, float] | None = None
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

    # --- observation and acquisition --------------------------------------------------------------------

    def observe(self) -> tuple[kube.LeaseBody | None, lease_math.LeaseState]:
        """One read of the Lease, fed to ``observer``: the body (None when absent) and its state."""
        current = lease_cas.read(self.config, self.api, self.timeout)
        summary = lease_math.LeaseSummary.from_body(current) if current is not None else None
        return current, self.observer.observe(summary, self.clock())

    def acquire(self, wait_seconds: float, *, min_epoch: int = 0) -> int:
        """Take the Lease, waiting up to ``wait_seconds`` for it to be free or expire; return the epoch.

        Taken when absent (create), free, already ours, or expired by our own observation. The epoch is
        never below ``min_epoch`` (pass the run's stored epoch + 1 so even a re-created Lease or an
        "already ours" take yields a fresh token). Raises ``LeaseHeld`` on timeout, ``LeaseError`` when
        the API server stayed unreachable.
        """
        deadline = self.clock() + wait_seconds
        self.observer = lease_math.LeaseObserver(default_duration_seconds=self.duration)
        last_error: Exception | None = None
        while True:
            try:
                got = self.try_acquire(min_epoch=min_epoch)
            except kube.Conflict as exc:  # raced with another writer: re-read at once
                last_error = exc
                got = None
                delay = 0.0
            except kube.KubeError as exc:  # unreachable, forbidden, ...: retry until the deadline
                last_error = exc
                got = None
                delay = lease_math.retry_delay(self.duration)
            else:
                delay = self._wait_delay()
            if got is not None:
                return got
            now = self.clock()
            if now >= deadline:
                last = self.observer.last
                if last is not None and not last.free:
                    raise LeaseHeld(
                        f"lease {self.config.namespace}/{self.config.name} is held by {last.holder!r}"
                        f" (observed unchanged for {self.observer.unchanged_for(now):.1f}s"
                        f" of its {self.observer.duration():g}s)",
                        holder=last.holder,
                    )
                raise LeaseError(f"could not acquire lease {self.config.name}: {last_error}")
            time.sleep(max(0.0, min(delay, deadline - now)))

    def _wait_delay(self) -> float:
        poll = lease_math.poll_interval(self.observer.duration())
        left = self.observer.expires_in(self.clock())
        # Wake just after the observer would call it expired, or at the next poll, whichever is first.
        return poll if left is None else min(poll, left + 0.01)

    def try_acquire(self, *, min_epoch: int = 0) -> int | None:
        """One attempt: the epoch when we hold the Lease afterwards, None when somebody else holds it (or
        it vanished between read and write). Raises ``kube.Conflict`` when another writer won the race,
        ``kube.KubeError`` when the API server could not be asked."""
        cfg = self.config
        current, state = self.observe()
        summary = self.observer.last
        if summary is not None and state == lease_math.LeaseState.HELD and summary.holder != cfg.holder:
            return None
        transitions = lease_math.next_transitions(summary, cfg.holder, min_epoch)
        started = self.clock()
        written = lease_cas.take(cfg, self.api, current, transitions, self.timeout)
        if written is None:
            return None
        with self._lock:
            self._body = written
            self._epoch = lease_math.LeaseSummary.from_body(written).transitions
            self._last_renewed = started
            self._renewals = 0
            # A renewal answer lost under an earlier acquisition is no evidence about this one.
            self._unconfirmed = None
            self._lost = None
            self._released = False
        logger.info("lease %s/%s acquired by %s, epoch %d", cfg.namespace, cfg.name, cfg.holder, self._epoch)
        return self._epoch

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
            if outcome.written is not None:  # renewed
                delay = interval - (self.clock() - started)
                continue
            if outcome.lost is not None:
                self._mark_lost(outcome.lost)
                return
            with self._lock:
                last = self._last_renewed
            assert last is not None
            now = self.clock()
            if self.lost_at_deadline and not lease_math.may_act(last, now, self.duration):
                why = "no successful renewal within the renew deadline"
                self._mark_lost(f"{why}; last error: {outcome.error}")
                return
            if lease_math.presumed_lost(last, now, self.duration):
                why = "no successful renewal for a full lease duration"
                self._mark_lost(f"{why}; last error: {outcome.error}")
                return
            delay = lease_math.retry_delay(self.duration)

    def _renew_once(self, started: float) -> lease_cas.Renewal:
        """One CAS renewal (``lease_cas.renew``), its result applied to our state."""
        with self._lock:
            body, epoch = self._body, self._epoch
        if body is None:
            return lease_cas.Renewal(lost="no lease body")
        outcome = lease_cas.renew(self.config, self.api, body, epoch, self.timeout)
        if outcome.written is None:
            with self._lock:
                if outcome.sent is not None:
                    self._unconfirmed = (outcome.sent, started)
                if outcome.adopt is not None:  # still ours at our epoch, at a newer version: renew on that
                    self._body = outcome.adopt
                    self._confirm_lost_answer(outcome.adopt)
            return outcome
        with self._lock:
            if self._lost is not None or self._released:
                return outcome
            self._body = outcome.written
            self._last_renewed = started
            self._unconfirmed = None
            self._renewals += 1
        self._renewed.set()
        return outcome

    def _confirm_lost_answer(self, current: kube.LeaseBody) -> None:
        """Under the lock. A renewal whose answer was lost (a timeout under load) may have been applied: the
        next renewal then conflicts with it, and the re-read (``current``, still ours at our epoch) shows
        the renewTime it sent. Then it renewed the Lease, and did so no earlier than when it was sent: it
        counts from that moment, as a renewal answered in time would (lease_math.renew_deadline's argument
        needs only that start). Without this, a holder whose renewal outlived its request timeout lost
        the Lease at the renew deadline although the API server had renewed it."""
        pending, self._unconfirmed = self._unconfirmed, None
        if pending is None or self._lost is not None or self._released:
            return
        sent, started = pending
        if (current.get("spec") or {}).get("renewTime") != sent:
            return  # somebody else's write since: ours did not take, or was overwritten
        if self._last_renewed is None or started > self._last_renewed:
            self._last_renewed = started
            self._renewals += 1

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

    def release(self, *, timeout: float | None = None) -> bool:
        """Stop renewing and clear ``holderIdentity`` by CAS, only if still ours. True if released.

        Best effort: if the API server is unreachable the Lease simply expires. ``leaseTransitions`` is
        kept, so the next holder's epoch is higher than ours. ``timeout`` per request (default: the
        renewal's): a short Lease's renewal timeout can be too short for a loaded API server at shutdown.
        """
        with self._lock:
            self._released = True  # may_act() is False from here on
            lost, body, epoch = self._lost, self._body, self._epoch
        self.stop()
        if lost is not None or body is None:
            return False
        return lease_cas.release(self.config, self.api, body, epoch, timeout or self.timeout)
