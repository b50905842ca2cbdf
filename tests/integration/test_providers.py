"""The local providers, for real over loopback: the idempotent HTTP API and the SMTP sink."""

from __future__ import annotations

import concurrent.futures
import email.message
import http.client
import json
import os
import signal
import smtplib
import subprocess
import sys
import urllib.error
from pathlib import Path

import pytest

from agentrun_dev import http_provider, smtp_sink

request = http_provider.request


def post(p: http_provider.HttpProvider, body: object, key: str | None = None) -> tuple[int, object, dict]:
    headers = {"Idempotency-Key": key} if key else {}
    return request(p.url + "/effects", "POST", body, headers)


# --- HTTP provider -----------------------------------------------------------------------------------------


def test_same_key_replays_without_a_new_effect(provider: http_provider.HttpProvider) -> None:
    status1, first, headers1 = post(provider, {"amount": 5}, key="k1")
    status2, second, headers2 = post(provider, {"amount": 5}, key="k1")
    assert (status1, status2) == (201, 201)
    assert first == second
    assert "Idempotent-Replayed" not in headers1 and headers2["Idempotent-Replayed"] == "true"
    post(provider, {"amount": 5}, key="k2")
    post(provider, {"amount": 5})
    post(provider, {"amount": 5})  # no key: every call performs
    stats = http_provider.stats(provider.url)
    assert stats["effects_performed"] == {"k1": 1, "k2": 1}
    assert stats["effects_performed_total"] == 4
    assert stats["replays"] == 1 and stats["requests"] == 5


def test_key_reused_with_other_parameters_is_refused(provider: http_provider.HttpProvider) -> None:
    post(provider, {"amount": 5}, key="k1")
    status, body, _ = post(provider, {"amount": 6}, key="k1")
    assert status == 422 and body["error"] == "idempotency_key_reused"
    assert http_provider.stats(provider.url)["effects_performed_total"] == 1


def test_lookup_by_key(provider: http_provider.HttpProvider) -> None:
    status, _, _ = request(provider.url + "/effects/never-seen")
    assert status == 404
    _, created, _ = post(provider, {"to": "x"}, key="run/step/a b")
    status, found, _ = request(provider.url + "/effects/run%2Fstep%2Fa%20b")
    assert status == 200
    assert found["effects_performed"] == 1 and found["response"] == created


def test_rate_limit_and_unavailable_faults_perform_nothing(provider: http_provider.HttpProvider) -> None:
    request(provider.url + "/control/faults", "POST", {"mode": "429", "count": 2, "retry_after": 3})
    request(provider.url + "/control/faults", "POST", {"mode": "503", "count": 1, "retry_after": 0.5})
    results = [post(provider, {"n": 1}, key="k") for _ in range(4)]
    assert [r[0] for r in results] == [429, 429, 503, 201]
    assert results[0][2]["Retry-After"] == "3" and results[2][2]["Retry-After"] == "0.5"
    assert http_provider.stats(provider.url)["effects_performed"] == {"k": 1}
    status, _, _ = request(provider.url + "/control/faults", "POST", {"mode": "explode"})
    assert status == 400


def test_drop_performs_then_loses_the_response(provider: http_provider.HttpProvider) -> None:
    request(provider.url + "/control/faults", "POST", {"mode": "drop", "count": 1})
    with pytest.raises((http.client.RemoteDisconnected, urllib.error.URLError, ConnectionError)):
        post(provider, {"n": 1}, key="k")
    # The client does not know; the provider does: the effect happened once.
    status, found, _ = request(provider.url + "/effects/k")
    assert status == 200 and found["effects_performed"] == 1
    # A retry with the same key replays instead of performing again.
    status, _, headers = post(provider, {"n": 1}, key="k")
    assert status == 201 and headers["Idempotent-Replayed"] == "true"
    assert http_provider.stats(provider.url)["effects_performed"] == {"k": 1}


def test_concurrent_retries_with_one_key_perform_once(provider: http_provider.HttpProvider) -> None:
    request(provider.url + "/control/faults", "POST", {"mode": "delay", "count": 1, "delay": 0.3})
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: post(provider, {"n": 1}, key="k"), range(8)))
    assert {r[0] for r in results} == {201}
    assert len({json.dumps(r[1], sort_keys=True) for r in results}) == 1
    assert http_provider.stats(provider.url)["effects_performed"] == {"k": 1}


def test_ignoring_keys_performs_every_time(provider: http_provider.HttpProvider) -> None:
    request(provider.url + "/control/config", "POST", {"honour_keys": False})
    post(provider, {"n": 1}, key="k")
    post(provider, {"n": 1}, key="k")
    assert http_provider.stats(provider.url)["effects_performed"] == {"k": 2}
    request(provider.url + "/control/reset", "POST", {})
    assert http_provider.stats(provider.url)["effects_performed_total"] == 0


def test_state_survives_a_restart(tmp_path: Path) -> None:
    with http_provider.HttpProvider(tmp_path / "http") as p:
        post(p, {"n": 1}, key="k")
    with http_provider.HttpProvider(tmp_path / "http") as p:
        assert http_provider.stats(p.url)["effects_performed"] == {"k": 1}
        status, _, headers = post(p, {"n": 1}, key="k")
        assert status == 201 and headers["Idempotent-Replayed"] == "true"
        assert http_provider.stats(p.url)["effects_performed_total"] == 1


