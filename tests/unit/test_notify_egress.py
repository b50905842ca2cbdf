"""The operator's outbound guard for notification URLs (``agent_operator.act.outbound``) and the notifier's
POST
through it, against real loopback servers: what is refused never reaches a socket."""

from __future__ import annotations

import ipaddress
import shutil
import socket
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_operator import settings
from agent_operator.act import notify_http, outbound
from agent_operator.decide import notify_outcome
from agentrun_dev.webhook_receiver import Receiver

LOOPBACK = outbound.Policy.from_settings(settings.NotifySettings(allowed_networks=("127.0.0.1/32",)))
NOTHING = outbound.Policy.from_settings(settings.NotifySettings())


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "127.0.0.2",
        "::1",
        "169.254.169.254",  # cloud metadata endpoints
        "fe80::1",
        "10.96.0.1",  # a typical Service CIDR
        "172.16.0.1",
        "192.168.1.1",
        "100.64.0.1",  # shared address space (CGNAT, some Pod networks)
        "fd00::1",  # unique local (IPv6 private)
        "0.0.0.0",
        "::",
        "224.0.0.1",  # multicast
        "::ffff:127.0.0.1",  # IPv4-mapped
        "::ffff:169.254.169.254",
        "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254
        "2002:a9fe:a9fe::1",  # 6to4 of 169.254.169.254
    ],
)
def test_internal_addresses_are_refused_unless_allowed(address: str) -> None:
    assert outbound.forbidden(ipaddress.ip_address(address), NOTHING) is not None


def test_public_addresses_pass_and_the_allowlist_and_denylist_apply() -> None:
    assert outbound.forbidden(ipaddress.ip_address("93.184.215.14"), NOTHING) is None
    assert outbound.forbidden(ipaddress.ip_address("2606:4700::1111"), NOTHING) is None
    assert outbound.forbidden(ipaddress.ip_address("127.0.0.1"), LOOPBACK) is None
    assert outbound.forbidden(ipaddress.ip_address("::ffff:127.0.0.1"), LOOPBACK) is None  # the same address
    assert outbound.forbidden(ipaddress.ip_address("127.0.0.2"), LOOPBACK) is not None
    # A Service CIDR in public space (GKE's 34.118.224.0/20): denied by the setting, even if also allowed.
    gke = outbound.Policy.from_settings(
        settings.NotifySettings(denied_networks=("34.118.224.0/20",), allowed_networks=("34.118.224.0/24",))
    )
    assert outbound.forbidden(ipaddress.ip_address("34.118.224.10"), gke) is not None
    assert outbound.forbidden(ipaddress.ip_address("34.118.240.1"), gke) is None


def test_host_patterns() -> None:
    only = outbound.Policy.from_settings(
        settings.NotifySettings(allowed_hosts=("hooks.slack.com", "*.example.com"))
    )
    assert only.host_allowed("hooks.slack.com") and only.host_allowed("HOOKS.example.com")
    assert not only.host_allowed("example.com.evil.test") and not only.host_allowed("slack.com")
    assert NOTHING.host_allowed("anything.test")


def test_settings_refuse_a_bad_network() -> None:
    with pytest.raises(settings.SettingsError, match=r"AGENTRUN_NOTIFY_ALLOWED_NETWORKS: '10\.0\.0\.0/33'"):
        settings.from_env(
            {"AGENTRUN_DSN": "x", "AGENTRUN_NOTIFY_ALLOWED_NETWORKS": "127.0.0.1/32, 10.0.0.0/33"}
        )
    got = settings.from_env({"AGENTRUN_DSN": "x", "AGENTRUN_NOTIFY_ALLOWED_NETWORKS": "127.0.0.1/32, ::1"})
    assert got.notify.allowed_networks == ("127.0.0.1/32", "::1/128")
    assert got.notify.denied_networks == () and got.notify.allowed_hosts == ("*",)
    # In a cluster the API server's Service address is denied, even when it is a public address.
    inside = settings.from_env({"AGENTRUN_DSN": "x", "KUBERNETES_SERVICE_HOST": "34.118.224.1"})
    assert inside.notify.denied_networks == ("34.118.224.1/32",)
    policy = outbound.Policy.from_settings(inside.notify)
    assert outbound.forbidden(ipaddress.ip_address("34.118.224.1"), policy) is not None


