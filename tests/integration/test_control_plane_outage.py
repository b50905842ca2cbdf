"""Losses caused by the control plane do not consume ``maxAttempts``: the kube-apiserver (or Postgres) is
stopped mid-run for longer than the workers' Lease duration and started again; every run converges to
``Succeeded`` with exactly one effect (counted in the file the effect appends to), with ``maxAttempts: 1``,
and each lost attempt is attributed to the control plane in the status, the ledger's attempt row (so
``agentrun trace`` marks it) and the ``agentrun_attempts_ended{cause="control_plane"}`` metric.
The operator's leader Lease is longer than the outage here (a real Deployment would restart a leader
that exits; that restart is exercised by test_operator_lifecycle's operator-killed test)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import kubernetes
import psycopg
import pytest

from agentrun import render, trace, trace_cli
from agentrun_core import store
from agentrun_core.store import metrics_sql
from agentrun_dev import cluster
from tests.support.kube import create_run, get_run, pods
from tests.support.operator_proc import OperatorHandle
from tests.support.specs import lines, steps_spec
from tests.support.waiting import wait_for, wait_phase

# serial: it stops the dev cluster's shared API server and Postgres, which every test running beside it would
# feel (scripts/test runs it alone, after the rest).
pytestmark = pytest.mark.serial

RUNS = 3
LEASE = 3


def spec(path: Path) -> dict[str, Any]:
    return steps_spec(path, max_attempts=1, lease=LEASE, pause={"prepare": 8})


@pytest.fixture
def long_leader(kube: kubernetes.client.ApiClient, operator: OperatorHandle) -> OperatorHandle:
    operator.stop()  # releases the leader Lease at once
    operator.env["AGENTRUN_LEADER_DURATION_SECONDS"] = "120"
    operator.start()
    operator.wait_leader(kube, timeout=60)
    return operator


def _run_through(
    kube: kubernetes.client.ApiClient,
    operator: OperatorHandle,
    dev_cluster: cluster.Handle,
    tmp_path: Path,
    part: str,
    *,
    must_lose: bool,
) -> None:
    ns = operator.namespace
    outs = {f"run-{i}": tmp_path / f"run-{i}.txt" for i in range(RUNS)}
    for name, out in outs.items():
        create_run(kube, ns, name, spec(out))
    for name in outs:
        wait_for(
            lambda name=name: any(p.status.phase == "Running" for p in pods(kube, ns, name)),
            90,
            f"{name} running",
            on_timeout=operator.logs,
        )
        # ... and its worker inside the graph (claimed in the ledger, pausing in a step that heartbeats):
        # an outage before that only delays the start and tests nothing.
        wait_for(
            lambda name=name: _claimed(kube, operator, name), 90, f"{name} claimed", on_timeout=operator.logs
        )
    cluster.outage(dev_cluster.settings, [part], down_seconds=2 * LEASE, out=sys.stderr)
    lost_to_control_plane = 0
    for name, out in outs.items():
        status = wait_phase(kube, ns, name, ("Succeeded", "Failed"), 180, operator)
        assert status["phase"] == "Succeeded", status
        assert status["restarts"] == 0, status  # maxAttempts (1) not consumed
        assert len(lines(out)) == 1, (name, lines(out))
        ends = status.get("lastAttemptEnd")
        if ends is not None:  # an attempt was lost: to the control plane, and it says so
            assert ends.get("controlPlane") is True, status
            lost_to_control_plane += _attributed(kube, operator, name)
    # Workers ride out an API-server outage (renewal retries; nobody else can take the Lease meanwhile), so
    # that one may cost no attempt at all; a Postgres restart ends the heartbeating attempts (exit 14):
    # there, at least one loss must have been attributed, else the attribution was not tested.
    assert lost_to_control_plane >= (1 if must_lose else 0)
    print(f"\n{part} outage: {lost_to_control_plane} attempt(s) lost to the control plane, all attributed")
    snap = metrics_sql.read_snapshot(psycopg.connect(operator.dsn, autocommit=True))
    ended = {(outcome, cause): n for space, outcome, cause, n in snap.attempts_ended if space == ns}
    control_plane = sum(n for (_, cause), n in ended.items() if cause == "control_plane")
    assert control_plane == lost_to_control_plane, ended


def _claimed(kube: kubernetes.client.ApiClient, operator: OperatorHandle, name: str) -> bool:
    uid = get_run(kube, operator.namespace, name)["metadata"]["uid"]
    with psycopg.connect(operator.dsn, autocommit=True) as conn:
        run = store.get_run(conn, uid)
        in_first_step = run is not None and run.status == "running" and run.current_step is None
        return in_first_step and bool(store.list_heartbeats(conn, uid))


def _attributed(kube: kubernetes.client.ApiClient, operator: OperatorHandle, name: str) -> int:
    """The run's lost attempts are marked as the control plane's in the ledger and in `agentrun trace`;
    returns how many."""
    resource = get_run(kube, operator.namespace, name)
    data = trace.build(trace_cli.gather(resource, operator.dsn))
    lost = [a for a in data["attempts"] if a["outcome"] in ("lost", "fenced")]
    assert lost and all(a["controlPlane"] for a in lost), data["attempts"]
    text = render.trace(data)
    assert text.count("(control plane)") == len(lost), text
    return len(lost)


def test_apiserver_restart_mid_run_costs_no_attempt(
    kube: kubernetes.client.ApiClient,
    long_leader: OperatorHandle,
    dev_cluster: cluster.Handle,
    tmp_path: Path,
) -> None:
    _run_through(kube, long_leader, dev_cluster, tmp_path, "kube-apiserver", must_lose=False)


def test_postgres_restart_mid_run_costs_no_attempt(
    kube: kubernetes.client.ApiClient,
    long_leader: OperatorHandle,
    dev_cluster: cluster.Handle,
    tmp_path: Path,
) -> None:
    _run_through(kube, long_leader, dev_cluster, tmp_path, "postgres", must_lose=True)
