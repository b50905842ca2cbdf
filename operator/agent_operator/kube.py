"""The operator's calls on the Kubernetes API (besides what kopf itself watches), over the one core client.

Rule: no HTTP here. Every call is ``agentrun_core.kube``'s, with the operator's request timeout; what stays
is the operator's own judgement: idempotent Pod creation, the finalizer added under a resourceVersion guard,
which admission objects must be present, the Event an AgentRun gets. Errors are the core's classes
(``NotFound``/``Conflict``/``AlreadyExists``/``Unavailable``/``KubeError``...), named here for the modules
that catch them. Every call is synchronous; the handlers run them in threads.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import uuid
from collections.abc import Callable, Collection

from agent_operator.decide import admission, model
from agentrun_core import kube as core
from agentrun_core.api import meta as api_meta
from agentrun_core.api import protocol

Body = core.Body
ApiClient = core.ApiClient

KubeError = core.KubeError
NotFound = core.NotFound
Conflict = core.Conflict
AlreadyExists = core.AlreadyExists
Unavailable = core.Unavailable

GROUP, VERSION, PLURAL = core.runs.GROUP, core.runs.VERSION, core.runs.PLURAL

TIMEOUT = 10.0  # seconds per request: a reconcile retries on its own schedule

get_lease = core.get_lease
create_lease = core.create_lease
replace_lease = core.replace_lease
micro_time = core.micro_time


def client(kubeconfig: str | None = None) -> ApiClient:
    return core.load_api_client(kubeconfig or None)


# --- AgentRuns -------------------------------------------------------------------------------------------


def get_run(api: ApiClient, namespace: str, name: str) -> Body:
    return core.runs.get(api, namespace, name, timeout=TIMEOUT)


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
    return core.runs.patch_status(api, namespace, name, body, timeout=TIMEOUT)


def remove_annotations(api: ApiClient, namespace: str, name: str, keys: tuple[str, ...]) -> Body:
    body: Body = {"metadata": {"annotations": dict.fromkeys(keys)}}
    return core.runs.patch(api, namespace, name, body, timeout=TIMEOUT)


def add_finalizer(
    api: ApiClient, namespace: str, name: str, finalizers: tuple[str, ...], resource_version: str
) -> Body:
    """Add ``agentrun.dev/finalizer`` to ``finalizers``, guarded by resourceVersion.

    On a conflict (kopf or a user wrote in between) the object is read again and the patch retried once.
    """
    for _ in range(2):
        wanted = (
            [*finalizers, api_meta.FINALIZER] if api_meta.FINALIZER not in finalizers else list(finalizers)
        )
        metadata: Body = {"finalizers": wanted}
        if resource_version:
            metadata["resourceVersion"] = resource_version
        try:
            return core.runs.patch(api, namespace, name, {"metadata": metadata}, timeout=TIMEOUT)
        except Conflict:
            fresh = get_run(api, namespace, name).get("metadata") or {}
            finalizers = tuple(fresh.get("finalizers") or ())
            resource_version = str(fresh.get("resourceVersion") or "")
            if api_meta.FINALIZER in finalizers:
                return {}
    raise Conflict(f"could not add the finalizer to {namespace}/{name}")


def existing_runs(api: ApiClient, namespaces: Collection[str]) -> tuple[set[str], set[str]]:
    """(uids of the AgentRuns that exist now in ``namespaces``, the namespaces that could not be listed): a
    fresh list per namespace, never the watch cache (retention purges only runs not in the first set)."""
    uids: set[str] = set()
    unknown: set[str] = set()
    for namespace in namespaces:
        try:
            found = core.runs.list_(api, namespace, timeout=TIMEOUT)
        except KubeError:
            unknown.add(namespace)
            continue
        uids.update(str((body.get("metadata") or {}).get("uid") or "") for body in found)
    return uids, unknown


def delete_run(api: ApiClient, namespace: str, name: str) -> None:
    with contextlib.suppress(NotFound):
        core.runs.delete(api, namespace, name, timeout=TIMEOUT)


# --- Pods ------------------------------------------------------------------------------------------------


def create_pod(api: ApiClient, namespace: str, body: Body) -> bool:
    """Create the Pod; False when it already exists (deterministic names make creation idempotent)."""
    try:
        core.pods.create(api, namespace, body, timeout=TIMEOUT)
    except AlreadyExists:
        return False
    return True


def delete_pod(api: ApiClient, namespace: str, name: str, *, force: bool = False) -> None:
    """Delete (SIGTERM, grace period from the Pod) or, with ``force``, remove at once (grace 0)."""
    with contextlib.suppress(NotFound):
        core.pods.delete(api, namespace, name, grace_seconds=0 if force else None, timeout=TIMEOUT)


def release_pod(api: ApiClient, namespace: str, name: str) -> None:
    """Remove the worker Pod finalizer (``protocol.POD_FINALIZER``): a deleted Pod may go now."""
    with contextlib.suppress(NotFound):
        core.pods.remove_finalizer(api, namespace, name, protocol.POD_FINALIZER, timeout=TIMEOUT)


def get_pod(api: ApiClient, namespace: str, name: str) -> Body:
    return core.pods.get(api, namespace, name, timeout=TIMEOUT)


def delete_exact(api: ApiClient, namespace: str, kind: str, name: str, uid: str) -> None:
    """Delete the Pod or Lease ``name`` only if it is still the object with ``uid`` (a precondition):
    never the object of a run recreated under the same name meanwhile."""
    if kind != "pod":
        core.leases.delete_exact(api, namespace, name, uid, timeout=TIMEOUT)
        return
    with contextlib.suppress(NotFound, Conflict):
        core.pods.delete(api, namespace, name, uid=uid, timeout=TIMEOUT)


# --- Secrets (only the worker DSN Secret the operator provisions) and namespaces -------------------------


def _found(read: Callable[[], object]) -> bool:
    """Whether ``read`` finds its object. Only a 404 says no: any other error raises, so an unreachable API
    server never reads as "gone"."""
    try:
        read()
    except NotFound:
        return False
    return True


def secret_exists(api: ApiClient, namespace: str, name: str) -> bool:
    return _found(lambda: core.objects.get_secret(api, namespace, name, timeout=TIMEOUT))


def namespace_exists(api: ApiClient, name: str) -> bool:
    """Whether Kubernetes has the namespace (a terminating one still does)."""
    return _found(lambda: core.objects.get_namespace(api, name, timeout=TIMEOUT))


def namespace_approval_policy(api: ApiClient, name: str) -> tuple[bool, tuple[str, ...]]:
    """(four eyes required, approver groups) from the Namespace's label and annotation
    (api_meta.LABEL_FOUR_EYES,
    api_meta.APPROVER_GROUPS). Errors propagate: an unread policy is never read as "none"."""
    meta = core.objects.get_namespace(api, name, timeout=TIMEOUT).get("metadata") or {}
    four_eyes = (meta.get("labels") or {}).get(api_meta.LABEL_FOUR_EYES) == "true"
    text = str((meta.get("annotations") or {}).get(api_meta.APPROVER_GROUPS) or "")
    return four_eyes, tuple(g.strip() for g in text.split(",") if g.strip())


def read_secret_key(api: ApiClient, namespace: str, name: str, key: str) -> str | None:
    """One key of a Secret, decoded (None: the Secret has no such key). ``NotFound`` / ``KubeError`` (403)
    propagate. The value is a credential: callers never log it."""
    body = core.objects.get_secret(api, namespace, name, timeout=TIMEOUT)
    raw = (body.get("data") or {}).get(key)
    if raw is None:
        return None
    return base64.b64decode(str(raw)).decode("utf-8").strip()


def put_secret(api: ApiClient, namespace: str, body: Body) -> None:
    """Create the Secret, or replace it when it exists."""
    core.objects.put_secret(api, namespace, body, timeout=TIMEOUT)


# --- the read API's delegated authentication and authorization -----------------------------------------

FRONT_PROXY_CONFIG = ("kube-system", "extension-apiserver-authentication")


def front_proxy_config(api: ApiClient) -> dict[str, str]:
    """The API server's request-header settings (its front proxy's CA, allowed names, header names), as it
    publishes them for aggregated API servers."""
    body = core.objects.get_config_map(api, *FRONT_PROXY_CONFIG)
    return {str(k): str(v) for k, v in (body.get("data") or {}).items()}


def may_get_run(api: ApiClient, user: Body, namespace: str, name: str) -> tuple[bool, str]:
    """Whether ``user`` (user, groups, extra, uid of a SubjectAccessReview) may ``get`` the AgentRun; and
    the authorizer's reason."""
    where = {"group": GROUP, "resource": PLURAL, "verb": "get", "namespace": namespace, "name": name}
    return core.objects.access_allowed(api, {**user, "resourceAttributes": where}, timeout=TIMEOUT)


# --- admission policies ----------------------------------------------------------------------------------

# What makes steering trustworthy (deploy/admission): (plural, name).
ADMISSION_OBJECTS = tuple(admission.STEERING_OBJECTS)


def admission_state(api: ApiClient) -> tuple[str | None, list[str]]:
    """Which shipped admission install the cluster holds (``admission.MODES``), or None and each object
    that is absent or not as shipped (``admission.problem``: an edited spec, failurePolicy Ignore, a binding
    without Deny or narrowed), named with why. A MutatingAdmissionPolicy API the server does not serve
    (before 1.36) answers 404, as an absent object does."""
    found: dict[tuple[str, str], str | None] = {}
    for kind, name in ADMISSION_OBJECTS:
        try:
            body = core.objects.get_admission_object(api, kind, name, timeout=TIMEOUT)
        except NotFound:
            found[(kind, name)] = admission.ABSENT
            continue
        found[(kind, name)] = admission.problem(kind, name, body)
    return admission.mode(found)


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
            "apiVersion": core.runs.API_VERSION,
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
    core.objects.create_event(api, run.namespace, body, timeout=TIMEOUT)
