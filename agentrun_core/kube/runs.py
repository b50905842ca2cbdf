"""AgentRun calls (``agentrun.dev/v1alpha1``), for the operator and the CLI.

Rule: patches are JSON merge patches (``None`` removes a key); ``.status`` is written only through the status
subresource. Which failures matter is the caller's to say (the CLI turns them into user messages, the
operator into retries).
"""

from __future__ import annotations

from collections.abc import Iterator

from agentrun_core.kube import api as api_

Body = api_.Body

GROUP, VERSION, PLURAL = "agentrun.dev", "v1alpha1", "agentruns"
API_VERSION = f"{GROUP}/{VERSION}"
ALL = f"/apis/{GROUP}/{VERSION}/{PLURAL}"
RUNS = f"/apis/{GROUP}/{VERSION}/namespaces/{{namespace}}/{PLURAL}"
RUN = RUNS + "/{name}"
# The operator's read API (an aggregated API, ``v1alpha1.read.agentrun.dev``): a run's trace, effects and
# approvals, answered only to a caller who may ``get`` the AgentRun, read through the namespace's tenant role.
READ_GROUP, READ_VERSION = "read.agentrun.dev", "v1alpha1"
READ_API_VERSION = f"{READ_GROUP}/{READ_VERSION}"
READ_RESOURCES = {
    "agentruntraces": "AgentRunTrace",
    "agentruneffects": "AgentRunEffects",
    "agentrunapprovals": "AgentRunApprovals",
}
READ_VIEW = f"/apis/{READ_GROUP}/{READ_VERSION}/namespaces/{{namespace}}/{{resource}}/{{name}}"


def get(api: api_.ApiClient, namespace: str, name: str, *, timeout: float | None = None) -> Body:
    return api_.request(api, "GET", RUN, {"namespace": namespace, "name": name}, timeout=timeout)


def read_view(
    api: api_.ApiClient, namespace: str, name: str, resource: str, *, timeout: float | None = None
) -> Body:
    """One of ``READ_RESOURCES`` of the run, from the read API, as the client's user."""
    params = {"namespace": namespace, "name": name, "resource": resource}
    return api_.request(api, "GET", READ_VIEW, params, timeout=timeout)


def list_(api: api_.ApiClient, namespace: str | None, *, timeout: float | None = None) -> list[Body]:
    """The AgentRuns of ``namespace`` (all namespaces with None), in the API server's order."""
    items: list[Body] = listing(api, namespace, timeout=timeout).get("items", [])
    return items


def _selectors(label: str | None, field: str | None) -> api_.Query:
    query: api_.Query = []
    if label:
        query.append(("labelSelector", label))
    if field:
        query.append(("fieldSelector", field))
    return query


def listing(
    api: api_.ApiClient,
    namespace: str | None,
    *,
    label_selector: str | None = None,
    field_selector: str | None = None,
    timeout: float | None = None,
) -> Body:
    """The list answer itself (``items`` and ``metadata.resourceVersion``, where a watch starts from)."""
    path, params = (ALL, {}) if namespace is None else (RUNS, {"namespace": namespace})
    query = _selectors(label_selector, field_selector)
    return api_.request(api, "GET", path, params, query=query or None, timeout=timeout)


def watch(
    api: api_.ApiClient,
    namespace: str | None,
    resource_version: str,
    *,
    label_selector: str | None = None,
    field_selector: str | None = None,
    timeout_seconds: int = 300,
) -> Iterator[Body]:
    """The changes after ``resource_version`` (``{"type", "object"}``) until the server ends the stream
    (after about ``timeout_seconds``); ``errors.Gone`` when that version is too old to watch from."""
    path, params = (ALL, {}) if namespace is None else (RUNS, {"namespace": namespace})
    query = [
        ("watch", "true"),
        ("resourceVersion", resource_version),
        ("allowWatchBookmarks", "true"),
        ("timeoutSeconds", str(timeout_seconds)),
        *_selectors(label_selector, field_selector),
    ]
    return api_.watch_events(api, path, params, query, timeout_seconds + 30)


def create(api: api_.ApiClient, namespace: str, body: Body, *, timeout: float | None = None) -> Body:
    return api_.request(api, "POST", RUNS, {"namespace": namespace}, body, timeout=timeout)


def patch(
    api: api_.ApiClient, namespace: str, name: str, body: Body, *, timeout: float | None = None
) -> Body:
    """Merge-patch the AgentRun (metadata, spec). The API server's refusal (schema, CEL, admission
    policies) comes back as the KubeError's ``detail``."""
    params = {"namespace": namespace, "name": name}
    return api_.patch(api, RUN, params, body, api_.MERGE_PATCH, timeout=timeout)


def patch_status(
    api: api_.ApiClient, namespace: str, name: str, body: Body, *, timeout: float | None = None
) -> Body:
    """Merge-patch through the status subresource (spec and metadata other than a resourceVersion
    precondition are ignored there)."""
    params = {"namespace": namespace, "name": name}
    return api_.patch(api, RUN + "/status", params, body, api_.MERGE_PATCH, timeout=timeout)


def delete(
    api: api_.ApiClient,
    namespace: str,
    name: str,
    *,
    propagation: str | None = "Background",
    timeout: float | None = None,
) -> None:
    """Delete the AgentRun (``propagation`` None: the server's default, no DeleteOptions sent)."""
    options = None if propagation is None else {"propagationPolicy": propagation}
    api_.request(api, "DELETE", RUN, {"namespace": namespace, "name": name}, options, timeout=timeout)
