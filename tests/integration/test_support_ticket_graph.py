"""The support-ticket graph run by real `agentrun worker` processes on real Postgres, against a real SMTP
sink: parked at the approval, resumed, exactly one email — also when the SMTP connection breaks after the
message went out, when the server refuses temporarily, and when the worker is killed right after the send.
"""

from __future__ import annotations

import json
import urllib.request
import uuid
from typing import Any

import psycopg
import pytest

from agentrun_core import store
from agentrun_dev import smtp_sink
from tests.support import worker_harness as wh
from tests.support.specs import TICKET, TICKET_GRAPH

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

GRAPH = TICKET_GRAPH
PARKED, SUCCEEDED, NEEDS_HUMAN = 10, 0, 13


def _worker(dsn: str, sink: smtp_sink.SmtpSink, *, lookup: bool = True) -> wh.Worker:
    env = {"SUPPORT_SMTP_HOST": sink.host, "SUPPORT_SMTP_PORT": str(sink.port), "SUPPORT_SMTP_API": ""}
    if lookup:
        env["SUPPORT_SMTP_API"] = sink.api_url
    return wh.Worker(dsn=dsn, extra_env=env)


def _fault(sink: smtp_sink.SmtpSink, mode: str) -> None:
    request = urllib.request.Request(
        f"{sink.api_url}/control/faults",
        data=json.dumps({"mode": mode, "count": 1}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    urllib.request.urlopen(request, timeout=5).close()


def _park_and_approve(dsn: str, worker: wh.Worker) -> str:
    run_id = str(uuid.uuid4())
    wh.admit(dsn, run_id, graph=GRAPH, ticket=TICKET)
    first = worker.run(run_id, pod="w-1", attempt=1)
    assert first.returncode == PARKED, first.stderr[-3000:]
    with psycopg.connect(dsn, autocommit=True) as conn:
        [approval] = store.list_approvals(conn, run_id)
        assert approval.status == "pending"
        assert approval.prompt["to"] == "ada@example.com"
        assert "Refunds and double charges" in approval.prompt["body"]
        assert store.decide_approval(
            conn, approval_id=approval.approval_id, run_id=run_id, decision="approved", decided_by="manager"
        )
    return run_id


def _effects(dsn: str, run_id: str) -> list[Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return list(store.list_effects(conn, run_id))


def _mails(sink: smtp_sink.SmtpSink) -> list[dict[str, Any]]:
    return sink.store.find(None)


def test_parks_then_sends_exactly_one_email_keyed_by_the_ledger(
    pg_dsn: str, sink: smtp_sink.SmtpSink
) -> None:
    worker = _worker(pg_dsn, sink)
    run_id = _park_and_approve(pg_dsn, worker)
    done = worker.run(run_id, pod="w-2", attempt=2)
    assert done.returncode == SUCCEEDED, done.stderr[-3000:]
    [effect] = _effects(pg_dsn, run_id)
    [mail] = _mails(sink)
    assert effect.status == "sent" and effect.attempts == 1
    assert mail["message_id"] == f"{effect.idempotency_key}@agentrun.invalid"
    assert effect.provider_ref == f"<{mail['message_id']}>"
    # Running the finished run again changes nothing and sends nothing.
    again = worker.run(run_id, pod="w-3", attempt=3)
    assert again.returncode == SUCCEEDED, again.stderr[-3000:]
    assert len(_mails(sink)) == 1


def test_connection_cut_after_data_is_reconciled_by_the_lookup(pg_dsn: str, sink: smtp_sink.SmtpSink) -> None:
    worker = _worker(pg_dsn, sink)
    run_id = _park_and_approve(pg_dsn, worker)
    _fault(sink, "drop")  # the sink stores the message, then cuts the connection before replying
    done = worker.run(run_id, pod="w-2", attempt=2)
    assert done.returncode == SUCCEEDED, done.stderr[-3000:]
    [effect] = _effects(pg_dsn, run_id)
    assert effect.status == "confirmed", effect  # found in the mailbox by Message-ID
    assert len(_mails(sink)) == 1


def test_temporary_refusal_is_retried(pg_dsn: str, sink: smtp_sink.SmtpSink) -> None:
    worker = _worker(pg_dsn, sink)
    run_id = _park_and_approve(pg_dsn, worker)
    _fault(sink, "451")  # refused, nothing stored
    done = worker.run(run_id, pod="w-2", attempt=2)
    assert done.returncode == SUCCEEDED, done.stderr[-3000:]
    [effect] = _effects(pg_dsn, run_id)
    assert effect.status == "sent" and effect.attempts == 2
    assert len(_mails(sink)) == 1


def test_without_a_lookup_an_unknown_outcome_stops_for_a_human(pg_dsn: str, sink: smtp_sink.SmtpSink) -> None:
    worker = _worker(pg_dsn, sink, lookup=False)
    run_id = _park_and_approve(pg_dsn, worker)
    _fault(sink, "drop")
    stopped = worker.run(run_id, pod="w-2", attempt=2)
    assert stopped.returncode == NEEDS_HUMAN, stopped.stderr[-3000:]
    [effect] = _effects(pg_dsn, run_id)
    assert effect.needs_human and effect.status == "pending"
    assert "SUPPORT_SMTP_API is not set" in (effect.error or "")
    assert len(_mails(sink)) == 1  # it did arrive: guessing "not sent" would have sent a second one


def test_killed_after_the_send_the_next_attempt_finds_the_email(
    pg_dsn: str, sink: smtp_sink.SmtpSink
) -> None:
    worker = _worker(pg_dsn, sink)
    run_id = _park_and_approve(pg_dsn, worker)
    killed = worker.run(run_id, pod="w-2", attempt=2, faults="after_call")
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert len(_mails(sink)) == 1
    [effect] = _effects(pg_dsn, run_id)
    assert effect.status == "pending"
    done = worker.run(run_id, pod="w-3", attempt=3)
    assert done.returncode == SUCCEEDED, done.stderr[-3000:]
    [effect] = _effects(pg_dsn, run_id)
    assert effect.status == "confirmed"
    assert len(_mails(sink)) == 1
