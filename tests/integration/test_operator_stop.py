"""Cancel, suspend and delete with a stand-in worker that drains slowly on SIGTERM (like a worker finishing
its step): the worker is stopped through Pod deletion, and the run is released only once it is gone."""

from __future__ import annotations

import time

import kubernetes
import psycopg

from agentrun_core import store
from tests.support.kube import create_run, get_run, patch_spec, pods, run_gone
from tests.support.operator_proc import OperatorHandle
from tests.support.waiting import wait_for, wait_phase

DRAINER = [
    "python",
    "-c",
    (
        "import signal, sys, time\n"
        "def drain(*_):\n"
        "    time.sleep(2)\n"
        "    sys.exit(11)\n"
        "signal.signal(signal.SIGTERM, drain)\n"
        "time.sleep(600)\n"
    ),
]
SPEC = {"graph": "pkg.mod:graph", "worker": {"command": DRAINER}}


def db_status(dsn: str, uid: str) -> str:
    with psycopg.connect(dsn) as conn:
        row = store.get_run(conn, uid)
    assert row is not None
    return row.status


def test_delete_mid_run_waits_for_the_worker(
    kube: kubernetes.client.ApiClient, operator: OperatorHandle, pg_dsn: str
) -> None:
    ns = operator.namespace
    uid = create_run(kube, ns, "doomed", SPEC)["metadata"]["uid"]
    wait_phase(kube, ns, "doomed", "Running", 30, operator)
    wait_for(
        lambda: pods(kube, ns, "doomed") and pods(kube, ns, "doomed")[0].status.phase == "Running",
        30,
        "worker running",
    )
    api = kubernetes.client.CustomObjectsApi(kube)
    api.delete_namespaced_custom_object("agentrun.dev", "v1alpha1", ns, "agentruns", "doomed")
    deleted_at = time.monotonic()
    # the finalizer holds the AgentRun while the worker drains
    wait_for(lambda: pods(kube, ns, "doomed")[0].metadata.deletion_timestamp is not None, 10, "pod deletion")
    time.sleep(0.5)
    assert get_run(kube, ns, "doomed")["metadata"]["deletionTimestamp"]

    wait_for(lambda: run_gone(kube, ns, "doomed"), 30, "the AgentRun to go", on_timeout=operator.logs)
    assert time.monotonic() - deleted_at >= 1.5  # not before the worker's 2 s drain
    assert not [
        p
        for p in pods(kube, ns, "doomed")
        if p.status.phase == "Running" and p.metadata.deletion_timestamp is None
    ]
    assert db_status(pg_dsn, uid) == "cancelled"


def test_cancel_mid_run(kube: kubernetes.client.ApiClient, operator: OperatorHandle, pg_dsn: str) -> None:
    ns = operator.namespace
    uid = create_run(kube, ns, "stopme", SPEC)["metadata"]["uid"]
    wait_phase(kube, ns, "stopme", "Running", 30, operator)
    patch_spec(kube, ns, "stopme", {"cancel": True})
    status = wait_phase(kube, ns, "stopme", "Cancelled", 30, operator)
    assert {c["type"]: c["status"] for c in status["conditions"]}["Cancelled"] == "True"
    assert db_status(pg_dsn, uid) == "cancelled"
    assert len(pods(kube, ns, "stopme")) <= 1  # no new attempt


def test_suspend_then_resume(kube: kubernetes.client.ApiClient, operator: OperatorHandle) -> None:
    ns = operator.namespace
    create_run(kube, ns, "napper", SPEC)
    wait_phase(kube, ns, "napper", "Running", 30, operator)
    patch_spec(kube, ns, "napper", {"suspend": True})
    wait_phase(kube, ns, "napper", "Suspended", 30, operator)
    time.sleep(1)
    assert [
        p.metadata.name
        for p in pods(kube, ns, "napper")
        if p.status.phase in ("Pending", "Running") and not p.metadata.deletion_timestamp
    ] == []
    patch_spec(kube, ns, "napper", {"suspend": False})
    status = wait_phase(kube, ns, "napper", "Running", 30, operator)
    assert status["attempts"] == 2 and status["attemptReason"] == "resumed"
    assert status["restarts"] == 0
