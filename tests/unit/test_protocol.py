"""The worker<->operator contract (agentrun_core.api.protocol): what the operator sets, the worker reads."""

from __future__ import annotations

from agent_operator import settings
from agent_operator.decide import model, pods, reconcile
from agent_worker import settings as worker_settings
from agentrun_core.api import protocol
from tests.unit.reconcile_world import drained

RUN = model.RunRef(namespace="ns", name="r", uid="uid-1")


def test_the_worker_reads_the_environment_the_operator_sets() -> None:
    spec = model.RunSpec.from_body({"graph": "a.b:g", "lease": {"durationSeconds": 9}})
    body = pods.manifest(RUN, spec, 3, "evicted", settings.from_env({"AGENTRUN_DSN": "postgresql://x/y"}))
    env = {e["name"]: e.get("value") for e in body["spec"]["containers"][0]["env"]}
    # valueFrom entries (Pod name, DSN) are filled in by the kubelet: stand in for it.
    env[protocol.ENV_POD_NAME] = body["metadata"]["name"]
    env[protocol.ENV_DSN] = "postgresql://worker/db"
    seen = worker_settings.from_env({k: v for k, v in env.items() if v is not None})
    assert (seen.run_id, seen.run_name, seen.namespace, seen.attempt) == ("uid-1", "r", "ns", 3)
    assert seen.pod_name == protocol.pod_name("r", 3) == "r-3"
    assert seen.effective_lease_name == protocol.lease_name("r") == "agentrun-r"
    assert seen.lease_duration_seconds == 9


def test_the_operator_reads_the_worker_exit_codes() -> None:
    ended = {
        protocol.EXIT_DRAINED: "drained",
        protocol.EXIT_INFRA: "infra",
        protocol.EXIT_FENCED: "lease_lost",
        protocol.EXIT_FAILED: "failed",
    }
    for code, reason in ended.items():
        assert pods.end_reason(model.PodInfo("r-1", 1, phase="Failed", exit_code=code))[0] == reason


def test_a_suspended_run_is_looked_at_after_the_idle_poll_setting() -> None:
    suspended = drained(spec={"suspend": True})
    plan = reconcile.decide(suspended, settings.ReconcileSettings(idle_poll_seconds=45.0))
    assert plan.status is not None and plan.status["phase"] == "Suspended"
    assert plan.requeue_after == 45.0
