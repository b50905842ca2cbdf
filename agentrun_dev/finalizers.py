"""What an operator no longer running still holds in a namespace the dev tooling is done with: released.

AgentRuns carry the operator's finalizer (``agentrun.dev/finalizer``) and worker Pods theirs
(``protocol.POD_FINALIZER``, ``agentrun.dev/attempt-record``); only the operator removes them. Tests and
benchmarks run operators of their own and delete their namespaces once those are stopped: a namespace whose
objects still carry one stays Terminating for good, and the namespace controller retries it without end (a
Pod deleted with grace 0 is deleted again at once: over a suite's worth of such namespaces, ~40 DELETEs a
second and a third of the API server's core). In a real cluster this is an uninstall's step
(docs/operator.md); here it is every teardown's.
"""

from __future__ import annotations

import contextlib

import kubernetes

from agentrun_core import kube
from agentrun_core.api import meta as api_meta
from agentrun_core.api import protocol
from agentrun_core.kube import pods, runs


def release_namespace(api: kubernetes.client.ApiClient, namespace: str) -> int:
    """Remove the operator's finalizers from every AgentRun and worker Pod of ``namespace``; how many
    objects it released. Best effort: a namespace or object gone, or the API server away, releases less."""
    return _release_pods(api, namespace) + _release_runs(api, namespace)


def _release_pods(api: kubernetes.client.ApiClient, namespace: str) -> int:
    try:
        listing = pods.list_(api, namespace, timeout=30)
    except Exception:
        return 0
    released = 0
    for pod in listing.get("items", []):
        name = pod["metadata"]["name"]
        if protocol.POD_FINALIZER in (pod["metadata"].get("finalizers") or ()):
            with contextlib.suppress(Exception):  # race-free: the patch names the value, not its index
                pods.remove_finalizer(api, namespace, name, protocol.POD_FINALIZER, timeout=30)
                released += 1
    return released


def _release_runs(api: kubernetes.client.ApiClient, namespace: str) -> int:
    try:
        found = runs.list_(api, namespace, timeout=30)
    except kube.KubeError:
        return 0  # no CRD (a test that deleted it) or no namespace: nothing holds it
    released = 0
    for run in found:
        meta = run["metadata"]
        finalizers = meta.get("finalizers") or []
        if api_meta.FINALIZER not in finalizers:
            continue
        keep = [f for f in finalizers if f != api_meta.FINALIZER]
        with contextlib.suppress(kube.KubeError):  # changed meanwhile: its operator is back
            precondition = {"finalizers": keep, "resourceVersion": meta["resourceVersion"]}
            runs.patch(api, namespace, meta["name"], {"metadata": precondition}, timeout=30)
            released += 1
    return released
