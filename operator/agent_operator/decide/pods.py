"""The worker Pod of an attempt (manifest building) and why an attempt's Pod ended. Pure."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from agent_operator import settings as settings_
from agent_operator.decide import model
from agentrun_core import faults
from agentrun_core.api import protocol

# End reasons caused by the control plane, not by the run: they do not consume spec.retry.maxAttempts
# (``attempts._lost``). ``lease_lost``: the worker exited fenced (12) because it could not keep or take its
# Lease — the API server was unreachable for a lease duration, or a stale holder still held it. ``infra``: the
# worker lost Postgres (exit 14: a restart, a crash), which is the platform's loss, not the graph's.
CONTROL_PLANE_REASONS = frozenset({"lease_lost", "infra"})
# ... but at most this many of them per run, so a cause that never goes away still ends the run.
CONTROL_PLANE_LOSS_LIMIT = 20
# The worker's code does not run against the database's schema (exit 15, agentrun_core.compat): an upgrade
# half done, not the run's failure. The run waits (condition WorkerIncompatible), retried with backoff for as
# long as it takes; it never consumes maxAttempts nor the control-plane limit.
INCOMPATIBLE = "incompatible"

# The Secret holding the namespace's worker DSN when the operator provisions it (agent_operator.act.tenants).
TENANT_SECRET = "agentrun-worker-db"
TENANT_SECRET_KEY = "dsn"

# Where a worker finds the CA of an external Postgres (AGENTRUN_WORKER_CA_SECRET); libpq reads PGSSLROOTCERT,
# so sslmode=verify-full in the DSN needs nothing else. The same path as the operator's own (deploy/helm).
CA_VOLUME, CA_DIR = "postgres-ca", "/etc/agentrun/postgres-ca"

# spec.worker.env entries named AGENTRUN_FAULT_POINTS_ATTEMPT_<n> become AGENTRUN_FAULT_POINTS in attempt n
# only, so a test can crash the first attempt and let the second one finish.
_ATTEMPT_FAULTS = re.compile(rf"^{protocol.ENV_FAULT_POINTS_ATTEMPT_PREFIX}(\d+)$")


def _worker_env(
    run: model.RunRef, spec: model.RunSpec, attempt: int, settings: settings_.Settings
) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": protocol.ENV_RUN_ID, "value": run.uid},
        {"name": protocol.ENV_RUN_NAME, "value": run.name},
        {"name": protocol.ENV_NAMESPACE, "value": run.namespace},
        {"name": protocol.ENV_POD_NAME, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": protocol.ENV_ATTEMPT, "value": str(attempt)},
        {"name": protocol.ENV_LEASE_NAME, "value": protocol.lease_name(run.name)},
        {"name": protocol.ENV_LEASE_DURATION_SECONDS, "value": str(spec.lease_duration_seconds)},
    ]
    # Credentials reach a Pod only through a Secret of its namespace: the one an admin made
    # (AGENTRUN_WORKER_DSN_SECRET) or the tenant role's the operator provisions (agent_operator.act.tenants).
    secret, _, key = (settings.worker.dsn_secret or f"{TENANT_SECRET}/{TENANT_SECRET_KEY}").partition("/")
    env.append({"name": protocol.ENV_DSN, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}})
    if spec.budget:  # the limits as the spec has them when the attempt starts (agent_worker.budget)
        env.append({"name": protocol.ENV_BUDGET, "value": json.dumps(dict(spec.budget), sort_keys=True)})
    for item in spec.worker.get("env") or ():
        name = str(item.get("name", ""))
        match = _ATTEMPT_FAULTS.match(name)
        if match:
            if int(match.group(1)) == attempt:
                env.append({"name": faults.ENV_VAR, "value": str(item.get("value", ""))})
            continue
        env.append(dict(item))
    return env


def manifest(
    run: model.RunRef,
    spec: model.RunSpec,
    attempt: int,
    reason: str,
    settings: settings_.Settings,
    *,
    image: str | None = None,
    avoid_node: str | None = None,
) -> dict[str, Any]:
    """The Pod for ``attempt``: owned by the AgentRun, labelled, never restarted in place.

    ``avoid_node``: the node of the previous attempt's worker whose Lease expired. That node may be lost (its
    kubelet and the worker cut off while the container still runs), and the API server still calls it Ready
    until the node controller's grace period has passed — the scheduler would happily put the next attempt
    back on it, where it could not start. So the next Pod *prefers* any other node (a preference, not a rule:
    on a one-node cluster, or for a hung worker on a healthy node, it still runs there).

    ``image`` is the run's pinned image (agent_operator.decide.imagepin) when the reconciler gives one:
    attempts
    after the first run what the first ran, whatever the spec or the operator's default says now.

    ``restartPolicy: Never`` because a restart is a new attempt: the operator decides it (backoff, limit,
    reason), and a new Pod name gives the new attempt its own Lease holder identity.
    """
    worker: Mapping[str, Any] = spec.worker
    container: dict[str, Any] = {
        "name": "worker",
        "image": image or worker.get("image") or settings.worker.image,
        "imagePullPolicy": settings.worker.image_pull_policy,
        "command": list(worker.get("command") or settings.worker.command),
        "env": _worker_env(run, spec, attempt, settings),
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    if worker.get("args"):
        container["args"] = list(worker["args"])
    volumes: list[dict[str, Any]] = []
    if settings.worker.ca_secret:
        secret, _, key = settings.worker.ca_secret.partition("/")
        container["env"].append({"name": "PGSSLROOTCERT", "value": f"{CA_DIR}/{key}"})
        container["volumeMounts"] = [{"name": CA_VOLUME, "mountPath": CA_DIR, "readOnly": True}]
        volumes.append(
            {"name": CA_VOLUME, "secret": {"secretName": secret, "items": [{"key": key, "path": key}]}}
        )
    if worker.get("resources"):
        container["resources"] = dict(worker["resources"])
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "serviceAccountName": worker.get("serviceAccountName") or settings.worker.service_account,
        "terminationGracePeriodSeconds": settings.worker.termination_grace_seconds,
        "enableServiceLinks": False,
        # Pod Security "restricted": the image runs as a numeric non-root user (Dockerfile USER 10001).
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [container],
        **({"volumes": volumes} if volumes else {}),
    }
    for key in ("nodeSelector", "tolerations", "priorityClassName"):
        if worker.get(key):
            pod_spec[key] = worker[key]
    if avoid_node:
        pod_spec["affinity"] = avoid_node_affinity(avoid_node)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": protocol.pod_name(run.name, attempt),
            "namespace": run.namespace,
            "labels": {
                protocol.LABEL_RUN: run.name,
                protocol.LABEL_ATTEMPT: str(attempt),
                protocol.LABEL_RUN_UID: run.uid,
                "app.kubernetes.io/name": "agentrun-worker",
                "app.kubernetes.io/managed-by": "agentrun-operator",
                # Which spec.concurrency key's limit the Pod counts against (a restarted operator's count).
                **(
                    {protocol.LABEL_CONCURRENCY: protocol.concurrency_label(spec.concurrency.key)}
                    if spec.concurrency is not None
                    else {}
                ),
            },
            "annotations": {protocol.ANN_START_REASON: reason},
            "finalizers": [protocol.POD_FINALIZER],
            "ownerReferences": [
                {
                    **protocol.owner_reference(run.name, run.uid),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": pod_spec,
    }


def avoid_node_affinity(node: str) -> dict[str, Any]:
    """Prefer any node but ``node``, by name (``matchFields``: a hostname label may differ from it)."""
    term = {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": [node]}]}
    preferred = [{"weight": 100, "preference": term}]
    return {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": preferred}}


def end_reason(pod: model.PodInfo | None) -> tuple[str, str]:
    """Why an attempt's Pod ended, as (reason, message); the reason is an attempt-start reason label.

    ``None`` means the Pod is gone from the API (deleted by someone, or garbage-collected).
    """
    if pod is None:
        return "deleted", "the worker Pod was deleted"
    code = pod.exit_code
    if pod.disruption in {"PreemptionByScheduler", "PreemptionByKubeScheduler"}:
        return "preempted", "the worker Pod was preempted"
    if pod.disruption is not None and pod.disruption != "DeletionByPodGC":
        return "evicted", f"the worker Pod was evicted ({pod.disruption})"
    if pod.reason == "Evicted":
        return "evicted", f"the worker Pod was evicted: {pod.message or 'no message'}"
    if pod.reason in {"Preempting", "Preempted"} or pod.terminated_reason == "Preempted":
        return "preempted", "the worker Pod was preempted"
    if pod.terminated_reason == "OOMKilled":
        return "OOMKilled", f"the worker was OOM-killed (exit code {code})"
    if code == protocol.EXIT_DRAINED:
        return "drained", "the worker drained at a step boundary (SIGTERM)"
    if code == protocol.EXIT_INCOMPATIBLE:
        return INCOMPATIBLE, (
            "the worker's code does not run against the database's schema (exit code 15; its log says "
            "whether it is newer or older than the schema, see docs/upgrading.md)"
        )
    if code == protocol.EXIT_INFRA:
        return "infra", "the worker lost its connection to Postgres (exit code 14); the attempt is retried"
    if code == protocol.EXIT_FENCED and not pod.deleting:
        return "lease_lost", (
            "the worker lost its Lease (exit code 12): it could not renew or take it, e.g. the API server "
            "was unreachable for a lease duration (a control-plane loss: not counted against maxAttempts)"
        )
    if pod.deleting and not pod.terminated:
        return "deleted", "the worker Pod is being deleted"
    if code is not None:
        return "failed", f"the worker exited with code {code} ({pod.terminated_reason or 'Error'})"
    if pod.deleting:
        return "deleted", "the worker Pod was deleted"
    return "failed", f"the worker Pod ended in phase {pod.phase}"
