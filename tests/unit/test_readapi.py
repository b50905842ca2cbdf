"""The read API's pure parts: who a proxied request is (agent_operator.serve.readapi.FrontProxy), which paths
it
answers, and its settings. The whole chain through the real API server: tests/integration/test_read_api.py."""

from __future__ import annotations

import email.message
import json

import pytest

from agent_operator import settings
from agent_operator.serve import readapi

CONFIG = {
    "requestheader-client-ca-file": "-----BEGIN CERTIFICATE-----\n...",
    "requestheader-allowed-names": json.dumps(["front-proxy-client"]),
    "requestheader-username-headers": json.dumps(["X-Remote-User"]),
    "requestheader-group-headers": json.dumps(["X-Remote-Group"]),
    "requestheader-extra-headers-prefix": json.dumps(["X-Remote-Extra-"]),
}


def headers(*pairs: tuple[str, str]) -> email.message.Message:
    """Headers as http.server parses them (repeatable, case-insensitive)."""
    msg = email.message.Message()
    for name, value in pairs:
        msg[name] = value
    return msg


def test_the_front_proxy_names_the_user_groups_and_extra() -> None:
    proxy = readapi.FrontProxy(CONFIG)
    got = proxy.authenticate(
        "front-proxy-client",
        headers(
            ("X-Remote-User", "rita"),
            ("X-Remote-Group", "readers"),
            ("X-Remote-Group", "system:authenticated"),
            ("X-Remote-Extra-Scopes%2Fa", "one"),
        ),
    )
    assert got == {
        "user": "rita",
        "groups": ["readers", "system:authenticated"],
        "extra": {"scopes/a": ["one"]},
    }


@pytest.mark.parametrize("cn", [None, "rita", "front-proxy-client-2"])
def test_headers_count_only_with_the_front_proxys_certificate(cn: str | None) -> None:
    with pytest.raises(readapi.Refused) as refused:
        readapi.FrontProxy(CONFIG).authenticate(cn, headers(("X-Remote-User", "agentrun-admin")))
    assert refused.value.code == 401


def test_no_user_header_is_refused() -> None:
    with pytest.raises(readapi.Refused) as refused:
        readapi.FrontProxy(CONFIG).authenticate("front-proxy-client", headers(("X-Remote-Group", "g")))
    assert refused.value.code == 401 and "no user" in refused.value.message


def test_an_api_server_without_the_aggregation_layer_is_named() -> None:
    with pytest.raises(ValueError, match="--requestheader-client-ca-file"):
        readapi.FrontProxy({})


def test_paths_outside_the_three_resources_are_not_found() -> None:
    reader = readapi.Reader(settings.from_env({"AGENTRUN_DSN": "postgresql://x/y"}), api=None)  # type: ignore[arg-type]
    user = {"user": "rita", "groups": [], "extra": {}}
    assert reader.answer("/apis/read.agentrun.dev/v1alpha1", user)["resources"][0]["name"] == "agentruntraces"
    for path in (
        "/apis/read.agentrun.dev/v1alpha1/namespaces/ns/secrets/x",
        "/apis/read.agentrun.dev/v1alpha1/agentruntraces",
        "/apis/read.agentrun.dev/v1alpha1/namespaces/ns/agentruntraces/a/b",
        "/api/v1/namespaces/ns/agentruntraces/x",
    ):
        with pytest.raises(readapi.Refused) as refused:
            reader.answer(path, user)  # never reaches the API server (api=None would fail)
        assert refused.value.code == 404, path


def test_a_port_needs_a_certificate() -> None:
    with pytest.raises(settings.SettingsError, match="AGENTRUN_READ_API_CERT"):
        settings.from_env({"AGENTRUN_DSN": "postgresql://x/y", "AGENTRUN_READ_API_PORT": "8443"})
    cfg = settings.from_env(
        {
            "AGENTRUN_DSN": "postgresql://x/y",
            "AGENTRUN_READ_API_PORT": "8443",
            "AGENTRUN_READ_API_CERT": "/c",
            "AGENTRUN_READ_API_KEY": "/k",
        }
    )
    assert cfg.read_api == settings.ReadApiSettings(port=8443, address="0.0.0.0", cert="/c", key="/k")
