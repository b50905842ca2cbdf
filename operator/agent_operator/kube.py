"""The operator's only Kubernetes API code (besides what kopf itself watches).

Bodies travel as plain JSON dicts, as in ``agentrun_core.kube`` (whose client loader, Lease calls and error
classes this reuses): ``NotFound``/``Conflict``/``AlreadyExists``/``Unavailable``/``KubeError``.
Every call is synchronous; the handlers run them in threads.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import json
import uuid
from typing import Any

import kubernetes.client
import urllib3

from agent_operator import admission, model
from agentrun_core import kube as worker_kube

Body = dict[str, Any]
ApiClient = kubernetes.client.ApiClient

KubeError = worker_kube.KubeError
NotFound = worker_kube.NotFound
Conflict = worker_kube.Conflict
AlreadyExists = worker_kube.AlreadyExists
Unavailable = worker_kube.Unavailable

GROUP, VERSION, PLURAL = "agentrun.dev", "v1alpha1", "agentruns"
_RUNS = f"/apis/{GROUP}/{VERSION}/namespaces/{{namespace}}/{PLURAL}"
_RUN = _RUNS + "/{name}"
_PODS = "/api/v1/namespaces/{namespace}/pods"
_POD = _PODS + "/{name}"
_EVENTS = "/api/v1/namespaces/{namespace}/events"
_SECRETS = "/api/v1/namespaces/{namespace}/secrets"
_SECRET = _SECRETS + "/{name}"
_ADMISSION = "/apis/admissionregistration.k8s.io/v1/{kind}/{name}"
_LEASE = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
_NAMESPACE = "/api/v1/namespaces/{name}"

TIMEOUT = 10.0  # seconds per request: a reconcile retries on its own schedule

get_lease = worker_kube.get_lease
create_lease = worker_kube.create_lease
replace_lease = worker_kube.replace_lease
micro_time = worker_kube.micro_time


def client(kubeconfig: str | None = None) -> ApiClient:
    return worker_kube.load_api_client(kubeconfig or None)


def _call(
    api: ApiClient,
    method: str,
    path: str,
    params: dict[str, str],
    body: Any = None,
    *,
    content_type: str = "application/json",
    query: list[tuple[str, str]] | None = None,
) -> Body:
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = content_type
    request = api.param_serialize(
        method=method,
        resource_path=path,
        path_params=params,
        query_params=query or [],
        header_params=headers,
        body=body,
        auth_settings=["BearerToken"],
    )
    try:
        response = api.call_api(*request, _request_timeout=TIMEOUT)
        response.read()  # type: ignore[no-untyped-call]
    except kubernetes.client.ApiException as exc:
        raise worker_kube._translate(exc.status, exc.reason, exc.body) from exc
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise Unavailable(f"{method} {path} {params}: {exc}") from exc
    status = int(response.status)
    text = response.data.decode("utf-8") if response.data else ""
    if not 200 <= status <= 299:
        raise worker_kube._translate(status, response.reason, text)
    result: Body = json.loads(text) if text else {}
    return result


# --- AgentRuns -------------------------------------------------------------------------------------------


def get_run(api: ApiClient, namespace: str, name: str) -> Body:
    return _call(api, "GET", _RUN, {"namespace": namespace, "name": name})


def patch_status(
    api: ApiClient, namespace: str, name: str, status_patch: Body, resource_version: str = ""
) -> Body:
    """JSON merge patch of ``.status`` (the status subresource: spec and metadata are untouched).

    With ``resource_version`` the API server applies it only to that version of the object (``Conflict``
    otherwise): a replica that decided on an old view cannot overwrite a newer leader's status.
    """
    body: Body = {"status": status_patch}
    if resource_version:
        body["metadata"] = {"resourceVersion": resource_version}
    return _call(
        api,
        "PATCH",
        _RUN + "/status",
        {"namespace": namespace, "name": name},
        body,
        content_type="application/merge-patch+json",
    )


def remove_annotations(api: ApiClient, namespace: str, name: str, keys: tuple[str, ...]) -> Body:
    return _call(
        api,
        "PATCH",
        _RUN,
        {"namespace": namespace, "name": name},
        {"metadata": {"annotations": dict.fromkeys(keys)}},
        content_type="application/merge-patch+json",
    )


def add_finalizer(
    api: ApiClient, namespace: str, name: str, finalizers: tuple[str, ...], resource_version: str
) -> Body:
    """Add ``agentrun.dev/finalizer`` to ``finalizers``, guarded by resourceVersion.

    On a conflict (kopf or a user wrote in between) the object is read again and the patch retried once.
    """
    for _ in range(2):
        wanted = [*finalizers, model.FINALIZER] if model.FINALIZER not in finalizers else list(finalizers)
        metadata: Body = {"finalizers": wanted}
        if resource_version:
            metadata["resourceVersion"] = resource_version
        try:
            return _call(
                api,
                "PATCH",
                _RUN,
                {"namespace": namespace, "name": name},
                {"metadata": metadata},
                content_type="application/merge-patch+json",
            )
        except Conflict:
            fresh = get_run(api, namespace, name).get("metadata") or {}
            finalizers = tuple(fresh.get("finalizers") or ())
            resource_version = str(fresh.get("resourceVersion") or "")
            if model.FINALIZER in finalizers:
                return {}
    raise Conflict(f"could not add the finalizer to {namespace}/{name}")


def delete_run(api: ApiClient, namespace: str, name: str) -> None:
    with contextlib.suppress(NotFound):
        _call(
            api, "DELETE", _RUN, {"namespace": namespace, "name": name}, {"propagationPolicy": "Background"}
        )


# --- Pods ------------------------------------------------------------------------------------------------


def create_pod(api: ApiClient, namespace: str, body: Body) -> bool:
    """Create the Pod; False when it already exists (deterministic names make creation idempotent)."""
    try:
        _call(api, "POST", _PODS, {"namespace": namespace}, body)
    except AlreadyExists:
        return False
    return True


def delete_pod(api: ApiClient, namespace: str, name: str, *, force: bool = False) -> None:
    """Delete (SIGTERM, grace period from the Pod) or, with ``force``, remove at once (grace 0)."""
    options: Body = {"propagationPolicy": "Background"}
    if force:
        options["gracePeriodSeconds"] = 0
    with contextlib.suppress(NotFound):
        _call(api, "DELETE", _POD, {"namespace": namespace, "name": name}, options)


def get_pod(api: ApiClient, namespace: str, name: str) -> Body:
    return _call(api, "GET", _POD, {"namespace": namespace, "name": name})


# --- Secrets (only the worker DSN Secret the operator provisions) ----------------------------------------


def secret_exists(api: ApiClient, namespace: str, name: str) -> bool:
    try:
        _call(api, "GET", _SECRET, {"namespace": namespace, "name": name})
    except NotFound:
        return False
    return True


def namespace_exists(api: ApiClient, name: str) -> bool:
    """Whether Kubernetes has the namespace (a terminating one still does). Only a 404 says no: any other
    error raises, so an unreachable API server never reads as "gone"."""
    try:
        _call(api, "GET", _NAMESPACE, {"name": name})
    except NotFound:
        return False
    return True


def read_secret_key(api: ApiClient, namespace: str, name: str, key: str) -> str | None:
    """One key of a Secret, decoded (None: the Secret has no such key). ``NotFound`` / ``KubeError`` (403)
    propagate. The value is a credential: callers never log it."""
    body = _call(api, "GET", _SECRET, {"namespace": namespace, "name": name})
    raw = (body.get("data") or {}).get(key)
    if raw is None:
        return None
    return base64.b64decode(str(raw)).decode("utf-8").strip()


def put_secret(api: ApiClient, namespace: str, body: Body) -> None:
    """Create the Secret, or replace it when it exists."""
    name = str(body["metadata"]["name"])
    try:
        _call(api, "POST", _SECRETS, {"namespace": namespace}, body)
    except AlreadyExists:
        _call(api, "PUT", _SECRET, {"namespace": namespace, "name": name}, body)


# --- admission policies ----------------------------------------------------------------------------------

# What makes decision annotations trustworthy (deploy/admission): (plural, name).
ADMISSION_OBJECTS = (
    ("validatingadmissionpolicies", "agentrun-approvals"),
    ("validatingadmissionpolicybindings", "agentrun-approvals"),
    ("mutatingadmissionpolicies", "agentrun-stamp-decided-by"),
    ("mutatingadmissionpolicybindings", "agentrun-stamp-decided-by"),
)


def missing_admission_objects(api: ApiClient) -> list[str]:
    """The decision-guarding admission objects that are absent or not as shipped (``admission.problem``:
    edited CEL, failurePolicy Ignore, a binding without Deny or narrowed)."""
    missing = []
    for kind, name in ADMISSION_OBJECTS:
        try:
            body = _call(api, "GET", _ADMISSION, {"kind": kind, "name": name})
        except NotFound:
            missing.append(f"{kind}/{name}")
            continue
        why = admission.problem(kind, name, body)
        if why is not None:
            missing.append(f"{kind}/{name} ({why})")
    return missing


def delete_exact(api: ApiClient, namespace: str, kind: str, name: str, uid: str) -> None:
    """Delete the Pod or Lease ``name`` only if it is still the object with ``uid`` (a precondition):
    never the object of a run recreated under the same name meanwhile."""
    path = _POD if kind == "pod" else _LEASE
    options: Body = {"propagationPolicy": "Background", "preconditions": {"uid": uid}}
    with contextlib.suppress(NotFound, Conflict):
        _call(api, "DELETE", path, {"namespace": namespace, "name": name}, options)


# --- Events ----------------------------------------------------------------------------------------------


def post_event(
    api: ApiClient, run: model.RunRef, type_: str, reason: str, message: str, component: str
) -> None:
    """A core/v1 Event about the AgentRun (what ``kubectl describe ar`` and ``kubectl get events`` show)."""
    now = datetime.datetime.now(datetime.UTC)
    body: Body = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{run.name}.{uuid.uuid4().hex[:16]}", "namespace": run.namespace},
        "involvedObject": {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "AgentRun",
            "name": run.name,
            "namespace": run.namespace,
            "uid": run.uid,
        },
        "type": type_,
        "reason": reason[:128],
        "message": message[:1024],
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": component,
        "firstTimestamp": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "lastTimestamp": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "count": 1,
    }
    _call(api, "POST", _EVENTS, {"namespace": run.namespace}, body)
