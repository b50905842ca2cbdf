"""Worker images vs schema (docs/upgrading.md), on the dev cluster with the operator and real worker Pods:
a worker whose code does not run against the database's schema exits 15 before it touches the run, and the
run waits (condition WorkerIncompatible, Event, never Failed, maxAttempts untouched) until the schema and
the worker match again; then it runs once. Effects are counted at the real HTTP provider and SMTP sink."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes
import psycopg
import pytest

from agentrun_dev import http_provider, smtp_sink
from tests.support import cli
from tests.support.kube import condition, create_run, events, run_status
from tests.support.operator_proc import OperatorHandle
from tests.support.specs import run_spec, upgrade_env
from tests.support.waiting import wait_for, wait_phase

GRAPH = "tests.graphs.upgrade_graph:graph"


def spec(hp: http_provider.HttpProvider, sink: smtp_sink.SmtpSink) -> dict[str, Any]:
    # Two lost attempts would fail the run: the waits below go past that without consuming it.
    retry = {"maxAttempts": 2, "backoffSeconds": 1, "maxBackoffSeconds": 2}
    return run_spec(GRAPH, {"customer": "c-1"}, retry=retry, env=upgrade_env(hp, sink))


def waits_incompatible(kube: kubernetes.client.ApiClient, ns: str, name: str, op: OperatorHandle) -> None:
    """The run waits: WorkerIncompatible True, an Event, attempts beyond maxAttempts, never Failed."""

    def waited() -> bool:
        status = run_status(kube, ns, name)
        assert status.get("phase") not in {"Failed", "Succeeded"}, status
        waiting = condition(status, "WorkerIncompatible").get("status") == "True"
        return waiting and status.get("attempts", 0) >= 3

    wait_for(waited, 180, f"{name} to wait for a compatible worker", on_timeout=lambda: op.logs()[-6000:])
    status = run_status(kube, ns, name)
    assert status["restarts"] == 0 and status["lastAttemptEnd"]["reason"] == "incompatible"
    assert "WorkerIncompatible" in {e.reason for e in events(kube, ns, name)}


def finishes_once(
    kube: kubernetes.client.ApiClient,
    ns: str,
    name: str,
    op: OperatorHandle,
    hp: http_provider.HttpProvider,
    sink: smtp_sink.SmtpSink,
) -> None:
    status = wait_phase(kube, ns, name, "Succeeded", 180, op)
    assert condition(status, "WorkerIncompatible")["status"] == "False"
    performed = http_provider.stats(hp.url)["effects_performed"]
    assert len(performed) == 1 and set(performed.values()) == {1}, performed  # the charge, once
    assert len(sink.store.find(None)) == 1


def _level_rolled_forward(pg_dsn: str, operator: OperatorHandle) -> None:
    """Too old a worker: the schema's level rolled past what it knows (a later release's migration did it)."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("UPDATE agentrun_schema_compat SET level = level + 1")


def _level_rolled_back(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("UPDATE agentrun_schema_compat SET level = level - 1")


def _migration_35_undone(pg_dsn: str, operator: OperatorHandle) -> None:
    """Too new a worker: the database is not migrated as far as it needs (migration 35 not applied)."""
    # The operator migrates at start-up (AGENTRUN_MIGRATE): only once it did may the test undo migration 35.
    started = lambda: "operator ready" in operator.logs()  # noqa: E731
    wait_for(started, 90, "the operator's start-up", on_timeout=operator.logs)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE agentrun_schema_compat")
        conn.execute("DELETE FROM agentrun_schema_version WHERE version = 35")


def _agentrun_migrate(pg_dsn: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "AGENTRUN_DSN"}
    done = cli.agentrun("migrate", "--dsn", pg_dsn, timeout=300, env=env)
    assert done.returncode == 0 and "applied 0035 worker_compat" in done.stdout, done


# A worker and a schema that disagree (made so before the run), and what makes them agree again (while the
# run waits): the run then continues by itself.
MISMATCHES: dict[str, tuple[Callable[[str, OperatorHandle], None], Callable[[str], None]]] = {
    "too-old": (_level_rolled_forward, _level_rolled_back),
    "too-new": (_migration_35_undone, _agentrun_migrate),  # until ``agentrun migrate`` applies it
}


@pytest.mark.parametrize("mismatch", sorted(MISMATCHES))
def test_a_worker_that_does_not_match_the_schema_makes_the_run_wait(
    mismatch: str,
    kube: kubernetes.client.ApiClient,
    operator: OperatorHandle,
    pg_dsn: str,
    sink: smtp_sink.SmtpSink,
    tmp_path: Path,
) -> None:
    ns, disagree, agree = operator.namespace, *MISMATCHES[mismatch]
    disagree(pg_dsn, operator)
    with http_provider.HttpProvider(tmp_path / "h") as hp:
        create_run(kube, ns, mismatch, spec(hp, sink))
        waits_incompatible(kube, ns, mismatch, operator)
        assert http_provider.stats(hp.url)["effects_performed"] == {}  # the refusing workers did nothing
        assert sink.store.find(None) == []
        why = condition(run_status(kube, ns, mismatch), "WorkerIncompatible")["message"]
        assert "exit code 15" in why and "does not run against the database's schema" in why
        agree(pg_dsn)
        finishes_once(kube, ns, mismatch, operator, hp, sink)


@pytest.fixture(autouse=True)
def _no_fault_points(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTRUN_FAULT_POINTS", raising=False)
