"""A spec Postgres cannot store never stalls its run (issue 35, item 7).

U+0000 is valid JSON (``"\\u0000"``) and the API server accepts it, but Postgres's jsonb and text cannot hold
it. In ``spec.input`` it is refused at the door (the admission policy ``agentrun-input-limits``, and the
operator's own ``phases.input_problem`` for a cluster without it); anywhere else the operator's admission
statement fails, and the run ends ``Failed`` (reason ``Unstorable``) with a Warning Event, once, instead of
being retried every poll with no status at all. Real API server, real operator, real Postgres."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes
import psycopg
import pytest

from tests.support.kube import condition, create_run, events
from tests.support.operator_proc import OperatorHandle
from tests.support.specs import STEPS
from tests.support.waiting import wait_for, wait_phase


@pytest.mark.parametrize(
    "spec_input",
    [
        pytest.param({"note": "before\u0000after"}, id="nul-in-a-value"),
        pytest.param({"deep": [{"x": ["ok", "\u0000"]}]}, id="nul-nested"),
        pytest.param({"key\u0000": 1}, id="nul-in-a-key"),
    ],
)
def test_an_input_with_a_nul_is_refused_at_admission(
    kube: kubernetes.client.ApiClient, namespace: str, spec_input: dict[str, Any]
) -> None:
    with pytest.raises(kubernetes.client.ApiException) as refused:
        create_run(kube, namespace, "nul", {"graph": STEPS, "input": spec_input})
    assert refused.value.status == 422, refused.value
    assert "U+0000" in str(refused.value.body), refused.value.body


def test_a_spec_postgres_cannot_store_fails_the_run_with_a_reason(
    kube: kubernetes.client.ApiClient, operator: OperatorHandle, pg_dsn: str, tmp_path: Path
) -> None:
    """A NUL outside the input (an approver's name: the approval policy is stored as jsonb) reaches the
    operator's admission statement, which Postgres refuses: the run fails, says why, and is never admitted."""
    ns = operator.namespace
    spec = {"graph": STEPS, "input": {}, "approval": {"approvers": {"users": ["ann\u0000"]}}}
    create_run(kube, ns, "unstorable", spec)
    status = wait_phase(kube, ns, "unstorable", "Failed", 90, operator)
    failed = condition(status, "Failed")
    assert failed.get("reason") == "Unstorable", status
    assert "cannot be stored in Postgres" in status["message"], status
    assert "u0000" in status["message"] or "0x00" in status["message"], status  # Postgres's own words
    warned = wait_for(
        lambda: [e for e in events(kube, ns, "unstorable") if e.reason == "Unstorable"], 30, "the Event"
    )
    assert warned[0].type == "Warning"
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        uid = kube_uid(kube, ns, "unstorable")
        admitted = admin.execute("SELECT count(*) FROM agentrun_runs WHERE run_id = %s", (uid,)).fetchone()
    assert admitted == (0,)
    # A run next to it is admitted and runs: the operator is not stuck on the bad one.
    out = tmp_path / "fine.txt"
    create_run(kube, ns, "fine", {"graph": STEPS, "input": {"path": str(out)}})
    wait_phase(kube, ns, "fine", "Succeeded", 120, operator)
    assert len(out.read_text().splitlines()) == 1
    assert operator.current.alive(), operator.logs()[-4000:]
    assert run_status_reason_stays(kube, ns, "unstorable") == "Unstorable"


def kube_uid(kube: kubernetes.client.ApiClient, ns: str, name: str) -> str:
    obj = kubernetes.client.CustomObjectsApi(kube).get_namespaced_custom_object(
        "agentrun.dev", "v1alpha1", ns, "agentruns", name
    )
    return str(obj["metadata"]["uid"])


def run_status_reason_stays(kube: kubernetes.client.ApiClient, ns: str, name: str) -> str:
    obj = kubernetes.client.CustomObjectsApi(kube).get_namespaced_custom_object(
        "agentrun.dev", "v1alpha1", ns, "agentruns", name
    )
    status = obj.get("status") or {}
    return str(condition(status, "Failed").get("reason"))
