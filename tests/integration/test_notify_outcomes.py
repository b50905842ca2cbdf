"""What a notification call's outcome proves, and where a notification may go: the operator, real worker Pods
and real loopback receivers that count what they acted on (``webhook_receiver``: a 500 / 502 / 504 is answered
after acting, a 503 / 429 before), on the dev cluster.

* An ambiguous answer (500 / 502 / 504) is never resent to a receiver that does not dedupe by the
  Idempotency-Key: exactly one request, the row flagged for a human, the Warning and the condition say so.
  A receiver that dedupes gets it again under the same key; 503 / 429 are resent to any receiver. A budget
  spent after an ambiguous answer ends unknown, never "failed".
* The operator's outbound policy: a target resolving to a loopback, link-local or other internal address not
  in ``AGENTRUN_NOTIFY_ALLOWED_NETWORKS`` is refused before any connection (the receiver listening there gets
  nothing), the run says so without probing details, and a redirect is not followed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import psycopg
import pytest

from agent_operator.decide import notify
from agentrun_core.store import notifications
from agentrun_core.store import rows as effect_rows
from agentrun_dev.webhook_receiver import Receiver
from tests.support.kube import condition, create_run, events, run_status
from tests.support.operator_proc import OperatorHandle
from tests.support.specs import approval_spec
from tests.support.waiting import wait_for, wait_phase


@dataclasses.dataclass
class Notifying:
    """What each test here drives: the operator (reconfigured per test) on the dev cluster, the loopback
    receivers it starts (closed after the test), files for the runs' effects, Postgres."""

    kube: kubernetes.client.ApiClient
    operator: OperatorHandle
    tmp_path: Path
    pg_dsn: str
    receivers: list[Receiver] = dataclasses.field(default_factory=list)

    def receiver(self, answers: list[int], **kw: Any) -> Receiver:
        server = Receiver(**kw).start()
        server.answers = list(answers)
        self.receivers.append(server)
        return server

    def create(self, name: str, hook: dict[str, Any]) -> str:
        """An approval run notifying ``hook`` when it asks; its uid."""
        spec = approval_spec(self.tmp_path / name, "x", notify=hook)
        return str(create_run(self.kube, self.operator.namespace, name, spec)["metadata"]["uid"])

    def requested_key(self, name: str, uid: str) -> str:
        status = wait_phase(self.kube, self.operator.namespace, name, "WaitingApproval", 180, self.operator)
        return notify.key_for(uid, str(status["pendingApproval"]["id"]), "requested")[0]

    def settled_row(self, name: str, uid: str, timeout: float) -> effect_rows.Effect:
        """The run's one notification row once it is sent, failed or handed to a human."""

        def settled() -> effect_rows.Effect | None:
            with psycopg.connect(self.pg_dsn, autocommit=True) as conn:
                found = notifications.list_notifications(conn, uid)
            done = [r for r in found if r.status != "pending" or r.needs_human]
            return done[0] if done else None

        row = wait_for(settled, timeout, f"{name}: row settled", on_timeout=self.operator.logs)
        assert row is not None  # wait_for returns a truthy value only
        return row

    def shown(self, name: str, reason: str, timeout: float) -> dict[str, Any]:
        """The NotificationFailed condition once it has ``reason`` and the Warning Event was posted."""

        def shown() -> dict[str, Any] | None:
            found = condition(run_status(self.kube, self.operator.namespace, name), "NotificationFailed")
            posted = reason in [e.reason for e in events(self.kube, self.operator.namespace, name)]
            return found if found.get("reason") == reason and posted else None

        found = wait_for(shown, timeout, f"{name}: {reason}", on_timeout=self.operator.logs)
        assert found is not None  # wait_for returns a truthy value only
        return found


@pytest.fixture
def notifying(
    kube: kubernetes.client.ApiClient, operator: OperatorHandle, tmp_path: Path, pg_dsn: str
) -> Iterator[Notifying]:
    bench = Notifying(kube, operator, tmp_path, pg_dsn)
    yield bench
    for server in bench.receivers:
        server.close()


