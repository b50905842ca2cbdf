"""Send the notifications ``agent_operator.notify`` finds owed, through the effect ledger. The I/O side.

Why the operator sends every notification, the ``requested`` one too, and not the worker at the interrupt: the
worker exits as soon as it parks (a webhook retried with backoff would keep its Pod alive or be lost with it),
the worker's ServiceAccount reads no Secret (least privilege), and escalation and expiry are the operator's
anyway — one sender, one fencing domain, one place where an unknown outcome is reconciled.

Rules:

* **The operator sends, the ledger decides.** Each notification is reserve → mark issued → POST → record,
  every step one fenced statement (``agentrun_core.store.notifications``; the notifier epoch is taken once per
  process, after it won leadership). Killed anywhere, the next operator derives the same key, finds the row.
* **Unknown outcomes are reconciled, never guessed.** A row found ``issued`` (a call may have landed, nothing
  was recorded) is sent again with the same ``Idempotency-Key`` only when the receiver dedupes by it
  (``receiverDedupes``, default for the JSON format); otherwise it is flagged for a human and never resent.
* **Provably-not-delivered is retried with backoff.** 429 and 5xx answers and refused connections leave the
  row pending with ``retry_at`` (exponential, ``Retry-After`` honoured); other 4xx and an exhausted budget
  fail it. Either way a Warning Event and the ``NotificationFailed`` condition say so.
* **Never blocks an approval.** The notifier runs after the reconcile's plan (decisions first), makes at most
  one call per notification per pass, and every error stays here (logged, an Event, the condition).
* **Secrets.** The token is read from a Secret of the run's own namespace (the spec has no namespace field)
  and sent only as ``Authorization: Bearer``; it is never logged, stored or put in an Event.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import logging
import socket
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from agent_operator import actions, kube, model, notify, settings
from agentrun_core import backoff, errors, faults
from agentrun_core.store import db as store_db
from agentrun_core.store import notifications as ledger

logger = logging.getLogger(__name__)

USER_AGENT = "agentrun-operator"
# Problems a later delivery does not end: that notification stays failed or of unknown outcome.
LASTING = ("NotificationFailed", "NotificationOutcomeUnknown")


def retry_delay(limits: settings.NotifySettings, attempt: int, retry_after: float | None = None) -> float:
    """Seconds before call ``attempt + 1`` (attempt counts from 1): capped backoff, or the provider's
    Retry-After if longer (never past the cap)."""
    base = backoff.capped(attempt, initial=limits.backoff_seconds, cap=limits.max_backoff_seconds)
    return min(limits.max_backoff_seconds, max(base, retry_after or 0.0))


@dataclasses.dataclass(frozen=True)
class Outcome:
    kind: str  # delivered | retry (provably not taken) | failed (permanent) | unknown
    detail: str
    status: int | None = None
    retry_after: float | None = None


def post(url: str, payload: Mapping[str, Any], headers: Mapping[str, str], timeout: float) -> Outcome:
    """One POST, classified. Nothing here logs the headers (they may carry the token)."""
    data = json.dumps(payload, sort_keys=True, default=str).encode()
    request = urllib.request.Request(url, data=data, method="POST")
    for name, value in {"Content-Type": "application/json", "User-Agent": USER_AGENT, **headers}.items():
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # http(s) only: the CRD's CEL rule
            return Outcome("delivered", f"HTTP {response.status}", status=response.status)
    except urllib.error.HTTPError as exc:
        code = exc.code
        if code == 429 or code >= 500:
            return Outcome("retry", f"HTTP {code} from the receiver", code, _retry_after(exc.headers))
        return Outcome("failed", f"HTTP {code} from the receiver (not retried)", code)
    except urllib.error.URLError as exc:
        reason = exc.reason
        # Refused connection or a name that does not resolve: the request never reached a receiver.
        if isinstance(reason, ConnectionRefusedError | socket.gaierror):
            return Outcome("retry", f"cannot reach {_where(url)}: {reason}")
        if isinstance(reason, TimeoutError):
            return Outcome("unknown", f"no answer from {_where(url)} within {timeout:g}s")
        return Outcome("unknown", f"{_where(url)}: {reason}")
    except TimeoutError:
        # Sent, no answer: it may have been acted on.
        return Outcome("unknown", f"no answer from {_where(url)} within {timeout:g}s")
    except (ConnectionError, http.client.HTTPException) as exc:
        # The request may have been read and acted on before the connection broke.
        return Outcome("unknown", f"{_where(url)}: {type(exc).__name__}: {exc}")
    except ValueError as exc:
        return Outcome("failed", f"bad notify URL: {exc}")


def _retry_after(headers: Any) -> float | None:
    value = headers.get("Retry-After") if headers is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _where(url: str) -> str:
    """The URL without its query (a webhook URL may carry a secret in its path or query: host only)."""
    parsed = urllib.parse.urlsplit(url)
    return f"{parsed.scheme}://{parsed.netloc}"


class Notifier:
    """Per operator process: sends what is owed, one call per notification per reconcile pass."""

    def __init__(
        self,
        api: kube.ApiClient,
        db: store_db.Conn,
        identity: str,
        post_event: Callable[[model.RunRef, actions.Event], None],
        limits: settings.NotifySettings,
    ) -> None:
        self.api = api
        self.db = db
        self.identity = identity
        self.post_event = post_event
        self.limits = limits
        self._epoch: int | None = None
        self._epoch_lock = threading.Lock()
        self._deposed = False

    def sync(self, world: model.World, memory: Any) -> float | None:
        """Send what ``world`` owes. Returns seconds until it wants another look (None: nothing waits).

        ``memory`` is the run's ``RunMemory``: ``notify_problem`` (the condition) and ``notify_warned``
        (Warnings already posted) live there."""
        spec = notify.NotifySpec.from_spec(world.spec.notify)
        if spec is None or world.db is None or self._deposed or world.run.deleting:
            return None
        flagged = (
            ledger.needs_human_effects(self.db, world.run.uid) if world.db.status == "needs_human" else []
        )
        owed = notify.due(world, flagged)
        open_keys = {k for k, issued in ledger.open_notifications(self.db, world.run.uid) if not issued}
        moot = open_keys - {item.key for item in owed}
        if not owed and not moot:
            return None
        epoch = self._take_epoch()
        wait: float | None = None
        try:
            for key in sorted(moot):
                # Its occasion passed (the approval was decided, the run resolved) before it could go out, and
                # no call is outstanding: provably not sent, and no longer to be sent.
                ledger.record(
                    self.db,
                    run_id=world.run.uid,
                    key=key,
                    epoch=epoch,
                    status="failed",
                    issued=False,
                    error="not sent: its occasion passed (decided or resolved) before it could be delivered",
                )
            for item in owed:
                later = self._one(world, spec, item, memory)
                if later is not None:
                    wait = later if wait is None else min(wait, later)
        except errors.Fenced as exc:
            self._deposed = True  # a newer sender took the epoch: this process sends nothing any more
            logger.warning("notifications stopped: %s", exc)
            return None
        return wait

    def _take_epoch(self) -> int:
        """The process's notifier epoch, taken once. Reconciles of different runs call ``sync`` on parallel
        threads: without the lock two of them each took an epoch, and the one holding the older epoch was
        fenced by its own process and stopped every notification of the process."""
        with self._epoch_lock:
            if self._epoch is None:
                self._epoch = ledger.take_epoch(self.db, self.identity)
                logger.info("notifier epoch %d taken by %s", self._epoch, self.identity)
            return self._epoch

    def _warn(self, run: model.RunRef, memory: Any, reason: str, message: str, once: str) -> None:
        memory.notify_problem = (reason, message)
        if once in memory.notify_warned:
            return
        memory.notify_warned.add(once)
        self.post_event(run, actions.Event("Warning", reason, message))

    def _token(self, world: model.World, spec: notify.NotifySpec, memory: Any) -> tuple[bool, str | None]:
        """(ok, token). The Secret is looked up in the run's own namespace only."""
        if spec.secret_name is None:
            return True, None
        run = world.run
        where = f"Secret {run.namespace}/{spec.secret_name} key {spec.secret_key!r}"
        try:
            token = kube.read_secret_key(self.api, run.namespace, spec.secret_name, spec.secret_key)
        except kube.NotFound:
            problem = f"notifications not sent: {where} (spec.approval.notify.tokenSecretRef) does not exist"
            self._warn(run, memory, "NotificationSecretMissing", problem, f"secret:{spec.secret_name}")
            return False, None
        except kube.KubeError as exc:
            problem = (
                f"notifications not sent: cannot read {where}: HTTP {exc.status} "
                "(the operator needs get on it: deploy/tenant/notify-rbac.yaml)"
            )
            self._warn(
                run, memory, "NotificationSecretUnreadable", problem, f"secret-read:{spec.secret_name}"
            )
            return False, None
        if not token:
            problem = f"notifications not sent: {where} has no such key (or it is empty)"
            self._warn(run, memory, "NotificationSecretMissing", problem, f"secret-key:{spec.secret_name}")
            return False, None
        return True, token

    def _one(
        self, world: model.World, spec: notify.NotifySpec, item: notify.Due, memory: Any
    ) -> float | None:
        run, epoch = world.run, self._epoch
        assert epoch is not None
        row = ledger.reserve(
            self.db,
            key=item.key,
            run_id=run.uid,
            epoch=epoch,
            step=item.step,
            event=item.event,
            args=dict(item.content),
            args_hash=item.args_hash,
        )
        if row is None or row.status != "pending" or row.needs_human:
            return None  # sent, failed, or handed to a human already
        if row.inserted:
            faults.hit("notify_after_reserve")
        what = f"{item.event} notification {item.key} of {run.namespace}/{run.name}"
        if row.issued and not spec.dedupes:
            message = _unknown(what, "a call was issued and its result not recorded", run)
            ledger.record(
                self.db,
                run_id=run.uid,
                key=item.key,
                epoch=epoch,
                status="pending",
                issued=True,
                needs_human=True,
                error=message,
            )
            self._warn(run, memory, "NotificationOutcomeUnknown", message, f"unknown:{item.key}")
            return None
        if not row.issued and row.due_in_seconds > 0:
            return row.due_in_seconds  # a retry is scheduled
        ok, token = self._token(world, spec, memory)
        if not ok:
            return 10.0  # look again: the Secret may be created meanwhile
        headers = {"Idempotency-Key": item.key, "X-AgentRun-Event": item.event}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        # Marked issued first: from here until the outcome is recorded, a crash leaves an unknown outcome.
        ledger.record(self.db, run_id=run.uid, key=item.key, epoch=epoch, status="pending", issued=True)
        outcome = post(
            spec.url, notify.body(item.content, spec.format, item.key), headers, self.limits.timeout_seconds
        )
        faults.hit("notify_after_call")
        attempt = row.attempts + 1
        if outcome.kind == "delivered":
            ledger.record(
                self.db,
                run_id=run.uid,
                key=item.key,
                epoch=epoch,
                status="sent",
                issued=False,
                calls=1,
                result={"status": outcome.status},
                error=None,
            )
            faults.hit("notify_after_record")
            self.post_event(run, actions.Event("Normal", "Notified", f"{what} delivered ({outcome.detail})"))
            if memory.notify_problem is not None and memory.notify_problem[0] not in LASTING:
                memory.notify_problem = None  # a delivery ends a passing problem (Secret, retries), not these
            return None
        retryable = outcome.kind == "retry" or (outcome.kind == "unknown" and spec.dedupes)
        if retryable and attempt < self.limits.max_attempts:
            delay = retry_delay(self.limits, attempt, outcome.retry_after)
            ledger.record(
                self.db,
                run_id=run.uid,
                key=item.key,
                epoch=epoch,
                status="pending",
                issued=False,
                calls=1,
                error=outcome.detail,
                retry_seconds=delay,
            )
            message = (
                f"{what}: {outcome.detail}; retrying with backoff "
                f"(attempt {attempt} of {self.limits.max_attempts})"
            )
            self._warn(run, memory, "NotificationRetrying", message, f"retry:{item.key}")
            return delay
        if outcome.kind == "unknown":
            message = _unknown(what, outcome.detail, run)
            ledger.record(
                self.db,
                run_id=run.uid,
                key=item.key,
                epoch=epoch,
                status="pending",
                issued=True,
                calls=1,
                needs_human=True,
                error=message,
            )
            self._warn(run, memory, "NotificationOutcomeUnknown", message, f"unknown:{item.key}")
            return None
        why = (
            outcome.detail
            if outcome.kind == "failed"
            else f"{outcome.detail}; gave up after {attempt} attempts"
        )
        message = f"{what} failed: {why}"
        ledger.record(
            self.db, run_id=run.uid, key=item.key, epoch=epoch, status="failed", issued=False, calls=1,
            error=message,
        )
        self._warn(run, memory, "NotificationFailed", message, f"failed:{item.key}")
        return None


def _unknown(what: str, detail: str, run: model.RunRef) -> str:
    return (
        f"{what}: outcome unknown ({detail}); the receiver does not dedupe by Idempotency-Key "
        "(receiverDedupes false), so it is not sent again (never guessed): check the receiver; the ledger "
        f"row stays pending, flagged for a human (`kubectl agentrun ledger -n {run.namespace} {run.name}`)"
    )
