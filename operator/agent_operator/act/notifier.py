"""Send the notifications ``agent_operator.decide.notify`` finds owed, through the effect ledger. The I/O
side.

Why the operator sends every notification, the ``requested`` one too, and not the worker at the interrupt: the
worker exits as soon as it parks (a webhook retried with backoff would keep its Pod alive or be lost with it),
the worker's ServiceAccount reads no Secret (least privilege), and escalation and expiry are the operator's
anyway — one sender, one fencing domain, one place where an unknown outcome is reconciled.

Rules:

* **The operator sends, the ledger decides.** Each notification is reserve → mark issued → POST → record,
  every step one fenced statement (``agentrun_core.store.notifications``; the notifier epoch is taken once per
  process, after it won leadership). Killed anywhere, the next operator derives the same key, finds the row.
* **What an outcome proves decides, never a guess**: the worker's effect ledger machine
  (``agentrun_core.ledger``, through ``agent_operator.decide.notify_outcome``) decides every step. Only
  answers
  that prove the request was not processed (429, 503, 408, nothing sent) are resent to any receiver, with
  backoff (``Retry-After`` honoured). An ambiguous outcome (500, 502, 504, a timeout or a reset after sending;
  a row found ``issued`` after a crash) is resent under the same ``Idempotency-Key`` only when the receiver
  dedupes by it (``receiverDedupes``, default for the JSON format); otherwise the row stays pending, flagged
  for a human, and is never resent. The row's ``issued`` flag stays set once a call was ambiguous, so such a
  notification never ends ``failed``. A Warning Event and the ``NotificationFailed`` condition say each.
* **Outbound under the operator's control** (``agent_operator.act.outbound``, ``notify_http``): the URL's
host is
  resolved once and checked (loopback, link-local, private and cluster-internal addresses refused unless the
  operator allows them), the connection goes to the checked address, no redirect is followed; a refused
  target fails the notification (``NotificationRefused``) without saying what the name resolved to.
* **Never blocks an approval.** The notifier runs after the reconcile's plan (decisions first), makes at most
  one call per notification per pass, and every error stays here (logged, an Event, the condition).
* **Secrets.** The token is read from a Secret of the run's own namespace (the spec has no namespace field)
  and sent only as ``Authorization: Bearer``; it is never logged, stored or put in an Event.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from typing import Any

from agent_operator import kube, settings
from agent_operator.act import notify_http, outbound
from agent_operator.decide import actions, model, notify
from agent_operator.decide import notify_outcome as rules
from agentrun_core import backoff, errors, faults
from agentrun_core.store import db as store_db
from agentrun_core.store import notifications as ledger

logger = logging.getLogger(__name__)

# Problems a later delivery does not end: that notification stays failed or of unknown outcome.
LASTING = ("NotificationFailed", "NotificationOutcomeUnknown", "NotificationRefused")


def retry_delay(limits: settings.NotifySettings, attempt: int, retry_after: float | None = None) -> float:
    """Seconds before call ``attempt + 1`` (attempt counts from 1): capped backoff, or the provider's
    Retry-After if longer (never past the cap)."""
    base = backoff.capped(attempt, initial=limits.backoff_seconds, cap=limits.max_backoff_seconds)
    return min(limits.max_backoff_seconds, max(base, retry_after or 0.0))


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
                record = functools.partial(ledger.record, self.db, run_id=world.run.uid, key=key, epoch=epoch)
                if open_rows[key]:
                    # Its occasion passed while a call's outcome is unknown: recorded so (flagged), not
                    # resent, and not said "failed" (it may have landed). No Warning: nobody needs to act now.
                    record(
                        status="pending",
                        issued=True,
                        needs_human=True,
                        error="outcome unknown (a call may have landed); its occasion passed: not sent again",
                    )
                    continue
                # Its occasion passed (the approval was decided, the run resolved) before it could go out, and
                # no call is outstanding: provably not sent, and no longer to be sent.
                record(
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
        if row is None:
            return None
        # Every move of this row is fenced by the same run, key and epoch.
        record = functools.partial(ledger.record, self.db, run_id=run.uid, key=item.key, epoch=epoch)
        # The effect ledger's machine decides what the row calls for (agent_operator.decide.notify_outcome).
        verdict = rules.reserved(
            status=row.status,
            inserted=row.inserted,
            issued=row.issued,
            needs_human=row.needs_human,
            attempts=row.attempts,
            dedupes=spec.dedupes,
            max_attempts=self.limits.max_attempts,
        )
        if verdict == rules.SKIP:
            return None  # sent, failed, or handed to a human already
        if row.inserted:
            faults.hit("notify_after_reserve")
        what = f"{item.event} notification {item.key} of {run.namespace}/{run.name}"
        if verdict == rules.UNKNOWN:
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
        prepared = notify_http.prepare(spec.url, self.policy, self.limits.timeout_seconds)
        if isinstance(prepared, notify_http.Prepared):
            # Marked issued first: from here until the outcome is recorded, a crash leaves an unknown outcome.
            record(status="pending", issued=True)
            outcome = notify_http.send(prepared, notify.body(item.content, spec.format, item.key), headers)
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
            record(status="sent", issued=False, calls=calls, result={"status": outcome.status}, error=None)
            faults.hit("notify_after_record")
            self.post_event(run, actions.Event("Normal", "Notified", f"{what} delivered ({outcome.detail})"))
            if memory.notify_problem is not None and memory.notify_problem[0] not in LASTING:
                memory.notify_problem = None  # a delivery ends a passing problem (Secret, retries), not these
            return None
        if step.resend:
            delay = retry_delay(self.limits, max(attempt, 1), outcome.retry_after)
            record(
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
        record(status="failed", issued=False, calls=calls, error=message)
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
            run_id=run.uid,
            key=key,
            epoch=self._epoch,
            status="pending",
            issued=True,
            calls=calls,
            needs_human=True,
            error=message,
        )
        self._warn(run, memory, "NotificationOutcomeUnknown", message, f"unknown:{key}")