def test_an_ambiguous_answer_is_resent_only_to_a_receiver_that_dedupes(notifying: Notifying) -> None:
    notifying.operator.reconfigure(
        notifying.kube, AGENTRUN_NOTIFY_BACKOFF_SECONDS="0.3", AGENTRUN_NOTIFY_MAX_ATTEMPTS="3"
    )
    # name: (the receiver's answers, it dedupes by Idempotency-Key, requests expected, settles as)
    cases = {
        "a500": ([500, 200], False, 1, "unknown"),
        "a502": ([502, 200], False, 1, "unknown"),
        "a504": ([504, 200], False, 1, "unknown"),
        "d502": ([502, 200], True, 2, "sent"),  # resent under the same key: the receiver acts once
        "n503": ([503, 200], False, 2, "sent"),  # provably not processed: resent to anyone
        "n429": ([429, 200], False, 2, "sent"),
        # The budget (3) is spent on 503s after an ambiguous 500: the 500 may have landed, so not "failed".
        "d500": ([500, 503, 503, 200], True, 3, "unknown"),
    }
    runs: dict[str, tuple[str, Receiver]] = {}
    for name, (answers, dedupes, _, _) in cases.items():
        server = notifying.receiver(answers, dedupes=dedupes)
        runs[name] = (notifying.create(name, {"url": server.url, "receiverDedupes": dedupes}), server)
    for name, (answers, _, requests, settles) in cases.items():
        uid, server = runs[name]
        key = notifying.requested_key(name, uid)
        row = notifying.settled_row(name, uid, 120)
        assert [r.answered for r in server.by_key(key)] == answers[:requests], name
        assert server.acted_on(key) == 1, name  # what the receiver's users saw: once
        if settles == "sent":
            assert (row.status, row.attempts) == ("sent", 2), (name, row)
            continue
        # Flagged, never resent: the 200 scripted next was never asked for.
        assert (row.status, row.needs_human, row.attempts) == ("pending", True, requests), (name, row)
        assert f"HTTP {answers[requests - 1]}" in str(row.error) and "not sent again" in str(row.error)
        found = notifying.shown(name, "NotificationOutcomeUnknown", 60)
        assert found["status"] == "True" and key in found["message"]
        assert len(server.requests) == requests, name


def test_a_forbidden_target_is_refused_before_any_connection_and_a_redirect_is_not_followed(
    notifying: Notifying,
) -> None:
    kube, operator = notifying.kube, notifying.operator
    ns = operator.namespace
    # Only 127.0.0.2 may be reached: 127.0.0.1 (where `hidden` listens) is loopback and not allowed.
    operator.reconfigure(kube, AGENTRUN_NOTIFY_ALLOWED_NETWORKS="127.0.0.2/32")
    hidden = notifying.receiver([])
    port = hidden.server.server_address[1]
    allowed = notifying.receiver([302], host="127.0.0.2")
    allowed.location = hidden.url
    targets = {
        "metadata": "http://169.254.169.254/latest/meta-data/iam/",
        "loopback": hidden.url,
        "byname": f"http://localhost:{port}/hooks/agentrun",  # a name that resolves to loopback
        "mapped": f"http://[::ffff:127.0.0.1]:{port}/hooks/agentrun",
        "redirect": allowed.url,
    }
    uids = {name: notifying.create(name, {"url": url}) for name, url in targets.items()}
    for name, uid in uids.items():
        wait_phase(kube, ns, name, "WaitingApproval", 180, operator)  # the approval is not in the way
        reason = "NotificationFailed" if name == "redirect" else "NotificationRefused"
        found = notifying.shown(name, reason, 90)
        row = notifying.settled_row(name, uid, 60)
        assert row.status == "failed", (name, row)
        messages = [found["message"], *(str(e.message) for e in events(kube, ns, name))]
        if name == "redirect":
            assert row.attempts == 1 and "redirect" in found["message"] and "not followed" in found["message"]
            assert hidden.url not in " ".join(messages)
            continue
        assert row.attempts == 0, (name, row)  # no call was made
        assert "outbound policy" in found["message"], found
        for text in messages:  # no probing details: no resolved address, no status, no connection error
            assert "127.0.0.1" not in text and "169.254" not in text and "HTTP " not in text, text
            assert "cannot reach" not in text and "refused]" not in text, text
    assert hidden.requests == [], [r.headers for r in hidden.requests]
    assert len(allowed.requests) == 1