def _start_cli(module: str, *args: str) -> tuple[subprocess.Popen[str], dict]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", module, "--host", "127.0.0.1", *args],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    return proc, json.loads(line)


def _stop_cli(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0


def test_http_provider_cli(tmp_path: Path) -> None:
    proc, info = _start_cli("agentrun_dev.http_provider", "--port", "0", "--store", str(tmp_path))
    try:
        status, _, _ = request(info["http_provider"] + "/effects", "POST", {"n": 1}, {"Idempotency-Key": "k"})
        assert status == 201
        assert http_provider.stats(info["http_provider"])["effects_performed"] == {"k": 1}
    finally:
        _stop_cli(proc)
    assert (tmp_path / http_provider.STATE_FILE).exists()


# --- SMTP sink -------------------------------------------------------------------------------------------


def make_message(message_id: str, to: str = "customer@example.com") -> email.message.EmailMessage:
    msg = email.message.EmailMessage()
    msg["From"] = "support@agentrun.dev"
    msg["To"] = to
    msg["Subject"] = "Re: your ticket"
    msg["Message-ID"] = f"<{message_id}>"
    msg.set_content("Hello.\n")
    return msg


def send(sink: smtp_sink.SmtpSink, msg: email.message.EmailMessage) -> None:
    with smtplib.SMTP(sink.host, sink.port, timeout=10) as client:
        client.send_message(msg)


def test_sink_stores_and_looks_up_by_message_id(sink: smtp_sink.SmtpSink) -> None:
    send(sink, make_message("m1@agentrun"))
    send(sink, make_message("m2@agentrun", to="other@example.com"))
    status, found, _ = request(sink.api_url + "/messages?message_id=%3Cm1@agentrun%3E")
    assert status == 200 and found["count"] == 1
    meta = found["messages"][0]
    assert meta["message_id"] == "m1@agentrun"
    assert meta["to"] == "customer@example.com" and meta["subject"] == "Re: your ticket"
    assert meta["rcpt_tos"] == ["customer@example.com"]
    _, bare, _ = request(sink.api_url + "/messages?message_id=m2@agentrun&raw=1")
    assert bare["count"] == 1 and "Hello." in bare["messages"][0]["raw"]
    _, none, _ = request(sink.api_url + "/messages?message_id=never@agentrun")
    assert none["count"] == 0
    _, listing, _ = request(sink.api_url + "/messages")
    assert listing["count"] == 2


def test_sink_is_not_idempotent(sink: smtp_sink.SmtpSink) -> None:
    send(sink, make_message("same@agentrun"))
    send(sink, make_message("same@agentrun"))
    _, stats, _ = request(sink.api_url + "/stats")
    assert stats == {"count": 2, "by_message_id": {"same@agentrun": 2}}


def test_sink_drop_stores_but_the_client_sees_a_failure(sink: smtp_sink.SmtpSink) -> None:
    request(sink.api_url + "/control/faults", "POST", {"mode": "drop", "count": 1})
    with pytest.raises((smtplib.SMTPServerDisconnected, ConnectionError)):
        send(sink, make_message("lost@agentrun"))
    _, found, _ = request(sink.api_url + "/messages?message_id=lost@agentrun")
    assert found["count"] == 1  # the lookup hook can tell it was delivered


def test_sink_temporary_failure_stores_nothing(sink: smtp_sink.SmtpSink) -> None:
    request(sink.api_url + "/control/faults", "POST", {"mode": "451"})
    with pytest.raises(smtplib.SMTPDataError) as err:
        send(sink, make_message("later@agentrun"))
    assert err.value.smtp_code == 451
    send(sink, make_message("later@agentrun"))
    _, stats, _ = request(sink.api_url + "/stats")
    assert stats["count"] == 1


def test_sink_clear_and_restart(tmp_path: Path) -> None:
    with smtp_sink.SmtpSink(tmp_path / "smtp") as s:
        send(s, make_message("a@x"))
        send(s, make_message("b@x"))
    with smtp_sink.SmtpSink(tmp_path / "smtp") as s:
        _, stats, _ = request(s.api_url + "/stats")
        assert stats["count"] == 2
        send(s, make_message("c@x"))
        _, listing, _ = request(s.api_url + "/messages")
        assert [m["seq"] for m in listing["messages"]] == [1, 2, 3]
        _, deleted, _ = request(s.api_url + "/messages", "DELETE")
        assert deleted == {"deleted": 3}
        _, stats, _ = request(s.api_url + "/stats")
        assert stats["count"] == 0


def test_smtp_sink_cli(tmp_path: Path) -> None:
    proc, info = _start_cli(
        "agentrun_dev.smtp_sink", "--port", "0", "--api-port", "0", "--store", str(tmp_path)
    )
    try:
        with smtplib.SMTP(info["smtp_host"], info["smtp_port"], timeout=10) as client:
            client.send_message(make_message("cli@agentrun"))
        _, found, _ = request(info["api"] + "/messages?message_id=cli@agentrun")
        assert found["count"] == 1
    finally:
        _stop_cli(proc)
