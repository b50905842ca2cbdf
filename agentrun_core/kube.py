"""The worker's only Kubernetes client code: an ApiClient, and Lease get/create/replace.

Leases travel as plain JSON dicts (camelCase, exactly what the API server sends), not as the generated
``V1Lease`` models: the models re-serialise ``renewTime`` with ``datetime.isoformat()``, which drops the
fraction when it is zero, while ``MicroTime`` wants RFC 3339 with exactly six digits. Dicts also match
what the operator gets from kopf, so ``lease_math.LeaseSummary.from_body`` serves both.

HTTP 404 and 409 surface as ``NotFound`` / ``Conflict`` (``AlreadyExists`` on create); transport
failures, timeouts, 429 and 5xx as ``Unavailable``. Callers decide what each means for ownership.
"""

from __future__ import annotations

import datetime
import json
import os
from typing import Any

import kubernetes.client
import kubernetes.config
import urllib3

LeaseBody = dict[str, Any]

_LEASES = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
_LEASE = _LEASES + "/{name}"


class KubeError(Exception):
    """A Kubernetes API call failed. ``status`` is the HTTP status, None for transport failures."""

    def __init__(self, message: str, status: int | None = None, reason: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class NotFound(KubeError):
    """404: the object does not exist (or was deleted under us)."""


class Conflict(KubeError):
    """409: the compare-and-swap lost (``resourceVersion`` is stale)."""


class AlreadyExists(Conflict):
    """409 on create: somebody created the object first."""


class Unavailable(KubeError):
    """The API server could not be reached or asked us to come back later (timeout, refused, 429, 5xx)."""


def load_api_client(kubeconfig: str | None = None) -> kubernetes.client.ApiClient:
    """An ApiClient from ``kubeconfig`` or ``$KUBECONFIG`` if set, else the in-cluster service account.

    urllib3's own retries are switched off: the lease keeper retries on its own schedule and must see a
    failure within its request timeout, not after urllib3 quietly tried three more times.
    """
    configuration = kubernetes.client.Configuration()
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path:
        # A KUBECONFIG may list several files; the first names the one to use (as kubectl merges).
        kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=path.split(os.pathsep)[0], client_configuration=configuration
        )
    else:
        kubernetes.config.load_incluster_config(  # type: ignore[no-untyped-call]
            client_configuration=configuration
        )
    configuration.retries = False
    return kubernetes.client.ApiClient(configuration)


def micro_time(when: datetime.datetime | None = None) -> str:
    """A ``MicroTime`` string (RFC 3339, UTC, exactly six fractional digits). Informative only."""
    when = when or datetime.datetime.now(datetime.UTC)
    return when.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _request(
    api: kubernetes.client.ApiClient,
    method: str,
    path: str,
    path_params: dict[str, str],
    body: LeaseBody | None,
    timeout: float | None,
) -> LeaseBody:
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = "application/json"
    request = api.param_serialize(
        method=method,
        resource_path=path,
        path_params=path_params,
        header_params=headers,
        body=body,
        auth_settings=["BearerToken"],
    )
    try:
        response = api.call_api(*request, _request_timeout=timeout)
        response.read()  # type: ignore[no-untyped-call]
    except kubernetes.client.ApiException as exc:  # the REST layer raises for some statuses itself
        raise _translate(exc.status, exc.reason, exc.body) from exc
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise Unavailable(f"{method} {path_params}: {exc}") from exc
    status = int(response.status)
    text = response.data.decode("utf-8") if response.data else ""
    if not 200 <= status <= 299:
        raise _translate(status, response.reason, text)
    result: LeaseBody = json.loads(text)
    return result


def _translate(status: int | None, reason: str | None, text: str | None) -> KubeError:
    detail, api_reason = text or "", reason
    try:
        payload = json.loads(text or "")
        detail = payload.get("message", detail)
        api_reason = payload.get("reason", reason)
    except (ValueError, AttributeError):
        pass
    message = f"HTTP {status} {api_reason}: {detail}"
    if status == 404:
        return NotFound(message, status, api_reason)
    if status == 409:
        cls = AlreadyExists if api_reason == "AlreadyExists" else Conflict
        return cls(message, status, api_reason)
    if status is None or status == 0 or status == 429 or status >= 500:
        return Unavailable(message, status, api_reason)
    return KubeError(message, status, api_reason)


def get_lease(
    api: kubernetes.client.ApiClient, namespace: str, name: str, *, timeout: float | None = None
) -> LeaseBody:
    """The Lease as JSON. Raises ``NotFound``, ``Unavailable``, ``KubeError``."""
    return _request(api, "GET", _LEASE, {"namespace": namespace, "name": name}, None, timeout)


def create_lease(
    api: kubernetes.client.ApiClient, namespace: str, body: LeaseBody, *, timeout: float | None = None
) -> LeaseBody:
    """Create a Lease (``body`` is its JSON). Raises ``AlreadyExists`` if one by that name exists."""
    body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", **body}
    return _request(api, "POST", _LEASES, {"namespace": namespace}, body, timeout)


def replace_lease(
    api: kubernetes.client.ApiClient,
    namespace: str,
    name: str,
    body: LeaseBody,
    *,
    timeout: float | None = None,
) -> LeaseBody:
    """PUT the Lease. With ``metadata.resourceVersion`` set this is a compare-and-swap: ``Conflict`` when
    anyone wrote since that version, ``NotFound`` when it was deleted."""
    body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", **body}
    return _request(api, "PUT", _LEASE, {"namespace": namespace, "name": name}, body, timeout)


def delete_lease(
    api: kubernetes.client.ApiClient, namespace: str, name: str, *, timeout: float | None = None
) -> None:
    """Delete the Lease (tests and cleanup). Raises ``NotFound``."""
    _request(api, "DELETE", _LEASE, {"namespace": namespace, "name": name}, None, timeout)