@pytest.fixture
def hidden() -> Iterator[Receiver]:
    """A receiver on loopback that no policy here allows: it must never get a request."""
    server = Receiver(host="127.0.0.2").start()
    yield server
    server.close()


def post(url: str, policy: outbound.Policy = LOOPBACK) -> notify_http.Outcome:
    return notify_http.post(url, {"a": 1}, {"Idempotency-Key": "ak-x"}, 5.0, policy)


def test_a_refused_target_gets_nothing_and_the_outcome_names_no_address(
    hidden: Receiver, receiver: Receiver
) -> None:
    port, near = hidden.server.server_address[1], receiver.server.server_address[1]
    for url, policy in (
        (hidden.url, LOOPBACK),  # 127.0.0.2: loopback, not allowed
        (f"http://[::ffff:127.0.0.2]:{port}/x", LOOPBACK),  # the same, IPv4-mapped
        (f"http://localhost:{near}/x", NOTHING),  # a name that resolves to loopback
        ("http://169.254.169.254/latest/meta-data/", LOOPBACK),
    ):
        out = post(url, policy)
        assert out.kind == notify_outcome.REFUSED, (url, out)
        assert "127.0.0" not in out.detail and "169.254" not in out.detail and out.status is None
    # The allowed receiver is refused too under a policy that does not allow loopback.
    assert post(receiver.url, NOTHING).kind == notify_outcome.REFUSED
    assert hidden.requests == [] and receiver.requests == []
    assert post(receiver.url).kind == notify_outcome.DELIVERED and len(receiver.requests) == 1


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_a_redirect_is_not_followed(hidden: Receiver, receiver: Receiver, code: int) -> None:
    receiver.answers = [code]
    receiver.location = hidden.url
    out = post(receiver.url)
    assert (
        out.kind == notify_outcome.REJECTED and "not followed" in out.detail and hidden.url not in out.detail
    )
    assert len(receiver.requests) == 1 and hidden.requests == []


def test_the_checked_address_is_the_one_connected(
    receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Resolved once: a name whose second answer differs (DNS rebinding) is connected to its checked one."""
    answers = iter(["127.0.0.1", "169.254.169.254"])
    real = socket.getaddrinfo

    def rebinding(host: str, port: object, *args: object, **kw: object) -> list[object]:
        if host == "rebind.test":
            return real(next(answers), port, *args, **kw)  # type: ignore[arg-type]
        return real(host, port, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    port = receiver.server.server_address[1]
    assert post(f"http://rebind.test:{port}/x").kind == notify_outcome.DELIVERED
    (req,) = receiver.requests
    assert req.headers["Host"] == f"rebind.test:{port}"  # the name stays the request's Host


def test_what_is_said_of_a_url_keeps_no_user_info(receiver: Receiver) -> None:
    port = receiver.server.server_address[1]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    out = post(f"http://user:s3cret@127.0.0.1:{closed}/x?token=t0k")
    assert out.kind == notify_outcome.NOT_PROCESSED and f"127.0.0.1:{closed}" in out.detail
    assert "s3cret" not in out.detail and "t0k" not in out.detail and port != closed


def test_https_is_verified_against_the_name_and_sent_to_the_checked_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pinned to the checked address, the TLS server name and the certificate check stay the URL's name."""
    openssl = shutil.which("openssl")
    assert openssl is not None, "openssl (the CLI) makes this test's certificate"
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            *(openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-keyout", str(key)),
            *("-out", str(cert), "-subj", "/CN=hooks.test", "-addext", "subjectAltName=DNS:hooks.test"),
        ],
        check=True,
        capture_output=True,
    )
    server = Receiver()
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    server.server.socket = tls.wrap_socket(server.server.socket, server_side=True)
    server.start()
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # trusted by the client's default context
    real = socket.getaddrinfo

    def names(host: str, port: object, *args: object, **kw: object) -> list[object]:
        return real("127.0.0.1" if host.endswith(".test") else host, port, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(socket, "getaddrinfo", names)
    port = server.server.server_address[1]
    try:
        assert post(f"https://hooks.test:{port}/x").kind == notify_outcome.DELIVERED
        (req,) = server.requests
        assert req.headers["Host"] == f"hooks.test:{port}"
        # A name the certificate does not cover: the handshake fails, not a byte of the request is sent.
        other = post(f"https://other.test:{port}/x")
        assert other.kind == notify_outcome.NOT_PROCESSED and "certificate" in other.detail.lower(), other
        assert len(server.requests) == 1
    finally:
        server.close()
