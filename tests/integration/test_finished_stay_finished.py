"""Finished runs stay finished (issue 34, item 4), on the dev cluster with a real operator and real Postgres.

* A run whose status shows it was admitted and whose rows are gone from Postgres (purged while its AgentRun
  still existed, a database restored from an older backup) is never admitted again: no new Pod, no effect
  again (counted in the file the effect appends to), and a ``LedgerMissing`` condition and Event say why.
* Retention purges a run's rows only once its AgentRun is gone from the API server: a TTL-deleted run held
  by another finalizer keeps its rows while a run deleted next to it is purged, and loses them once the
  other finalizer lets it go.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes
import psycopg
from conftest import (
    OperatorHandle,
    condition,
    create_run,
    custom,
    events,
    pods,
    run_status,
    wait_for,
    wait_phase,
)

from agentrun_core import store

STEPS = "tests.integration.test_operator_graphs:steps"
GROUP, VERSION, PLURAL = "agentrun.dev", "v1alpha1", "agentruns"
HOLD = "test.agentrun.dev/hold"


def spec(path: Path, **extra: Any) -> dict[str, Any]:
    return {
        "graph": STEPS,
        "input": {"path": str(path)},
        "lease": {"durationSeconds": 8},
        "retry": {"backoffSeconds": 0, "maxAttempts": 4},
        **extra,
    }


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def db_run(dsn: str, uid: str) -> store.Run | None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return store.get_run(conn, uid)


def later_attempts(kube: kubernetes.client.ApiClient, ns: str, name: str) -> list[str]:
    return [
        p.metadata.name for p in pods(kube, ns, name) if p.metadata.labels.get("agentrun.dev/attempt") != "1"
    ]


def test_an_admitted_run_whose_rows_are_gone_is_never_admitted_again(
    kube: kubernetes.client.ApiClient, operator: OperatorHandle, tmp_path: Path, pg_dsn: str
) -> None:
    ns, out = operator.namespace, tmp_path / "effects.txt"
    uid = create_run(kube, ns, "done", spec(out))["metadata"]["uid"]
    wait_phase(kube, ns, "done", "Succeeded", 120, operator)
    assert len(lines(out)) == 1
    # What a purge that ran while the AgentRun still existed leaves behind: no row of the run at all.
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        store.mark_for_purge(conn, uid, after_seconds=0, reason="ttl")
        assert store.purge_due(conn) == [uid]
    # Any event of the run wakes its loop.
    custom(kube).patch_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, "done", {"metadata": {"annotations": {"test.agentrun.dev/poke": "1"}}}
    )

    def settled() -> dict[str, Any] | None:
        status = run_status(kube, ns, "done")
        missing = condition(status, "LedgerMissing").get("status") == "True"
        # Re-admitted (the bug): a row again, or a second attempt's Pod. Either ends the wait at once.
        again = db_run(pg_dsn, uid) is not None or later_attempts(kube, ns, "done")
        return status if missing or again else None

    status = wait_for(settled, 90, "the run to notice its rows are gone", on_timeout=operator.logs)
    assert db_run(pg_dsn, uid) is None, "the run was admitted again"
    assert later_attempts(kube, ns, "done") == []
    assert len(lines(out)) == 1, lines(out)  # the effect was not performed again
    missing = condition(status, "LedgerMissing")
    assert missing["status"] == "True" and missing["reason"] == "LedgerMissing", missing
    assert "never admitted again" in missing["message"], missing
    assert status["phase"] == "Succeeded", status  # what it showed stays: nothing ran again
    assert condition(status, "Admitted")["status"] == "True", status
    warned = wait_for(
        lambda: [e for e in events(kube, ns, "done") if e.reason == "LedgerMissing"],
        30,
        "the LedgerMissing Event",
    )
    assert warned[0].type == "Warning", warned


def _create_held(kube: kubernetes.client.ApiClient, ns: str, name: str, body_spec: dict[str, Any]) -> str:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "AgentRun",
        "metadata": {"name": name, "finalizers": [HOLD]},
        "spec": body_spec,
    }
    created = custom(kube).create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)
    return str(created["metadata"]["uid"])


def _exists(kube: kubernetes.client.ApiClient, ns: str, name: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = custom(kube).get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
    except kubernetes.client.ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return found


def test_retention_purges_a_run_only_once_its_agentrun_is_gone(
    kube: kubernetes.client.ApiClient, operator: OperatorHandle, tmp_path: Path, pg_dsn: str
) -> None:
    ns = operator.namespace
    operator.restart(hard=False, extra_env={"AGENTRUN_PURGE_INTERVAL_SECONDS": "0.5"})
    operator.wait_leader(kube, timeout=60)
    held_out, free_out = tmp_path / "held.txt", tmp_path / "free.txt"
    held = _create_held(kube, ns, "held", spec(held_out, ttlSecondsAfterFinished=0))

    def deleting_and_released() -> bool:
        meta = (_exists(kube, ns, "held") or {}).get("metadata") or {}
        return bool(meta.get("deletionTimestamp")) and meta.get("finalizers") == [HOLD]

    # TTL 0: deleted as soon as it succeeded; the operator's finalizer goes, the test's holds it.
    wait_for(deleting_and_released, 120, "the TTL delete of the held run", on_timeout=operator.logs)
    assert len(lines(held_out)) == 1

    # A run deleted next to it, nothing holding it: once its rows are purged, a purge pass has run since
    # the held run was marked.
    free = create_run(kube, ns, "free", spec(free_out, ttlSecondsAfterFinished=0))["metadata"]["uid"]
    wait_for(
        lambda: _exists(kube, ns, "free") is None,
        120,
        "the TTL delete of the free run",
        on_timeout=operator.logs,
    )
    wait_for(lambda: db_run(pg_dsn, free) is None, 60, "the free run's purge", on_timeout=operator.logs)
    assert len(lines(free_out)) == 1

    assert _exists(kube, ns, "held") is not None
    assert db_run(pg_dsn, held) is not None, "purged while its AgentRun still exists"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        due = conn.execute(
            "SELECT purge_after <= now() FROM agentrun_retention WHERE run_id = %s", (held,)
        ).fetchone()
    assert due == (True,), due  # marked by its finalizer, due (a TTL delete): kept only because it exists

    # Let it go: gone from the API server, then purged.
    custom(kube).patch_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, "held", {"metadata": {"finalizers": None}}
    )
    wait_for(lambda: _exists(kube, ns, "held") is None, 60, "the held run to go")
    wait_for(lambda: db_run(pg_dsn, held) is None, 60, "the held run's purge", on_timeout=operator.logs)
    assert len(lines(held_out)) == 1
