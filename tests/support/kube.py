"""AgentRuns and other objects on the real API server, for tests that drive them."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import kubernetes

GROUP, VERSION, PLURAL = "agentrun.dev", "v1alpha1", "agentruns"
WORKER_SA = "agentrun-worker"
# The venv's executables: ``kubectl agentrun`` finds the project's plugin there.
VENV_BIN = Path(sys.executable).parent


def custom(api: kubernetes.client.ApiClient) -> kubernetes.client.CustomObjectsApi:
    return kubernetes.client.CustomObjectsApi(api)


def run_body(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "AgentRun", "metadata": {"name": name}, "spec": spec}


def create_run(
    api: kubernetes.client.ApiClient, namespace: str, name: str, spec: dict[str, Any]
) -> dict[str, Any]:
    created = custom(api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, run_body(name, spec)
    )
    return cast(dict[str, Any], created)


def get_run(api: kubernetes.client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    return cast(
        dict[str, Any], custom(api).get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    )


def patch_spec(api: kubernetes.client.ApiClient, namespace: str, name: str, spec: dict[str, Any]) -> None:
    custom(api).patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, {"spec": spec})


def run_status(api: kubernetes.client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    return dict(get_run(api, namespace, name).get("status") or {})


def gone(read: Callable[[], object]) -> bool:
    """Whether ``read()`` (an API read of one object) answers 404 Not Found."""
    try:
        read()
    except kubernetes.client.ApiException as exc:
        return bool(exc.status == 404)
    return False


def run_gone(api: kubernetes.client.ApiClient, namespace: str, name: str) -> bool:
    """Whether the AgentRun is gone from the API server."""
    return gone(lambda: get_run(api, namespace, name))


def condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    for cond in status.get("conditions") or ():
        if cond.get("type") == type_:
            return dict(cond)
    return {}


def events(api: kubernetes.client.ApiClient, namespace: str, name: str) -> list[Any]:
    core = kubernetes.client.CoreV1Api(api)
    found = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
    return sorted(found, key=lambda e: (e.first_timestamp or e.event_time or 0, e.metadata.name))


def pods(api: kubernetes.client.ApiClient, namespace: str, run: str) -> list[Any]:
    core = kubernetes.client.CoreV1Api(api)
    found = core.list_namespaced_pod(namespace, label_selector=f"agentrun.dev/run={run}").items
    return sorted(found, key=lambda p: int(p.metadata.labels.get("agentrun.dev/attempt", "0")))


@contextlib.contextmanager
def sampling_live_pods(
    api: kubernetes.client.ApiClient, namespace: str, observe: Callable[[list[Any]], None]
) -> Iterator[None]:
    """While the block runs, ``observe`` gets the namespace's worker Pods that are alive (not Succeeded or
    Failed) every 0.1 s, on a thread of its own: a limit that a test must never see exceeded is watched the
    whole time, not at the moments the test looks. A listing that fails (the API server slow under load) is
    skipped; what ``observe`` raises is raised here, and a block in which no listing succeeded fails: a
    sampler that stopped must not pass for one that saw nothing wrong."""
    core = kubernetes.client.CoreV1Api(api)
    stop = threading.Event()
    errors: list[BaseException] = []
    samples = [0]

    def sample() -> None:
        while not stop.is_set():
            try:
                found: list[Any] = core.list_namespaced_pod(
                    namespace, label_selector="agentrun.dev/run"
                ).items
            except Exception:  # the next listing counts
                stop.wait(0.1)
                continue
            try:
                observe([p for p in found if p.status.phase not in ("Succeeded", "Failed")])
            except BaseException as exc:
                errors.append(exc)
                return
            samples[0] += 1
            stop.wait(0.1)

    sampler = threading.Thread(target=sample, name="live-pod-sampler", daemon=True)
    sampler.start()
    try:
        yield
    finally:
        stop.set()
        sampler.join(5)
    if errors:
        raise errors[0]
    assert samples[0] > 0, "the live-Pod sampler never got a listing of the namespace's Pods"


def user_env(kubeconfig: Path | str, dsn: str = "") -> dict[str, str]:
    """The environment of a command run as the identity of ``kubeconfig``: the venv first on PATH (for
    ``kubectl agentrun``), ``dsn`` as the plugin's ``AGENTRUN_DSN`` ("" for none, whatever the test's own
    environment says)."""
    return {
        **os.environ,
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "KUBECONFIG": str(kubeconfig),
        "AGENTRUN_DSN": dsn,
    }


def kubectl(
    kubeconfig: Path | str,
    *args: str,
    stdin: str | None = None,
    dsn: str = "",
    check: bool = False,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """``kubectl ARGS`` as the identity of ``kubeconfig`` (in ``user_env``).

    ``check`` fails the test, with kubectl's stderr, when it exits non-zero."""
    result = subprocess.run(
        ["kubectl", *args],
        input=stdin,
        env=user_env(kubeconfig, dsn),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"kubectl {' '.join(args)} failed ({result.returncode}):\n{result.stderr or result.stdout}"
        )
    return result


def bind(
    kube: kubernetes.client.ApiClient, namespace: str, user: str, role: str, kind: str = "ClusterRole"
) -> None:
    """Bind ``user`` to ``role`` (a ClusterRole by default) in ``namespace``."""
    body: Any = {
        "metadata": {"name": f"{user}-{role}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }
    kubernetes.client.RbacAuthorizationV1Api(kube).create_namespaced_role_binding(namespace, body)


# Who's who in the approval tests: manager approves; mallory edits AgentRuns (patch too) but may not approve;
# alice creates runs and may approve too (so only the self-approval rule stops her).
APPROVAL_PEOPLE: dict[str, tuple[str, ...]] = {
    "manager": ("managers", "agentrun-approver"),
    "mallory": ("devs", "agentrun-editor"),
    "alice": ("devs", "agentrun-editor", "agentrun-approver"),
}


# The ``team`` fixture: people by name -> their kubeconfigs.
Team = Callable[[dict[str, tuple[str, ...]]], dict[str, Path]]


def team(
    kube: kubernetes.client.ApiClient,
    namespace: str,
    identity: Callable[..., Path],
    people: dict[str, tuple[str, ...]],
) -> dict[str, Path]:
    """Each person (``name: (group, ClusterRole, ...)``) bound to their ClusterRoles in ``namespace``;
    their kubeconfigs (real client certificates of the dev CA, via the ``identity`` fixture) by name."""
    found: dict[str, Path] = {}
    for user, (group, *roles) in people.items():
        for role in roles:
            bind(kube, namespace, user, role)
        found[user] = identity(user, [group])
    return found


def create_worker_account(api: kubernetes.client.ApiClient, namespace: str, name: str = WORKER_SA) -> str:
    """ServiceAccount + Role + RoleBinding of a worker: Leases get/create/update, in this namespace only."""
    core = kubernetes.client.CoreV1Api(api)
    rbac = kubernetes.client.RbacAuthorizationV1Api(api)
    account: Any = {"metadata": {"name": name}}
    with contextlib.suppress(kubernetes.client.ApiException):
        core.create_namespaced_service_account(namespace, account)
    role: Any = {
        "metadata": {"name": name},
        "rules": [
            {
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "verbs": ["get", "create", "update"],
            }
        ],
    }
    with contextlib.suppress(kubernetes.client.ApiException):
        rbac.create_namespaced_role(namespace, role)
    binding: Any = {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
    }
    with contextlib.suppress(kubernetes.client.ApiException):
        rbac.create_namespaced_role_binding(namespace, binding)
    return name
