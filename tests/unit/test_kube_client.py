"""The one Kubernetes client (agentrun_core.kube): every HTTP answer becomes one error class, in one place,
and the CLI's user messages are derived from those errors (no second API layer)."""

from __future__ import annotations

import json
from typing import Any

import kubernetes.client
import pytest
import urllib3

from agentrun import cluster
from agentrun_core import kube


def _status(code: int, reason: str, message: str) -> str:
    return json.dumps({"kind": "Status", "code": code, "reason": reason, "message": message})


@pytest.mark.parametrize(
    ("status", "reason", "cls"),
    [
        (404, "NotFound", kube.NotFound),
        (409, "AlreadyExists", kube.AlreadyExists),
        (409, "Conflict", kube.Conflict),
        (403, "Forbidden", kube.Forbidden),
        (410, "Expired", kube.Gone),
        (429, "TooManyRequests", kube.Unavailable),
        (503, "ServiceUnavailable", kube.Unavailable),
        (0, "SSLError", kube.Unavailable),
        (422, "Invalid", kube.KubeError),
    ],
)
def test_each_status_is_one_class(status: int, reason: str, cls: type[kube.KubeError]) -> None:
    exc = kube.errors.translate(status, "HTTP reason", _status(status, reason, "the words"))
    assert type(exc) is cls
    assert isinstance(exc, kube.KubeError)
    assert (exc.status, exc.reason, exc.detail) == (status, reason, "the words")
    assert str(exc) == f"HTTP {status} {reason}: the words"


def test_conflict_family_is_what_the_lease_engine_catches() -> None:
    assert issubclass(kube.AlreadyExists, kube.Conflict)
    assert kube.NotFound is kube.errors.NotFound and kube.KubeError is kube.errors.KubeError


def test_detail_is_the_raw_body_or_reason_when_not_a_status() -> None:
    assert kube.errors.translate(500, "Internal", "plain text").detail == "plain text"
    assert kube.errors.translate(500, "Internal", "").detail == "Internal"
    assert kube.errors.translate(500, "Internal", json.dumps({"reason": "X"})).detail == "Internal"


class _Response:
    def __init__(self, status: int, data: bytes, reason: str = "") -> None:
        self.status, self.data, self.reason = status, data, reason
        self.response = self

    def read(self) -> bytes:
        return self.data


class _Api:
    """Stands in for ApiClient: records the serialised request, answers with ``answer`` (or raises it)."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.seen: dict[str, Any] = {}

    def param_serialize(self, **kwargs: Any) -> tuple[Any, ...]:
        self.seen = kwargs
        return (kwargs["method"], kwargs["resource_path"], kwargs["header_params"], kwargs["body"], None)

    def call_api(self, *args: Any, _request_timeout: Any = None) -> _Response:
        self.seen["timeout"] = _request_timeout
        if isinstance(self.answer, BaseException):
            raise self.answer
        answer: _Response = self.answer
        return answer


def _api(answer: Any) -> Any:
    return _Api(answer)


def test_request_returns_json_and_names_its_content_type() -> None:
    api = _api(_Response(200, b'{"metadata": {"name": "r"}}'))
    body = kube.runs.patch(api, "ns", "r", {"metadata": {"annotations": {"a": None}}}, timeout=3)
    assert body == {"metadata": {"name": "r"}}
    assert api.seen["method"] == "PATCH" and api.seen["path_params"] == {"namespace": "ns", "name": "r"}
    assert api.seen["header_params"]["Content-Type"] == "application/merge-patch+json"
    assert api.seen["timeout"] == 3
    assert kube.api.request(_api(_Response(200, b"")), "DELETE", "/x", {}) == {}


def test_request_translates_answers_and_transport_failures() -> None:
    with pytest.raises(kube.NotFound, match="HTTP 404 NotFound: gone"):
        kube.runs.get(_api(_Response(404, _status(404, "NotFound", "gone").encode())), "ns", "r")
    with pytest.raises(kube.Conflict):
        kube.api.request(_api(kubernetes.client.ApiException(status=409, reason="Conflict")), "GET", "/x", {})
    refused = urllib3.exceptions.NewConnectionError(None, "Connection refused")  # type: ignore[arg-type]
    with pytest.raises(kube.Unavailable) as info:
        kube.get_lease(_api(refused), "ns", "l", timeout=1.0)
    assert info.value.status is None and info.value.detail == str(refused)


@pytest.mark.parametrize(
    ("exc", "name", "shown"),
    [
        (
            kube.errors.translate(404, "", _status(404, "NotFound", "x")),
            "r",
            'AgentRun "r" not found in namespace "ns"',
        ),
        (kube.errors.translate(404, "", _status(404, "NotFound", "x")), None, "get it failed (HTTP 404): x"),
        (
            kube.errors.translate(403, "", _status(403, "Forbidden", "no")),
            "r",
            "the API server refused to get it: no",
        ),
        (
            kube.errors.translate(422, "", _status(422, "Invalid", "bad")),
            "r",
            "get it failed (HTTP 422): bad",
        ),
        (kube.Unavailable("GET /x: boom", detail="boom"), "r", "cannot reach the API server: boom"),
    ],
)
def test_cli_messages_come_from_core_errors(exc: kube.KubeError, name: str | None, shown: str) -> None:
    assert cluster.message(exc, "get it", "ns", name) == shown
    with pytest.raises(cluster.CliError) as info, cluster.translated("get it", "ns", name):
        raise exc
    assert str(info.value) == shown


def test_cli_get_run_turns_a_404_into_the_user_message() -> None:
    api = _api(_Response(404, _status(404, "NotFound", 'agentruns.agentrun.dev "r" not found').encode()))
    with pytest.raises(cluster.CliError) as info:
        cluster.get_run(api, "ns", "r")
    assert str(info.value) == 'AgentRun "r" not found in namespace "ns"'


def test_cli_kubeconfig_failure_is_a_cli_error(tmp_path: Any) -> None:
    with pytest.raises(cluster.CliError, match="cannot load kubeconfig"):
        cluster.connect(str(tmp_path / "missing"))
