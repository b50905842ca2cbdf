"""Finished runs stay finished (issue 34, item 4), on the dev cluster with a real operator and real Postgres.

* A run whose status shows it was admitted and whose rows are gone from Postgres (purged while its AgentRun
  still existed, a database restored from an older backup) is never admitted again: no new Pod, no effect
  again (counted in the file the effect appends to), and a ``LedgerMissing`` condition and Event say why.
* Retention purges a run's rows only once its AgentRun is gone from the API server: a TTL-deleted run held
  by another finalizer keeps its rows while a run deleted next to it is purged, and loses them once the
  other finalizer lets it go; a TTL delete the API server refuses (an admission policy) marks nothing: the
  run, its ledger and its single effect stay.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import psycopg

from agentrun_core import store
from tests.support.kube import GROUP, PLURAL, VERSION, condition, create_run, custom, events, pods, run_status
from tests.support.operator_proc import OperatorHandle
from tests.support.specs import STEPS, lines, run_spec
from tests.support.waiting import wait_for, wait_phase

HOLD = "test.agentrun.dev/hold"
REFUSE = "test.agentrun.dev/refuse-delete"


def spec(path: Path, **extra: Any) -> dict[str, Any]:
    return run_spec(STEPS, {"path": str(path)}, retry={"backoffSeconds": 0, "maxAttempts": 4}, **extra)


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


@contextlib.contextmanager
def _deletes_refused(kube: kubernetes.client.ApiClient, ns: str) -> Iterator[None]:
    """A ValidatingAdmissionPolicy that refuses deleting the AgentRuns labelled REFUSE in ``ns``."""
    admission = kubernetes.client.AdmissionregistrationV1Api(kube)
    name = f"test-refuse-delete-{uuid.uuid4().hex[:12]}"  # cluster-scoped: unique per test
    admission.create_validating_admission_policy(
        {
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [GROUP],
                            "apiVersions": ["*"],
                            "operations": ["DELETE"],
                            "resources": [PLURAL],
                        }
                    ]
                },
                "validations": [
                    {
                        "expression": f"!('{REFUSE}' in oldObject.metadata.?labels.orValue({{}}))",
                        "message": "deleting this AgentRun is refused (test)",
                    }
                ],
            },
        }
    )
    admission.create_validating_admission_policy_binding(
        {
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}},
            },
        }
    )
    try:
        yield
    finally:
        admission.delete_validating_admission_policy_binding(name)
        admission.delete_validating_admission_policy(name)


def test_a_ttl_delete_the_api_server_refuses_leaves_the_run_and_its_ledger(
    kube: kubernetes.client.ApiClient, operator: OperatorHandle, tmp_path: Path, pg_dsn: str
) -> None:
    """The issue's scenario: the TTL's delete is refused (an admission policy). Nothing is marked or purged,
    the run is not admitted again, its effect is not performed again."""
    ns = operator.namespace
    operator.restart(hard=False, extra_env={"AGENTRUN_PURGE_INTERVAL_SECONDS": "0.5"})
    operator.wait_leader(kube, timeout=60)
    out, free_out = tmp_path / "refused.txt", tmp_path / "free.txt"
    with _deletes_refused(kube, ns):
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "AgentRun",
            "metadata": {"name": "refused", "labels": {REFUSE: "true"}},
            "spec": spec(out, ttlSecondsAfterFinished=0),
        }
        uid = custom(kube).create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)["metadata"][
            "uid"
        ]

        def finished_or_ran_again() -> bool:
            # Ran again (the bug: marked for purge, purged although the delete was refused, admitted again)
            # ends the wait too: the TTL deletes each time it finishes, so its phase may never be seen.
            ran = len(lines(out))
            return ran > 1 or (ran == 1 and run_status(kube, ns, "refused").get("phase") == "Succeeded")

        wait_for(finished_or_ran_again, 120, "the run to succeed", on_timeout=operator.logs)
        first = db_run(pg_dsn, uid)
        assert first is not None and len(lines(out)) == 1, lines(out)
        wait_for(
            lambda: "deleting this AgentRun is refused" in operator.logs(),
            60,
            "the TTL's delete to be refused",
            on_timeout=operator.logs,
        )
        # A purge pass has run since: a run deleted next to it is purged.
        free = create_run(kube, ns, "free", spec(free_out, ttlSecondsAfterFinished=0))["metadata"]["uid"]
        wait_for(
            lambda: _exists(kube, ns, "free") is None, 120, "the free run's delete", on_timeout=operator.logs
        )
        wait_for(lambda: db_run(pg_dsn, free) is None, 60, "the free run's purge", on_timeout=operator.logs)

        again = db_run(pg_dsn, uid)
        assert again is not None and again.admitted_at == first.admitted_at, "purged and admitted again"
        assert later_attempts(kube, ns, "refused") == []
        assert len(lines(out)) == 1, lines(out)
        assert run_status(kube, ns, "refused")["phase"] == "Succeeded"
    # Once deletes are allowed again the TTL deletes it, and its rows go.
    wait_for(lambda: _exists(kube, ns, "refused") is None, 120, "the TTL delete", on_timeout=operator.logs)
    wait_for(lambda: db_run(pg_dsn, uid) is None, 60, "the refused run's purge", on_timeout=operator.logs)
    assert len(lines(out)) == 1
