"""Send the notifications ``agent_operator.notify`` finds owed, through the effect ledger. The I/O side.

Why the operator sends every notification, the ``requested`` one too, and not the worker at the interrupt: the
worker exits as soon as it parks (a webhook retried with backoff would keep its Pod alive or be lost with it),
the worker's ServiceAccount reads no Secret (least privilege), and escalation and expiry are the operator's
anyway — one sender, one fencing domain, one place where an unknown outcome is reconciled.

Rules:

* **The operator sends, the ledger decides.** Each notification is reserve → mark issued → POST → record,
  every step one fenced statement (``agentrun_core.store.notifications``; the notifier epoch is taken once per
  process, after it won leadership). Killed anywhere, the next operator derives the same key, finds the row.
* **What an outcome proves decides, never a guess** (``agent_operator.notify_outcome``, pure). Only answers
  that prove the request was not processed (429, 503, 408, nothing sent) are resent to any receiver, with
  backoff (``Retry-After`` honoured). An ambiguous outcome (500, 502, 504, a timeout or a reset after sending;
  a row found ``issued`` after a crash) is resent under the same ``Idempotency-Key`` only when the receiver
  dedupes by it (``receiverDedupes``, default for the JSON format); otherwise the row stays pending, flagged
  for a human, and is never resent. The row's ``issued`` flag stays set once a call was ambiguous, so such a
  notification never ends ``failed``. A Warning Event and the ``NotificationFailed`` condition say each.
* **Outbound under the operator's control** (``agent_operator.outbound``): the URL's host is resolved once and
  checked (loopback, link-local, private and cluster-internal addresses refused unless the operator allows
  them), the connection goes to the checked address, no redirect is followed; a refused target fails the
  notification (``NotificationRefused``) without saying what the name resolved to.
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
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

from agent_operator import actions, kube, model, notify, outbound, settings
from agent_operator import notify_outcome as rules
from agentrun_core import backoff, errors, faults
from agentrun_core.store import db as store_db
from agentrun_core.store import notifications as ledger

logger = logging.getLogger(__name__)

USER_AGENT = "agentrun-operator"
# Problems a later delivery does not end: that notification stays failed or of unknown outcome.
LASTING = ("NotificationFailed", "NotificationOutcomeUnknown", "NotificationRefused")


def retry_delay(limits: settings.NotifySettings, attempt: int, retry_after: float | None = None) -> float:
    """Seconds before call ``attempt + 1`` (attempt counts from 1): capped backoff, or the provider's
    Retry-After if longer (never past the cap)."""
    base = backoff.capped(attempt, initial=limits.backoff_seconds, cap=limits.max_backoff_seconds)
    return min(limits.max_backoff_seconds, max(base, retry_after or 0.0))


@dataclasses.dataclass(frozen=True)
class Outcome:
    kind: str  # one of notify_outcome.KINDS: what the call proves (see that module)
    detail: str  # for the run's Event and the ledger row: never an address the policy refused
    status: int | None = None
    retry_after: float | None = None


@dataclasses.dataclass(frozen=True)
class Prepared:
    """A target that passed the outbound policy: a connection pinned to its checked addresses, not open."""

    url: str
    connection: http.client.HTTPConnection
    target: str  # the request's path and query


def prepare(url: str, policy: outbound.Policy, timeout: float) -> Prepared | Outcome:
    """Resolve and check the target (no connection yet), or the outcome that ends this call before it."""
    try:
        conn, target = outbound.connection(url, policy, timeout)
    except outbound.Refused as exc:
        logger.warning("notification to %s refused by the outbound policy: %s", _where(url), exc.detail)
        return Outcome(rules.REFUSED, str(exc))
    except (socket.gaierror, UnicodeError) as exc:
        return Outcome(rules.NOT_PROCESSED, f"cannot reach {_where(url)}: the name does not resolve ({exc})")
    except ValueError as exc:
        return Outcome(rules.REJECTED, f"bad notify URL: {exc}")
    return Prepared(url, conn, target)


def send(prepared: Prepared, payload: Mapping[str, Any], headers: Mapping[str, str]) -> Outcome:
    """One POST over a prepared connection, classified by what it proves (``notify_outcome``). Nothing here
    logs the headers (they may carry the token)."""
    data = json.dumps(payload, sort_keys=True, default=str).encode()
    all_headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT, **headers}
    conn, where, timeout = prepared.connection, _where(prepared.url), prepared.connection.timeout
    try:
        try:
            conn.connect()
        except OSError as exc:
            # Refused, unreachable, no TCP handshake in time, TLS handshake failed: not a byte of the
            # request was sent.
            return Outcome(rules.NOT_PROCESSED, f"cannot reach {where}: {exc}")
        try:
            conn.request("POST", prepared.target, body=data, headers=all_headers)
            response = conn.getresponse()
        except TimeoutError:
            return Outcome(rules.AMBIGUOUS, f"no answer from {where} within {timeout:g}s")
        except (OSError, http.client.HTTPException) as exc:
            # The request may have been read and acted on before the connection broke.
            return Outcome(rules.AMBIGUOUS, f"{where}: {type(exc).__name__}: {exc}")
    finally:
        conn.close()  # the answer's body is not read: only its status says what happened
    code = response.status
    kind = rules.classify_status(code)
    if kind == rules.DELIVERED:
        detail = f"HTTP {code}"
    elif 300 <= code < 400:
        detail = f"HTTP {code} from the receiver: a redirect, not followed (set the final URL)"
    else:
        detail = f"HTTP {code} from the receiver"
    after = _retry_after(response.headers) if kind == rules.NOT_PROCESSED else None
    return Outcome(kind, detail, code, after)


def post(
    url: str, payload: Mapping[str, Any], headers: Mapping[str, str], timeout: float, policy: outbound.Policy
) -> Outcome:
    """``prepare`` then ``send``: one POST to ``url`` under ``policy``, classified."""
    prepared = prepare(url, policy, timeout)
    return prepared if isinstance(prepared, Outcome) else send(prepared, payload, headers)


def _retry_after(headers: Any) -> float | None:
    value = headers.get("Retry-After") if headers is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _where(url: str) -> str:
    """Scheme, host and port only: a webhook URL may carry a secret in its user info, path or query."""
    parsed = urllib.parse.urlsplit(url)
    return f"{parsed.scheme}://{parsed.netloc.rpartition('@')[2]}"


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
        self.policy = outbound.Policy.from_settings(limits)
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
        open_rows = dict(ledger.open_notifications(self.db, world.run.uid))
        moot = set(open_rows) - {item.key for item in owed}
        if not owed and not moot:
            return None
        epoch = self._take_epoch()
        wait: float | None = None
        try:
            for key in sorted(moot):
                if open_rows[key]:
                    # Its occasion passed while a call's outcome is unknown: recorded so (flagged), not
                    # resent, and not said "failed" (it may have landed). No Warning: nobody needs to act now.
                    ledger.record(
                        self.db,
                        key=key,
                        epoch=epoch,
                        status="pending",
                        issued=True,
                        needs_human=True,
                        error="outcome unknown (a call may have landed); its occasion passed: not sent again",
                    )
                    continue
                # Its occasion passed (the approval was decided, the run resolved) before it could go out, and
                # no call is outstanding: provably not sent, and no longer to be sent.
                ledger.record(
                    self.db,
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
            # A call may have landed (killed before its outcome was recorded, or an ambiguous answer).
            detail = row.error or "a call was issued and its result not recorded"
            self._unknown(run, memory, item.key, what, detail, spec, row.attempts)
            return None
        if row.due_in_seconds > 0:
            return row.due_in_seconds  # a resend is scheduled
        ok, token = self._token(world, spec, memory)
        if not ok:
            return 10.0  # look again: the Secret may be created meanwhile
        headers = {"Idempotency-Key": item.key, "X-AgentRun-Event": item.event}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        # Resolved and checked against the outbound policy before anything is marked: a refused target or a
        # name that does not resolve is provably not sent.
        prepared = prepare(spec.url, self.policy, self.limits.timeout_seconds)
        if isinstance(prepared, Prepared):
            # Marked issued first: from here until the outcome is recorded, a crash leaves an unknown outcome.
            ledger.record(self.db, key=item.key, epoch=epoch, status="pending", issued=True)
            outcome = send(prepared, notify.body(item.content, spec.format, item.key), headers)
            faults.hit("notify_after_call")
            calls = 1
        else:
            # Not a call; a name that does not resolve still spends the retry budget, a refusal ends it.
            outcome, calls = prepared, (1 if prepared.kind == rules.NOT_PROCESSED else 0)
        attempt = row.attempts + calls
        step = rules.decide(
            outcome.kind,
            dedupes=spec.dedupes,
            maybe_delivered=row.issued,
            attempt=max(attempt, 1),
            max_attempts=self.limits.max_attempts,
        )
        if step.status == "sent":
            ledger.record(
                self.db,
                key=item.key,
                epoch=epoch,
                status="sent",
                issued=False,
                calls=calls,
                result={"status": outcome.status},
                error=None,
            )
            faults.hit("notify_after_record")
            self.post_event(run, actions.Event("Normal", "Notified", f"{what} delivered ({outcome.detail})"))
            if memory.notify_problem is not None and memory.notify_problem[0] not in LASTING:
                memory.notify_problem = None  # a delivery ends a passing problem (Secret, retries), not these
            return None
        if step.resend:
            delay = retry_delay(self.limits, max(attempt, 1), outcome.retry_after)
            ledger.record(
                self.db,
                key=item.key,
                epoch=epoch,
                status="pending",
                issued=step.maybe_delivered,  # kept set: an earlier call may have landed
                calls=calls,
                error=outcome.detail,
                retry_seconds=delay,
            )
            message = (
                f"{what}: {outcome.detail}; sending again under the same Idempotency-Key with backoff "
                f"(attempt {attempt} of {self.limits.max_attempts})"
            )
            self._warn(run, memory, "NotificationRetrying", message, f"retry:{item.key}")
            return delay
        if step.needs_human:
            self._unknown(run, memory, item.key, what, outcome.detail, spec, attempt, calls)
            return None
        if outcome.kind == rules.REFUSED:
            reason, why = "NotificationRefused", outcome.detail
        elif outcome.kind == rules.NOT_PROCESSED:
            reason, why = "NotificationFailed", f"{outcome.detail}; gave up after {attempt} attempts"
        else:
            reason, why = "NotificationFailed", outcome.detail
        message = f"{what} failed: {why}"
        ledger.record(
            self.db, key=item.key, epoch=epoch, status="failed", issued=False, calls=calls, error=message
        )
        self._warn(run, memory, reason, message, f"failed:{item.key}")
        return None

    def _unknown(
        self,
        run: model.RunRef,
        memory: Any,
        key: str,
        what: str,
        detail: str,
        spec: notify.NotifySpec,
        attempts: int,
        calls: int = 0,
    ) -> None:
        """Record an unknowable outcome as such (pending, flagged for a human) and say so: never resent."""
        assert self._epoch is not None
        why = (
            f"gave up after {attempts} attempts under one Idempotency-Key; an earlier call may have landed"
            if spec.dedupes
            else "the receiver does not dedupe by Idempotency-Key (receiverDedupes false)"
        )
        message = (
            f"{what}: outcome unknown ({detail}); {why}, so it is not sent again (never guessed): check the "
            "receiver; the ledger row stays pending, flagged for a human "
            f"(`kubectl agentrun ledger -n {run.namespace} {run.name}`)"
        )
        ledger.record(
            self.db,
            key=key,
            epoch=self._epoch,
            status="pending",
            issued=True,
            calls=calls,
            needs_human=True,
            error=message,
        )
        self._warn(run, memory, "NotificationOutcomeUnknown", message, f"unknown:{key}")
