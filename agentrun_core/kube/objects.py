"""Calls on the other objects agentrun touches: Secrets, ConfigMaps, ServiceAccounts and their tokens,
Namespaces, Events, Nodes and admission policies.

Rule: each function is one request (plus at most the fallback its docstring names), bodies are JSON dicts,
and failures stay ``errors.KubeError`` subclasses for the caller to judge. Secret values are credentials:
nothing here logs a body.
"""

from __future__ import annotations

from agentrun_core.kube import api as api_
from agentrun_core.kube import errors

Body = api_.Body

SECRETS = "/api/v1/namespaces/{namespace}/secrets"
SECRET = SECRETS + "/{name}"
CONFIG_MAP = "/api/v1/namespaces/{namespace}/configmaps/{name}"
SERVICE_ACCOUNT = "/api/v1/namespaces/{namespace}/serviceaccounts/{name}"
EVENTS = "/api/v1/namespaces/{namespace}/events"
NAMESPACES = "/api/v1/namespaces"
NAMESPACE = NAMESPACES + "/{name}"
NODES = "/api/v1/nodes"
NODE = NODES + "/{name}"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
ADMISSION = "/apis/admissionregistration.k8s.io/v1/{kind}/{name}"
SELF_SUBJECT_REVIEWS = "/apis/authentication.k8s.io/v1/selfsubjectreviews"


# --- Secrets, ConfigMaps, ServiceAccounts ----------------------------------------------------------------


def get_secret(api: api_.ApiClient, namespace: str, name: str, *, timeout: float | None = None) -> Body:
    return api_.request(api, "GET", SECRET, {"namespace": namespace, "name": name}, timeout=timeout)


def put_secret(api: api_.ApiClient, namespace: str, body: Body, *, timeout: float | None = None) -> None:
    """Create the Secret, or replace it when it exists."""
    name = str(body["metadata"]["name"])
    try:
        api_.request(api, "POST", SECRETS, {"namespace": namespace}, body, timeout=timeout)
    except errors.AlreadyExists:
        api_.request(api, "PUT", SECRET, {"namespace": namespace, "name": name}, body, timeout=timeout)


def get_config_map(api: api_.ApiClient, namespace: str, name: str) -> Body:
    return api_.request(api, "GET", CONFIG_MAP, {"namespace": namespace, "name": name})


def get_service_account(api: api_.ApiClient, namespace: str, name: str) -> Body:
    return api_.request(api, "GET", SERVICE_ACCOUNT, {"namespace": namespace, "name": name})


def request_token(api: api_.ApiClient, namespace: str, service_account: str, body: Body) -> Body:
    """A TokenRequest for the ServiceAccount (``body`` its JSON); the answer carries ``status.token``."""
    params = {"namespace": namespace, "name": service_account}
    return api_.request(api, "POST", SERVICE_ACCOUNT + "/token", params, body)


def whoami(api: api_.ApiClient, *, timeout: float | None = None) -> Body:
    """The caller's identity as the API server authenticated it (a SelfSubjectReview, what ``kubectl auth
    whoami`` shows): ``status.userInfo.username`` and ``.groups`` are ``request.userInfo`` of its requests."""
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    return api_.request(api, "POST", SELF_SUBJECT_REVIEWS, {}, body, timeout=timeout)


def access_allowed(api: api_.ApiClient, spec: Body, *, timeout: float | None = None) -> tuple[bool, str]:
    """A SubjectAccessReview of ``spec`` (user, groups, extra, uid, resourceAttributes): (allowed, the
    authorizer's reason, possibly empty)."""
    body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
    status = api_.request(api, "POST", ACCESS_REVIEWS, {}, body, timeout=timeout).get("status") or {}
    return bool(status.get("allowed")), str(status.get("reason") or status.get("evaluationError") or "")


# --- Namespaces and Events -------------------------------------------------------------------------------


def get_namespace(api: api_.ApiClient, name: str, *, timeout: float | None = None) -> Body:
    return api_.request(api, "GET", NAMESPACE, {"name": name}, timeout=timeout)


def list_namespaces(api: api_.ApiClient, *, timeout: float | None = None) -> list[Body]:
    items: list[Body] = api_.request(api, "GET", NAMESPACES, {}, timeout=timeout).get("items", [])
    return items


def create_event(api: api_.ApiClient, namespace: str, body: Body, *, timeout: float | None = None) -> Body:
    return api_.request(api, "POST", EVENTS, {"namespace": namespace}, body, timeout=timeout)


# --- Nodes -------------------------------------------------------------------------------------------------


def get_node(api: api_.ApiClient, name: str) -> Body:
    return api_.request(api, "GET", NODE, {"name": name})


def create_node(api: api_.ApiClient, body: Body) -> Body:
    return api_.request(api, "POST", NODES, {}, body)


def patch_node(api: api_.ApiClient, name: str, body: Body, *, status: bool = False) -> Body:
    """Strategic-merge-patch the Node (its ``status`` subresource with ``status``)."""
    path = NODE + "/status" if status else NODE
    return api_.patch(api, path, {"name": name}, body, api_.STRATEGIC_MERGE_PATCH)


# --- admission policies (cluster-scoped) -------------------------------------------------------------------


def get_admission_object(
    api: api_.ApiClient, plural: str, name: str, *, timeout: float | None = None
) -> Body:
    """A ValidatingAdmissionPolicy / MutatingAdmissionPolicy (or binding) by its plural and name."""
    return api_.request(api, "GET", ADMISSION, {"kind": plural, "name": name}, timeout=timeout)
