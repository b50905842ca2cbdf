"""The one HTTP entry point to the Kubernetes API server: clients built from a kubeconfig, ``request`` and
``stream``.

Rule: every call of worker, operator, CLI and dev pod runtime goes through ``request`` (a JSON answer) or
``stream`` (a body read as it arrives: logs, watches), and every failure leaves it as an
``errors.KubeError`` subclass. Bodies travel as plain JSON dicts (camelCase, exactly what the API server
sends), never as the generated models: those re-serialise ``MicroTime`` wrongly and reject some valid
answers (``pods/binding`` answers with a Status the ``V1Binding`` model refuses).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import kubernetes.client
import kubernetes.config
import urllib3

from agentrun_core.kube import errors

Body = dict[str, Any]
ApiClient = kubernetes.client.ApiClient
Query = list[tuple[str, str]]

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


# Where an ApiClient keeps the identity it impersonates (``impersonate``): (user, groups).
_IMPERSONATION = "_agentrun_impersonation"


def impersonate(api: ApiClient, user: str, groups: tuple[str, ...] = ()) -> None:
    """Send every later request of ``api`` as ``user`` (and ``groups``), as kubectl's ``--as`` /
    ``--as-group`` do: the ``Impersonate-User`` / ``Impersonate-Group`` headers, which the API server honours
    only when the kubeconfig's own identity may ``impersonate`` that user and those groups (RBAC), and then
    authorizes the request (admission policies see ``request.userInfo``) as the impersonated identity."""
    setattr(api, _IMPERSONATION, (user, tuple(groups)))


def _headers(api: ApiClient, headers: dict[str, str]) -> Any:
    """``headers`` with the impersonation headers of ``api`` (one line per group: the API server reads each
    ``Impersonate-Group`` line as one group, so they cannot be joined into one line)."""
    who: tuple[str, tuple[str, ...]] | None = getattr(api, _IMPERSONATION, None)
    if who is None:
        return headers
    out = urllib3.HTTPHeaderDict(headers)
    out["Impersonate-User"] = who[0]
    for group in who[1]:
        out.add("Impersonate-Group", group)
    return out


def load_api_client(kubeconfig: str | None = None) -> ApiClient:
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


def user_client(kubeconfig: str | None = None, context: str | None = None) -> tuple[ApiClient, str]:
    """The CLI's client, as kubectl resolves it (``kubeconfig``, else ``$KUBECONFIG`` merged, else
    ``~/.kube/config``; ``context``, else the current one), and that context's namespace (``default`` when it
    names none). urllib3 keeps its retries: a person waits, nothing else retries. ``errors.ConfigError``
    carries the loader's own message."""
    configuration = kubernetes.client.Configuration()
    try:
        kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, context=context, client_configuration=configuration
        )
        contexts, active = kubernetes.config.list_kube_config_contexts(  # type: ignore[no-untyped-call]
            config_file=kubeconfig
        )
    except (kubernetes.config.ConfigException, OSError) as exc:
        raise errors.ConfigError(str(exc)) from exc
    if context:
        active = next((c for c in contexts if c["name"] == context), active)
    namespace = (active or {}).get("context", {}).get("namespace") or "default"
    return kubernetes.client.ApiClient(configuration), namespace


def pooled_client(kubeconfig: str, pool_size: int) -> ApiClient:
    """A client from the kubeconfig file with ``pool_size`` connections (the dev pod runtime: one watch and
    one request per busy pod thread; the default pool, cpu*5, would serialise them)."""
    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=kubeconfig, client_configuration=configuration
    )
    configuration.connection_pool_maxsize = pool_size
    return kubernetes.client.ApiClient(configuration)


def _send(
    api: ApiClient,
    method: str,
    path: str,
    params: dict[str, str],
    body: Any,
    content_type: str,
    query: Query | None,
    timeout: float | None,
) -> Any:
    """The raw response (status 2xx, body not read yet); any failure as a KubeError."""
    headers = {"Accept": JSON}
    if body is not None:
        headers["Content-Type"] = content_type
    method_, url, header_params, body_, post_params = api.param_serialize(
        method=method,
        resource_path=path,
        path_params=params,
        query_params=query or [],
        header_params=headers,
        body=body,
        auth_settings=["BearerToken"],
    )
    try:
        response = api.call_api(
            method_, url, _headers(api, header_params), body_, post_params, _request_timeout=timeout
        )
    except kubernetes.client.ApiException as exc:  # the REST layer raises for some failures itself
        raise errors.translate(exc.status, exc.reason, exc.body) from exc
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise errors.Unavailable(f"{method} {path} {params}: {exc}", detail=str(exc)) from exc
    status = int(response.status)
    if not 200 <= status <= 299:
        try:
            response.read()  # type: ignore[no-untyped-call]
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise errors.Unavailable(f"{method} {path} {params}: {exc}", detail=str(exc)) from exc
        text = response.data.decode("utf-8") if response.data else ""
        raise errors.translate(status, response.reason, text)
    return response


def request(
    api: ApiClient,
    method: str,
    path: str,
    params: dict[str, str],
    body: Any = None,
    *,
    content_type: str = JSON,
    query: Query | None = None,
    timeout: float | None = None,
) -> Body:
    """``method path`` (``{name}`` placeholders filled from ``params``), the JSON answer as a dict (empty when
    the server sent no body). Raises ``errors.KubeError`` subclasses only."""
    response = _send(api, method, path, params, body, content_type, query, timeout)
    try:
        response.read()
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise errors.Unavailable(f"{method} {path} {params}: {exc}", detail=str(exc)) from exc
    text = response.data.decode("utf-8") if response.data else ""
    result: Body = json.loads(text) if text else {}
    return result


def patch(
    api: ApiClient,
    path: str,
    params: dict[str, str],
    body: Body,
    content_type: str,
    *,
    timeout: float | None = None,
) -> Body:
    """PATCH ``path`` with ``body`` as ``content_type`` (``MERGE_PATCH`` or ``STRATEGIC_MERGE_PATCH``: which
    one a kind takes is its module's rule); the object as the server stored it."""
    return request(api, "PATCH", path, params, body, content_type=content_type, timeout=timeout)


def stream(
    api: ApiClient,
    path: str,
    params: dict[str, str],
    *,
    query: Query | None = None,
    timeout: float | None = None,
) -> urllib3.HTTPResponse:
    """GET ``path`` and hand back the open response to read as it arrives (``.stream(n)``); the caller
    calls ``release_conn()``. Failures before the body as in ``request``."""
    response = _send(api, "GET", path, params, None, JSON, query, timeout)
    raw: urllib3.HTTPResponse = response.response
    return raw


def watch_events(
    api: ApiClient, path: str, params: dict[str, str], query: Query, timeout: float
) -> Iterator[Body]:
    """The watch events (``{"type", "object"}``) of a ``?watch=true`` GET, until the server ends the stream.
    An ``ERROR`` event (a Status) is raised as its KubeError (``errors.Gone`` for an expired version)."""
    response = stream(api, path, params, query=query, timeout=timeout)
    try:
        buf = b""
        for chunk in response.stream(amt=65536, decode_content=True):
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if not line.strip():
                    continue
                event: Body = json.loads(line)
                if event.get("type") == "ERROR":
                    obj = event.get("object") or {}
                    raise errors.translate(int(obj.get("code", 500)), str(obj.get("reason")), json.dumps(obj))
                yield event
    finally:
        response.release_conn()
