"""agent_operator.decide.notify (pure) and the notifier's HTTP classification against real loopback
servers."""

from __future__ import annotations

import dataclasses
import datetime
import socket
import threading
from typing import Any

import pytest

from agent_operator import settings
from agent_operator.act import notifier, notify_http, outbound
from agent_operator.decide import model, notify, notify_outcome, run_status
from agentrun_core import store
from agentrun_dev.webhook_receiver import Receiver
from tests.support import rowmaker, sockets

NOW = datetime.datetime(2026, 12, 3, 12, 0, tzinfo=datetime.UTC)


def world(*approvals: store.Approval, status: str = "parked", on_timeout: str = "escalate") -> model.World:
    return model.World(
        run=model.RunRef(namespace="team-a", name="refund-42", uid="uid-1"),
        spec=model.RunSpec.from_body(
            {"graph": "g:g", "approval": {"onTimeout": on_timeout, "notify": {"url": "https://h.test/x"}}}
        ),
        status={},
        now=NOW,
        db=rowmaker.run(status=status),
        approvals=approvals,
    )


def approval(status: str = "pending", minutes_left: float = 30, **kw: Any) -> store.Approval:
    return rowmaker.approval(
        approval_id="a-0123456789ab",
        status=status,
        prompt={"question": "refund 40 EUR?"},
        deadline=NOW + datetime.timedelta(minutes=minutes_left),
        requested_at=NOW - datetime.timedelta(minutes=1),
        **kw,
    )


def test_keys_are_a_pure_function_of_run_occasion_and_event() -> None:
    a = notify.key_for("uid-1", "a-0123456789ab", "requested")
    assert a == notify.key_for("uid-1", "a-0123456789ab", "requested")
    others = {
        notify.key_for("uid-2", "a-0123456789ab", "requested"),
        notify.key_for("uid-1", "a-0123456789ac", "requested"),
        notify.key_for("uid-1", "a-0123456789ab", "escalated"),
    }
    assert a not in others and len(others) == 3
    assert a[0].startswith("ak-") and a[1] == "notify/a-0123456789ab"


@pytest.mark.parametrize(
    ("approvals", "on_timeout", "events"),
    [
        ((approval(),), "escalate", ["requested"]),
        ((approval(minutes_left=-1),), "escalate", ["requested", "escalated"]),
        ((approval(minutes_left=-1),), "cancel", ["requested"]),  # the operator expires it: "expired" next
        ((approval("expired", minutes_left=-1),), "cancel", ["expired"]),
        ((approval("approved"),), "escalate", []),  # decided first: "requested" is moot
    ],
)
def test_what_is_owed(approvals: tuple[store.Approval, ...], on_timeout: str, events: list[str]) -> None:
    assert [d.event for d in notify.due(world(*approvals, on_timeout=on_timeout))] == events


def test_escalation_follows_the_policy_the_approval_was_requested_under() -> None:
    snap = approval(minutes_left=-1, policy={"onTimeout": "cancel"})
    assert [d.event for d in notify.due(world(snap, on_timeout="escalate"))] == ["requested"]


def test_needs_human_one_notification_per_flagged_effect_only_while_stopped() -> None:
    flagged = [{"idempotency_key": "ak-1", "tool": "email", "step": "send:3", "error": "unknown"}]
    due = notify.due(world(status="needs_human"), flagged)
    assert [(d.event, d.step) for d in due] == [("needs_human", "notify/ak-1/0")]
    assert "kubectl agentrun resolve -n team-a refund-42 ak-1 --not-sent" in notify.text(due[0].content)
    assert notify.due(world(status="admitted"), flagged) == []
    reopened = rowmaker.run(status="needs_human", reopened=1)
    again = dataclasses.replace(world(status="needs_human"), db=reopened)
    assert [d.step for d in notify.due(again, flagged)] == ["notify/ak-1/1"]  # retried, stopped again


def test_message_carries_prompt_deadline_and_exact_commands() -> None:
    (due,) = notify.due(world(approval()))
    text = notify.text(due.content)
    assert '{"question": "refund 40 EUR?"}' in text
    assert "deadline: 2026-12-03T12:30:00+00:00" in text
    assert "kubectl agentrun approve -n team-a refund-42 --id a-0123456789ab" in text
    assert "kubectl agentrun reject -n team-a refund-42 --id a-0123456789ab" in text
    slack = notify.body(due.content, "slack", due.key)
    assert slack["text"] == text and slack["blocks"][0]["text"] == {"type": "mrkdwn", "text": text}
    generic = notify.body(due.content, "json", due.key)
    assert generic["idempotencyKey"] == due.key and generic["approval"]["id"] == "a-0123456789ab"


def test_spec_defaults() -> None:
    assert notify.NotifySpec.from_spec({}) is None
    json_ = notify.NotifySpec.from_spec({"url": "https://h/x"})
    slack = notify.NotifySpec.from_spec({"url": "https://h/x", "format": "slack"})
    assert json_ is not None and json_.dedupes and json_.secret_name is None
    assert slack is not None and not slack.dedupes
    forced = notify.NotifySpec.from_spec({"url": "u", "format": "slack", "receiverDedupes": True})
    assert forced is not None and forced.dedupes


