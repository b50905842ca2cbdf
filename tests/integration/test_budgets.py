"""spec.budget end to end on the dev cluster: real worker Pods run a graph whose fake chat model reports
``usage_metadata`` and bills every call at its "provider" (a line fsynced to a file before the answer leaves,
tests/graphs/budget_graphs.py); the real API server, admission policies, operator and Postgres.

The run parks on an approval when a limit is reached, an approver raises it with ``kubectl agentrun approve
--set``, the run finishes; a rejection ends it Failed/BudgetExceeded. Killed at points around the limit, the
count in Postgres equals the calls the provider billed, and every park happens exactly at the limit in force:
no call started once the spent count had reached a limit nobody raised.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes
import psycopg
import pytest

from agentrun import trace, trace_cli
from agentrun_core import store
from agentrun_core.store import metrics_sql
from tests.graphs import budget_graphs
from tests.support.kube import bind, condition, create_run, get_run, kubectl, run_status
from tests.support.operator_proc import OperatorHandle
from tests.support.specs import run_spec
from tests.support.waiting import wait_for, wait_phase

GRAPH = "tests.graphs.budget_graphs:graph"
PER_CALL = budget_graphs.INPUT_TOKENS + budget_graphs.OUTPUT_TOKENS  # 150 total tokens per call


def spec(log: Path, *, steps: int, limit: int, faults: dict[str, str] | None = None) -> dict[str, Any]:
    return run_spec(
        GRAPH,
        {"steps": steps, "calls": 1},
        lease=6,
        retry={"backoffSeconds": 0, "maxAttempts": 10},
        env={budget_graphs.LOG_ENV: str(log), **(faults or {})},
        budget={
            "totalTokens": limit,
            "cost": "1",
            "currency": "USD",
            "price": {"inputPer1k": "0.003", "outputPer1k": "0.015"},
        },
    )


def billed(log: Path) -> int:
    """Calls the provider billed (each fsynced before its answer left)."""
    return len(log.read_text().splitlines()) if log.exists() else 0


def counted(dsn: str, run_id: str) -> tuple[int, int]:
    """(calls, total tokens) as the worker recorded them in Postgres."""
    with psycopg.connect(dsn) as conn:
        spent, calls = store.model_usage(conn, run_id)
    return calls, spent.total_tokens


def model_metrics(dsn: str, ns: str) -> tuple[int, int, int, int]:
    """(calls, input tokens, output tokens, cost in micro-units) as a metrics scrape reads them."""
    with psycopg.connect(dsn) as conn:
        rows = metrics_sql.read_snapshot(conn).model_usage
    return next(((n, i, o, c) for name, n, i, o, c in rows if name == ns), (0, 0, 0, 0))


def agentrun(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return kubectl(kubeconfig, "agentrun", *args, timeout=120)


@pytest.fixture
def manager(kube: kubernetes.client.ApiClient, namespace: str, identity: Callable[..., Path]) -> Path:
    bind(kube, namespace, "manager", "agentrun-approver")
    return identity("manager", ["managers"])


def parked(kube: kubernetes.client.ApiClient, op: OperatorHandle, name: str) -> dict[str, Any]:
    status = wait_phase(kube, op.namespace, name, ("WaitingApproval", "Succeeded", "Failed"), 300, op)
    assert status["phase"] == "WaitingApproval", status
    assert condition(status, "WaitingApproval")["status"] == "True"
    return status


def test_the_run_parks_at_the_limit_an_approver_raises_it_and_the_run_finishes(
    kube: kubernetes.client.ApiClient, operator: OperatorHandle, manager: Path, pg_dsn: str, tmp_path: Path
) -> None:
    ns, log = operator.namespace, tmp_path / "billed.log"
    uid = create_run(kube, ns, "b", spec(log, steps=6, limit=400))["metadata"]["uid"]
    status = parked(kube, operator, "b")
    # 3 calls = 450 tokens reached 400: the 4th call asked first, and was not made.
    assert billed(log) == 3 and counted(pg_dsn, uid) == (3, 450)
    prompt = status["pendingApproval"]["prompt"]
    assert prompt["kind"] == "budget" and prompt["reached"] == ["totalTokens"]
    assert prompt["spent"] == {
        "inputTokens": 300,
        "outputTokens": 150,
        "totalTokens": 450,
        "cost": "0.00315",  # 300 * 0.003/1k + 150 * 0.015/1k
        "currency": "USD",
    }
    assert "450 of 400 totalTokens" in prompt["message"] and "totalTokens" in prompt["editable"]
    aid = status["pendingApproval"]["id"]
    assert status["usage"]["totalTokens"] == 450 and status["usage"]["limits"]["totalTokens"] == "400"
    bad = agentrun(manager, "approve", "b", "-n", ns, "--id", aid, "--set", "deadline=soon")
    assert bad.returncode != 0 and "cannot edit deadline" in bad.stderr, bad.stderr
    done = agentrun(manager, "approve", "b", "-n", ns, "--id", aid, "--set", "totalTokens=1000")
    assert done.returncode == 0, done.stderr
    status = wait_phase(kube, ns, "b", "Succeeded", 300, operator)
    assert billed(log) == 6 and counted(pg_dsn, uid) == (6, 900)
    assert status["usage"]["totalTokens"] == 900 and status["usage"]["limits"]["totalTokens"] == "1000"
    assert status["usage"]["calls"] == 6 and status["usage"]["cost"] == "0.0063"
    assert [a["decision"] for a in status["approvals"]] == ["approved"]
    assert status["approvals"][0]["edited"] == ["totalTokens"]
    # The trace shows each step's model calls: one call of 150 tokens per think step, 6 in all.
    shown = trace.build(trace_cli.gather(get_run(kube, ns, "b"), pg_dsn))
    per_step = [s["modelUsage"]["totalTokens"] for s in shown["steps"] if "modelUsage" in s]
    assert per_step == [PER_CALL] * 6 and shown["modelUsage"]["totalTokens"] == 900
    # The metrics read the same rows, and keep them once retention folds the run into the rollups.
    assert model_metrics(pg_dsn, ns) == (6, 600, 300, 6_300)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert store.fold_runs(conn) == 1
    assert model_metrics(pg_dsn, ns) == (6, 600, 300, 6_300)


def test_a_rejected_raise_ends_the_run_failed_budget_exceeded(
    kube: kubernetes.client.ApiClient, operator: OperatorHandle, manager: Path, pg_dsn: str, tmp_path: Path
) -> None:
    ns, log = operator.namespace, tmp_path / "billed.log"
    uid = create_run(kube, ns, "r", spec(log, steps=6, limit=300))["metadata"]["uid"]
    aid = parked(kube, operator, "r")["pendingApproval"]["id"]
    assert billed(log) == 2 and counted(pg_dsn, uid) == (2, 300)  # reached exactly at equality
    out = agentrun(manager, "reject", "r", "-n", ns, "--id", aid, "--comment", "too expensive")
    assert out.returncode == 0, out.stderr
    status = wait_phase(kube, ns, "r", "Failed", 300, operator)
    assert condition(status, "Failed")["reason"] == "BudgetExceeded", status
    assert "rejected by manager" in status["error"]
    assert billed(log) == 2 and counted(pg_dsn, uid) == (2, 300)  # nothing spent after the rejection
    with psycopg.connect(pg_dsn) as conn:
        run = store.get_run(conn, uid)
    assert run is not None and (run.status, run.status_reason) == ("failed", "BudgetExceeded")


# Where attempt 1 (and 2) die, around the limit of 400 tokens (150 per call: reached after call 3).
KILLS: dict[str, dict[str, str]] = {
    "usage-recorded-before-the-crossing-call-returns": {
        "AGENTRUN_FAULT_POINTS_ATTEMPT_1": "after_model_usage@3"
    },
    "usage-recorded-before-an-early-call-returns": {"AGENTRUN_FAULT_POINTS_ATTEMPT_1": "after_model_usage@1"},
    "at-the-check-that-parks": {"AGENTRUN_FAULT_POINTS_ATTEMPT_1": "before_model_check@4"},
    "after-the-crossing-step-checkpoint": {"AGENTRUN_FAULT_POINTS_ATTEMPT_1": "after_checkpoint@4"},
    "while-parking": {"AGENTRUN_FAULT_POINTS_ATTEMPT_1": "while_parking"},
    "resuming-after-the-raise": {
        "AGENTRUN_FAULT_POINTS_ATTEMPT_2": "after_resume_read",
        "AGENTRUN_FAULT_POINTS_ATTEMPT_3": "after_model_usage@2",
    },
    "the-raised-call-recorded-then-killed": {"AGENTRUN_FAULT_POINTS_ATTEMPT_2": "after_model_usage@1"},
}


def drive_around_the_limit(
    kube: kubernetes.client.ApiClient,
    operator: OperatorHandle,
    manager: Path,
    pg_dsn: str,
    tmp_path: Path,
    kills: dict[str, dict[str, str]],
    graph: str | None = None,
) -> dict[str, tuple[str, Path]]:
    """One run per entry of ``kills`` (limit 400 tokens, six steps), each approved up by three calls whenever
    it parks at its limit, until all succeeded. At every park and at the end: Postgres counts exactly the
    calls the provider billed, and no call started past the limit in force. Returns name -> (uid, bills)."""
    ns = operator.namespace
    runs: dict[str, tuple[str, Path]] = {}
    for name, faults in kills.items():
        log = tmp_path / f"{name}.log"
        body = spec(log, steps=6, limit=400, faults=faults)
        if graph is not None:
            body["graph"] = graph
        runs[name] = (create_run(kube, ns, name, body)["metadata"]["uid"], log)
    limits = dict.fromkeys(runs, 400)
    decided: dict[str, set[str]] = {name: set() for name in runs}
    finished: set[str] = set()

    def step() -> bool:
        for name, (uid, log) in runs.items():
            if name in finished:
                continue
            status = run_status(kube, ns, name)
            phase = status.get("phase")
            assert phase not in ("Failed", "Cancelled"), (name, status)
            if phase == "Succeeded":
                finished.add(name)
                continue
            pending = status.get("pendingApproval")
            if phase != "WaitingApproval" or not pending or pending["id"] in decided[name]:
                continue
            calls, total = counted(pg_dsn, uid)
            # Exact: every billed call is counted once, kills included (a re-executed call was billed again).
            assert (calls, total) == (billed(log), billed(log) * PER_CALL), (name, status)
            # Parked exactly at the limit in force: reached now, not reached before the last call started.
            assert total >= limits[name] > total - PER_CALL, (name, total, limits[name])
            assert pending["prompt"]["spent"]["totalTokens"] == total, (name, pending["prompt"])
            limits[name] = total + 3 * PER_CALL
            raise_ = f"totalTokens={limits[name]}"
            out = agentrun(manager, "approve", name, "-n", ns, "--id", pending["id"], "--set", raise_)
            assert out.returncode == 0, (name, out.stderr)
            decided[name].add(pending["id"])
        return len(finished) == len(runs)

    wait_for(step, 900, "every run finished", interval=1.0, on_timeout=operator.logs)
    for name, (uid, log) in runs.items():
        calls, total = counted(pg_dsn, uid)
        assert (calls, total) == (billed(log), billed(log) * PER_CALL), name
        # The last call started below the limit in force (the one in flight may cross it, and is counted).
        assert total - PER_CALL < limits[name], (name, total, limits[name])
        assert decided[name], f"{name} never parked at its limit"
        status = run_status(kube, ns, name)
        assert status["usage"]["totalTokens"] == total, (name, status["usage"])
    return runs


def test_killed_around_the_limit_the_count_is_exact_and_no_limit_is_passed_unraised(
    kube: kubernetes.client.ApiClient, operator: OperatorHandle, manager: Path, pg_dsn: str, tmp_path: Path
) -> None:
    runs = drive_around_the_limit(kube, operator, manager, pg_dsn, tmp_path, KILLS)
    for name in runs:
        attempts = run_status(kube, operator.namespace, name)["attempts"]
        # The kill really happened: one attempt more than parking and resuming take (killed while parking,
        # the approval was already recorded: the run waits, and the approval's attempt finishes).
        assert attempts >= (2 if name == "while-parking" else 3), (name, attempts)


def test_a_decision_handed_back_again_never_raises_a_limit_twice(
    kube: kubernetes.client.ApiClient, operator: OperatorHandle, manager: Path, pg_dsn: str, tmp_path: Path
) -> None:
    """Three model calls in ONE node, a limit of one call. A plain approval grants another 150 tokens; the
    node re-runs from its start, so its first call is made (and billed, and counted) again and reaches the
    raised limit before the second call. LangGraph hands the first decision back to the check that asks
    again: it must raise nothing more (what it raises is read from its own recorded prompt), so the run parks
    a second time instead of going on past a limit nobody raised."""
    ns, log = operator.namespace, tmp_path / "billed.log"
    body = spec(log, steps=1, limit=PER_CALL)
    body["input"]["calls"] = 3
    uid = create_run(kube, ns, "one-node", body)["metadata"]["uid"]
    first = parked(kube, operator, "one-node")["pendingApproval"]
    assert billed(log) == 1 and first["prompt"]["approveGrants"] == {"totalTokens": str(2 * PER_CALL)}
    out = agentrun(manager, "approve", "one-node", "-n", ns, "--id", first["id"])
    assert out.returncode == 0, out.stderr

    def parked_again() -> dict[str, Any] | None:
        status = run_status(kube, ns, "one-node")
        assert status.get("phase") not in ("Succeeded", "Failed"), status
        pending = status.get("pendingApproval")
        return pending if pending and pending["id"] != first["id"] else None

    second = wait_for(parked_again, 300, "the second park", on_timeout=operator.logs)
    assert billed(log) == 2 and counted(pg_dsn, uid) == (2, 2 * PER_CALL)  # the first call, made twice
    assert second["prompt"]["limits"] == {"totalTokens": str(2 * PER_CALL), "cost": "1"}
    out = agentrun(
        manager, "approve", "one-node", "-n", ns, "--id", second["id"], "--set", "totalTokens=1000"
    )
    assert out.returncode == 0, out.stderr
    wait_phase(kube, ns, "one-node", "Succeeded", 300, operator)
    assert billed(log) == 5 and counted(pg_dsn, uid) == (5, 5 * PER_CALL)


def test_the_api_server_refuses_a_budget_it_could_not_count(
    kube: kubernetes.client.ApiClient, namespace: str, tmp_path: Path
) -> None:
    refused = {
        "no-prices": ({"cost": "1"}, "spec.budget.cost needs prices"),
        "seven-decimals": ({"cost": "0.0000001", "price": {"inputPer1k": "1"}}, "spec.budget.cost"),
        "zero-tokens": ({"totalTokens": 0}, "spec.budget.totalTokens"),
        "float-price": ({"cost": "1", "price": {"inputPer1k": 0.5}}, "spec.budget.price.inputPer1k"),
    }
    for name, (budget_spec, message) in refused.items():
        body = {**spec(tmp_path / "x.log", steps=1, limit=1), "budget": budget_spec}
        with pytest.raises(kubernetes.client.ApiException) as caught:
            create_run(kube, namespace, name, body)
        # 422: the CRD's schema; a value of the wrong type already fails the stamping admission policy (403)
        assert caught.value.status in (403, 422), (name, caught.value.body)
        assert message in str(caught.value.body), (name, caught.value.body)
