"""Postgres restarted (and its postmaster SIGKILLed) while runs heartbeat inside a node, on the dev cluster
with the operator and real worker Pods: each attempt that lost Postgres exits 14, the operator starts the next
one with reason ``infra`` (never ``GraphFailed``), and every run resumes and succeeds with one effect."""

from __future__ import annotations

from pathlib import Path

import kubernetes
import psycopg
import pytest

from agentrun_core import store
from agentrun_dev import settings as dev_settings
from tests.integration import pg_chaos
from tests.support.kube import create_run
from tests.support.operator_proc import OperatorHandle
from tests.support.specs import STEPS
from tests.support.waiting import wait_for, wait_phase

# serial: it restarts the dev cluster's shared Postgres, which every test running beside it would feel
# (scripts/test runs it alone, after the rest).
pytestmark = pytest.mark.serial


@pytest.mark.parametrize("kill_postmaster", [False, True], ids=["restart", "postmaster-sigkill"])
def test_runs_survive_a_postgres_restart_while_nodes_heartbeat(
    kube: kubernetes.client.ApiClient,
    operator: OperatorHandle,
    pg_dsn: str,
    dev_settings_: dev_settings.Settings,
    tmp_path: Path,
    kill_postmaster: bool,
) -> None:
    pg_chaos.durable_commits(pg_dsn)
    ns = operator.namespace
    names = ["beat-a", "beat-b"]
    uids = {}
    for name in names:
        spec = {
            "graph": STEPS,
            "input": {"path": str(tmp_path / f"{name}.txt"), "pause": {"prepare": 6}},
            "lease": {"durationSeconds": 8},
            "retry": {"backoffSeconds": 0, "maxAttempts": 4},
        }
        uids[name] = create_run(kube, ns, name, spec)["metadata"]["uid"]

    def all_beating() -> bool:
        with psycopg.connect(pg_dsn) as conn:
            beats = [store.list_heartbeats(conn, uid) for uid in uids.values()]
        return all(any(h.key.startswith("step:") for h in found) for found in beats)

    wait_for(all_beating, 120, "both runs heartbeating inside prepare", on_timeout=operator.logs)
    pg_chaos.restart(dev_settings_, kill_postmaster=kill_postmaster)
    for name in names:
        status = wait_phase(kube, ns, name, "Succeeded", 240, operator)
        assert status["attempts"] >= 2, status
    with psycopg.connect(pg_dsn) as conn:
        for name, uid in uids.items():
            run = store.get_run(conn, uid)
            attempts = store.list_attempts(conn, uid)
            assert run is not None and run.status == "succeeded" and run.error is None
            reasons = [a.start_reason for a in attempts]
            assert reasons[0] == "first" and "infra" in reasons[1:], (name, reasons)
            assert attempts[0].outcome in (None, "lost"), attempts[0]  # never failed / GraphFailed
            effect_lines = (tmp_path / f"{name}.txt").read_text().splitlines()
            assert len(effect_lines) == 1, effect_lines  # counted at the "provider": one line per call
