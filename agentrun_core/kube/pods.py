"""Pod calls: the operator's worker Pods, the CLI's logs, and the dev pod runtime acting as kubelet and
scheduler of its one node.

Rule: Pods travel as JSON dicts. A delete names its options explicitly (grace period, uid precondition,
propagation): which Pod may go, and how fast, is the caller's decision, not this module's.
"""

from __future__ import annotations

from collections.abc import Iterator

import urllib3

from agentrun_core.kube import api as api_

Body = api_.Body

ALL = "/api/v1/pods"
PODS = "/api/v1/namespaces/{namespace}/pods"
POD = PODS + "/{name}"


def get(api: api_.ApiClient, namespace: str, name: str, *, timeout: float | None = None) -> Body:
    return api_.request(api, "GET", POD, {"namespace": namespace, "name": name}, timeout=timeout)


def create(api: api_.ApiClient, namespace: str, body: Body, *, timeout: float | None = None) -> Body:
    """Create the Pod. ``AlreadyExists`` when one by that name exists."""
    return api_.request(api, "POST", PODS, {"namespace": namespace}, body, timeout=timeout)


def delete(
    api: api_.ApiClient,
    namespace: str,
    name: str,
    *,
    grace_seconds: int | None = None,
    uid: str | None = None,
    background: bool = True,
    timeout: float | None = None,
) -> None:
    """Delete the Pod (grace period from the Pod unless ``grace_seconds``; only while it is the object with
    ``uid`` when given: ``Conflict`` otherwise). ``NotFound`` when it is gone."""
    options: Body = {"propagationPolicy": "Background"} if background else {}
    if grace_seconds is not None:
        options["gracePeriodSeconds"] = grace_seconds
    if uid is not None:
        options["preconditions"] = {"uid": uid}
    api_.request(api, "DELETE", POD, {"namespace": namespace, "name": name}, options, timeout=timeout)


def remove_finalizer(
    api: api_.ApiClient, namespace: str, name: str, finalizer: str, *, timeout: float | None = None
) -> Body:
    """Remove ``finalizer`` from the Pod, leaving any other finalizer in place: a strategic merge patch's
    ``$deleteFromPrimitiveList`` names the value, not its index, so no read-modify-write race. A no-op
    when the Pod does not carry it. ``NotFound`` when the Pod is gone."""
    body = {"metadata": {"$deleteFromPrimitiveList/finalizers": [finalizer]}}
    params = {"namespace": namespace, "name": name}
    return api_.patch(api, POD, params, body, api_.STRATEGIC_MERGE_PATCH, timeout=timeout)


def list_(
    api: api_.ApiClient, namespace: str | None, *, label_selector: str = "", timeout: float | None = None
) -> Body:
    """The PodList (``items``, ``metadata.resourceVersion`` to watch from) of ``namespace``, or of all
    namespaces with None."""
    query = [("labelSelector", label_selector)] if label_selector else []
    if namespace is None:
        return api_.request(api, "GET", ALL, {}, query=query, timeout=timeout)
    return api_.request(api, "GET", PODS, {"namespace": namespace}, query=query, timeout=timeout)


def watch_all(api: api_.ApiClient, resource_version: str, timeout_s: int) -> Iterator[Body]:
    """Watch events of every Pod from ``resource_version`` (bookmarks included) until the server closes the
    stream after ``timeout_s``. ``errors.Gone`` when the version expired."""
    query = [
        ("allowWatchBookmarks", "true"),
        ("resourceVersion", resource_version),
        ("timeoutSeconds", str(timeout_s)),
        ("watch", "true"),
    ]
    return api_.watch_events(api, ALL, {}, query, timeout_s + 30)


def bind(api: api_.ApiClient, namespace: str, name: str, uid: str, node: str) -> Body:
    """Schedule the Pod (uid precondition) onto ``node``: what a scheduler does."""
    body = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    return api_.request(api, "POST", POD + "/binding", {"namespace": namespace, "name": name}, body)


def patch_status(api: api_.ApiClient, namespace: str, name: str, body: Body) -> Body:
    """Strategic-merge-patch the Pod's status (what a kubelet writes)."""
    params = {"namespace": namespace, "name": name}
    return api_.patch(api, POD + "/status", params, body, api_.STRATEGIC_MERGE_PATCH)


def log(
    api: api_.ApiClient, namespace: str, name: str, container: str, *, follow: bool, tail: int | None
) -> urllib3.HTTPResponse:
    """The container's log as an open response (``pods/log``, what ``kubectl logs`` reads)."""
    query = [("container", container), ("follow", "true" if follow else "false")]
    if tail is not None:
        query.append(("tailLines", str(tail)))
    return api_.stream(api, POD + "/log", {"namespace": namespace, "name": name}, query=query)
