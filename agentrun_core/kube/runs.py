"""AgentRun calls (``agentrun.dev/v1alpha1``), for the operator and the CLI.

Rule: patches are JSON merge patches (``None`` removes a key); ``.status`` is written only through the status
subresource. Which failures matter is the caller's to say (the CLI turns them into user messages, the
operator into retries).
"""

from __future__ import annotations

from agentrun_core.kube import api as api_

Body = api_.Body

GROUP, VERSION, PLURAL = "agentrun.dev", "v1alpha1", "agentruns"
API_VERSION = f"{GROUP}/{VERSION}"
ALL = f"/apis/{GROUP}/{VERSION}/{PLURAL}"
RUNS = f"/apis/{GROUP}/{VERSION}/namespaces/{{namespace}}/{PLURAL}"
RUN = RUNS + "/{name}"


def get(api: api_.ApiClient, namespace: str, name: str, *, timeout: float | None = None) -> Body:
    return api_.request(api, "GET", RUN, {"namespace": namespace, "name": name}, timeout=timeout)


def list_(api: api_.ApiClient, namespace: str | None, *, timeout: float | None = None) -> list[Body]:
    """The AgentRuns of ``namespace`` (all namespaces with None), in the API server's order."""
    if namespace is None:
        listing = api_.request(api, "GET", ALL, {}, timeout=timeout)
    else:
        listing = api_.request(api, "GET", RUNS, {"namespace": namespace}, timeout=timeout)
    items: list[Body] = listing.get("items", [])
    return items


def create(api: api_.ApiClient, namespace: str, body: Body, *, timeout: float | None = None) -> Body:
    return api_.request(api, "POST", RUNS, {"namespace": namespace}, body, timeout=timeout)


def patch(
    api: api_.ApiClient, namespace: str, name: str, body: Body, *, timeout: float | None = None
) -> Body:
    """Merge-patch the AgentRun (metadata, spec). The API server's refusal (schema, CEL, admission
    policies) comes back as the KubeError's ``detail``."""
    return api_.request(
        api,
        "PATCH",
        RUN,
        {"namespace": namespace, "name": name},
        body,
        content_type=api_.MERGE_PATCH,
        timeout=timeout,
    )


def patch_status(
    api: api_.ApiClient, namespace: str, name: str, body: Body, *, timeout: float | None = None
) -> Body:
    """Merge-patch through the status subresource (spec and metadata other than a resourceVersion
    precondition are ignored there)."""
    return api_.request(
        api,
        "PATCH",
        RUN + "/status",
        {"namespace": namespace, "name": name},
        body,
        content_type=api_.MERGE_PATCH,
        timeout=timeout,
    )


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
