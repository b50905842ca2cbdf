"""The operator's side alone (worker command replaced by small stand-ins): admission first, the Pod contract,
retries with reasons until the attempt limit, restart of the operator without duplicate Pods."""

from __future__ import annotations

import base64
import datetime
from typing import Any

import kubernetes
import psycopg
import psycopg.conninfo

from agentrun_core import store
from tests.support.kube import condition, create_run, events, pods
from tests.support.operator_proc import OperatorHandle
from tests.support.waiting import wait_for, wait_phase

SLEEP = ["sleep", "60"]  # a worker that stays Running and does nothing


def stand_in_run(
    kube: kubernetes.client.ApiClient, ns: str, name: str, command: list[str], **fields: Any
) -> dict[str, Any]:
    """A run whose worker container runs ``command``: what the operator does is all there is to see."""
    return create_run(kube, ns, name, {"graph": "pkg.mod:graph", "worker": {"command": command}, **fields})


def test_admission_row_before_pod_and_pod_contract(
    kube: kubernetes.client.ApiClient, operator: OperatorHandle, pg_dsn: str
) -> None:
    ns = operator.namespace
    body = stand_in_run(kube, ns, "contract", SLEEP, input={"x": 1}, lease={"durationSeconds": 6})
    (pod,) = wait_for(lambda: pods(kube, ns, "contract"), 30, "the first Pod", on_timeout=operator.logs)
    with psycopg.connect(pg_dsn) as conn:
        row = store.get_run(conn, body["metadata"]["uid"])
        attempts = store.list_attempts(conn, body["metadata"]["uid"])
    assert row is not None and row.graph == "pkg.mod:graph" and row.input == {"x": 1}
    created = pod.metadata.creation_timestamp
    assert row.admitted_at <= created + datetime.timedelta(seconds=1)  # API timestamps have 1 s resolution
    assert [(a.attempt, a.start_reason, a.pod) for a in attempts] == [(1, "first", "contract-1")]
    assert pod.metadata.name == "contract-1"
    assert pod.metadata.labels["agentrun.dev/run"] == "contract"
    owner = pod.metadata.owner_references[0]
    assert (owner.kind, owner.name, owner.controller) == ("AgentRun", "contract", True)
    assert pod.spec.restart_policy == "Never" and pod.spec.service_account_name == "agentrun-worker"
    env = {e.name: e.value for e in pod.spec.containers[0].env}
    assert env["AGENTRUN_RUN_ID"] == body["metadata"]["uid"] and env["AGENTRUN_ATTEMPT"] == "1"
    assert env["AGENTRUN_LEASE_NAME"] == "agentrun-contract" and env["AGENTRUN_LEASE_DURATION_SECONDS"] == "6"
    # The DSN only through the namespace's tenant Secret (its own Postgres role), never a plain value.
    (dsn_env,) = [e for e in pod.spec.containers[0].env if e.name == "AGENTRUN_DSN"]
    assert dsn_env.value is None and dsn_env.value_from.secret_key_ref.name == "agentrun-worker-db"
    assert pg_dsn not in str(pod.to_dict())
    # ... which the operator provisioned: the namespace's own Postgres role (row-level security).
    secret = kubernetes.client.CoreV1Api(kube).read_namespaced_secret("agentrun-worker-db", ns)
    worker_dsn = psycopg.conninfo.conninfo_to_dict(base64.b64decode(secret.data["dsn"]).decode())
    with psycopg.connect(pg_dsn) as conn:
        assert worker_dsn["user"] == store.tenant_role(conn, ns) and worker_dsn["user"].startswith(
            "agentrun_ns_"
        )
    run = wait_phase(kube, ns, "contract", "Running", 30, operator)
    assert (
        "agentrun.dev/finalizer"
        in (
            kubernetes.client.CustomObjectsApi(kube).get_namespaced_custom_object(
                "agentrun.dev", "v1alpha1", ns, "agentruns", "contract"
            )["metadata"]["finalizers"]
        )
    )
    assert condition(run, "Admitted")["status"] == "True"
    assert condition(run, "Running")["status"] == "True"


def test_failing_attempts_retry_until_the_limit(
    kube: kubernetes.client.ApiClient, operator: OperatorHandle, pg_dsn: str
) -> None:
    ns = operator.namespace
    retry = {"maxAttempts": 3, "backoffSeconds": 1, "maxBackoffSeconds": 2}
    body = stand_in_run(kube, ns, "crashy", ["python", "-c", "import sys; sys.exit(7)"], retry=retry)
    status = wait_phase(kube, ns, "crashy", "Failed", 60, operator)
    failed = condition(status, "Failed")
    assert failed["status"] == "True" and failed["reason"] == "AttemptsExhausted"
    assert status["attempts"] == 3 and status["restarts"] == 3
    # Earlier attempts' Pods are deleted once a later attempt started; the last one stays for its log.
    wait_for(
        lambda: [p.metadata.name for p in pods(kube, ns, "crashy")] == ["crashy-3"],
        30,
        "only the last attempt's Pod left",
        on_timeout=operator.logs,
    )
    with psycopg.connect(pg_dsn) as conn:
        reasons = [a.start_reason for a in store.list_attempts(conn, body["metadata"]["uid"])]
    assert reasons == ["first", "failed", "failed"]
    with psycopg.connect(pg_dsn) as conn:
        outcomes = [a.outcome for a in store.list_attempts(conn, body["metadata"]["uid"])]
    assert outcomes == ["lost", "lost", "lost"]
    reasons_seen = [e.reason for e in events(kube, ns, "crashy")]
    assert reasons_seen.count("AttemptLost") == 3 and "AttemptsExhausted" in reasons_seen


def test_operator_restart_adopts_running_pod(
    kube: kubernetes.client.ApiClient, operator: OperatorHandle
) -> None:
    ns = operator.namespace
    stand_in_run(kube, ns, "adopt", SLEEP)
    wait_phase(kube, ns, "adopt", "Running", 30, operator)
    operator.restart()  # SIGKILL, then a fresh process (standby until the old Lease expires)
    operator.wait_leader(kube, timeout=30)
    wait_for(lambda: "holds Lease" in operator.current.logs(), 30, "new leader", on_timeout=operator.logs)
    import time

    time.sleep(3)
    assert [p.metadata.name for p in pods(kube, ns, "adopt")] == ["adopt-1"]
    assert wait_phase(kube, ns, "adopt", "Running", 10, operator)["attempts"] == 1