def test_backoff_grows_is_capped_and_honours_retry_after() -> None:
    limits = settings.NotifySettings(backoff_seconds=1.0, max_backoff_seconds=10.0)
    assert [notifier.retry_delay(limits, n) for n in (1, 2, 3, 4, 5)] == [1.0, 2.0, 4.0, 8.0, 10.0]
    assert notifier.retry_delay(limits, 1, retry_after=5) == 5.0
    assert notifier.retry_delay(limits, 1, retry_after=99) == 10.0


LOOPBACK = outbound.Policy.from_settings(settings.NotifySettings(allowed_networks=("127.0.0.1/32",)))


@pytest.mark.parametrize(
    ("answer", "kind"),
    [
        (200, notify_outcome.DELIVERED),
        (503, notify_outcome.NOT_PROCESSED),
        (429, notify_outcome.NOT_PROCESSED),
        (408, notify_outcome.NOT_PROCESSED),
        (500, notify_outcome.AMBIGUOUS),  # may have been acted on: proves nothing
        (502, notify_outcome.AMBIGUOUS),
        (504, notify_outcome.AMBIGUOUS),
        (404, notify_outcome.REJECTED),
    ],
)
def test_post_classifies_real_answers(receiver: Receiver, answer: int, kind: str) -> None:
    receiver.answers = [answer]
    receiver.retry_after = "7"
    out = notify_http.post(
        receiver.url, {"a": 1}, {"Idempotency-Key": "ak-x", "Authorization": "Bearer t"}, 5.0, LOOPBACK
    )
    assert out.kind == kind and (out.status == answer)
    assert out.retry_after == (7.0 if answer in (429, 503) else None)
    (req,) = receiver.requests
    assert req.key == "ak-x" and req.body == {"a": 1} and "Bearer t" not in out.detail


def test_post_refused_connection_is_not_processed_and_a_silent_receiver_is_ambiguous() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    refused = notify_http.post(f"http://127.0.0.1:{port}/x", {}, {}, 2.0, LOOPBACK)
    assert refused.kind == notify_outcome.NOT_PROCESSED
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)
    accepted: list[socket.socket] = []
    threading.Thread(target=lambda: accepted.append(silent.accept()[0]), daemon=True).start()
    try:
        out = notify_http.post(f"http://127.0.0.1:{silent.getsockname()[1]}/x", {}, {}, 0.5, LOOPBACK)
        assert out.kind == notify_outcome.AMBIGUOUS and "no answer" in out.detail
    finally:
        for c in accepted:
            c.close()
        silent.close()


def test_post_a_connection_closed_after_the_request_was_read_is_ambiguous() -> None:
    """The receiver read the whole request (and may have acted), then the connection broke: proves nothing."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    read: list[bytes] = []

    def read_then_close() -> None:
        conn, _ = server.accept()
        with conn:
            read.append(sockets.recv_until(conn, b'"a": 1'))

    worker = threading.Thread(target=read_then_close, daemon=True)
    worker.start()
    try:
        out = notify_http.post(f"http://127.0.0.1:{server.getsockname()[1]}/x", {"a": 1}, {}, 5.0, LOOPBACK)
        worker.join(timeout=30)
        assert read and b"POST /x" in read[0]
        assert out.kind == notify_outcome.AMBIGUOUS, out
    finally:
        server.close()


def test_notification_problem_is_a_condition_that_clears() -> None:
    failing = dataclasses.replace(
        world(approval()), notify_problem=("NotificationSecretMissing", "no Secret")
    )
    assert run_status.notify_condition(failing) == {
        "NotificationFailed": (True, "NotificationSecretMissing", "no Secret")
    }
    was = dataclasses.replace(world(approval()), status={"conditions": [{"type": "NotificationFailed"}]})
    assert run_status.notify_condition(was)["NotificationFailed"][0] is False
    assert run_status.notify_condition(world(approval())) == {}


def test_parallel_reconciles_take_one_notifier_epoch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reconciles of different runs call ``sync`` on parallel threads; two epochs from one process fenced the
    process's own older sender and stopped all its notifications (seen in CI)."""
    taken: list[int] = []
    gate = threading.Barrier(8)

    def take_epoch(db: Any, identity: str) -> int:
        taken.append(len(taken) + 1)
        return taken[-1]

    monkeypatch.setattr(notifier.ledger, "take_epoch", take_epoch)
    no_api: Any = None  # the epoch is taken through the monkeypatched ledger only
    sender = notifier.Notifier(no_api, no_api, "op", lambda *a: None, settings.NotifySettings())
    got: list[int] = []

    def one() -> None:
        gate.wait(timeout=30)
        got.append(sender._take_epoch())

    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert taken == [1] and got == [1] * 8
