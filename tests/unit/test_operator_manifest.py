"""The worker Pod manifest (design.md worker contract) and the classification of ended Pods."""

from __future__ import annotations

from agent_operator import settings
from agent_operator.decide import model, pods
from agentrun_core.api import protocol

RUN = model.RunRef(namespace="ns", name="r", uid="uid-1")


def cfg(**env: str) -> settings.Settings:
    return settings.from_env({"AGENTRUN_DSN": "postgresql://x/y", **env})


def env_of(body: dict) -> dict[str, object]:  # type: ignore[type-arg]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in body["spec"]["containers"][0]["env"]}


def test_manifest_follows_the_worker_contract() -> None:
    spec = model.RunSpec.from_body({"graph": "a.b:g", "lease": {"durationSeconds": 9}})
    body = pods.manifest(RUN, spec, 2, "evicted", cfg())
    meta = body["metadata"]
    assert meta["name"] == "r-2"
    assert meta["labels"][protocol.LABEL_RUN] == "r" and meta["labels"][protocol.LABEL_ATTEMPT] == "2"
    owner = meta["ownerReferences"][0]
    assert owner["kind"] == "AgentRun" and owner["uid"] == "uid-1" and owner["controller"] is True
    assert meta["finalizers"] == [protocol.POD_FINALIZER]  # a deleted Pod waits until its end is recorded
    assert body["spec"]["restartPolicy"] == "Never"
    assert body["spec"]["serviceAccountName"] == "agentrun-worker"
    env = env_of(body)
    assert env["AGENTRUN_RUN_ID"] == "uid-1" and env["AGENTRUN_ATTEMPT"] == "2"
    assert env["AGENTRUN_LEASE_NAME"] == "agentrun-r" and env["AGENTRUN_LEASE_DURATION_SECONDS"] == "9"
    assert env["AGENTRUN_POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    # Never the operator's DSN as a plain value: the namespace's provisioned tenant Secret.
    assert env["AGENTRUN_DSN"] == {"secretKeyRef": {"name": "agentrun-worker-db", "key": "dsn"}}
    assert "postgresql://x/y" not in str(body)
    assert body["spec"]["containers"][0]["command"] == ["agentrun", "worker"]
    assert body["spec"]["securityContext"]["runAsNonRoot"] is True  # Pod Security "restricted"


def test_dsn_from_secret_when_configured() -> None:
    spec = model.RunSpec.from_body({"graph": "a.b:g"})
    env = env_of(pods.manifest(RUN, spec, 1, "first", cfg(AGENTRUN_WORKER_DSN_SECRET="pg/dsn")))
    assert env["AGENTRUN_DSN"] == {"secretKeyRef": {"name": "pg", "key": "dsn"}}


def test_attempt_scoped_fault_points() -> None:
    spec = model.RunSpec.from_body(
        {
            "graph": "a.b:g",
            "worker": {
                "env": [
                    {"name": "AGENTRUN_FAULT_POINTS_ATTEMPT_1", "value": "after_call"},
                    {"name": "EXTRA", "value": "1"},
                ]
            },
        }
    )
    first = env_of(pods.manifest(RUN, spec, 1, "first", cfg()))
    second = env_of(pods.manifest(RUN, spec, 2, "evicted", cfg()))
    assert first["AGENTRUN_FAULT_POINTS"] == "after_call" and first["EXTRA"] == "1"
    assert "AGENTRUN_FAULT_POINTS" not in second and second["EXTRA"] == "1"


def test_end_reasons() -> None:
    assert pods.end_reason(None)[0] == "deleted"
    assert pods.end_reason(model.PodInfo("p", 1, phase="Failed", reason="Evicted"))[0] == "evicted"
    oom = model.PodInfo("p", 1, phase="Failed", terminated_reason="OOMKilled", exit_code=137)
    assert pods.end_reason(oom)[0] == "OOMKilled"
    assert pods.end_reason(model.PodInfo("p", 1, phase="Failed", exit_code=11))[0] == "drained"
    assert pods.end_reason(model.PodInfo("p", 1, phase="Failed", exit_code=1))[0] == "failed"


def test_pod_info_from_body() -> None:
    info = model.PodInfo.from_body(
        {
            "metadata": {"name": "r-1", "labels": {protocol.LABEL_ATTEMPT: "1"}, "deletionTimestamp": "x"},
            "status": {
                "phase": "Failed",
                "containerStatuses": [{"state": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}],
            },
        }
    )
    assert info.attempt == 1 and info.deleting and info.terminated
    assert info.terminated_reason == "OOMKilled" and info.exit_code == 137
    assert not info.held and not info.force_deleted


def test_pod_info_held_and_force_deleted() -> None:
    def info(**meta: object) -> model.PodInfo:
        return model.PodInfo.from_body({"metadata": {"name": "r-1", **meta}})

    held = info(finalizers=["other.example/x", protocol.POD_FINALIZER])
    assert held.held and not held.deleting and not held.force_deleted
    assert not info(finalizers=["other.example/x"]).held
    graceful = info(deletionTimestamp="t", deletionGracePeriodSeconds=30)
    assert graceful.deleting and not graceful.force_deleted
    assert info(deletionTimestamp="t", deletionGracePeriodSeconds=0).force_deleted
    assert not info(deletionGracePeriodSeconds=0).force_deleted  # no deletionTimestamp: not deleted at all


def test_settings_from_env() -> None:
    s = settings.from_env(
        {
            "AGENTRUN_DSN": "d",
            "AGENTRUN_WATCH_NAMESPACES": "a, b",
            "AGENTRUN_LEADER_DURATION_SECONDS": "6",
            "AGENTRUN_METRICS_PORT": "9100",
        }
    )
    assert s.namespaces == ("a", "b") and s.leader.duration_seconds == 6 and s.metrics_port == 9100
    assert s.leader.namespace == "agentrun-system"
    single = settings.from_env({"AGENTRUN_DSN": "d", "AGENTRUN_WATCH_NAMESPACES": "t1"})
    assert single.leader.namespace == "t1"


def test_postgres_ca_mounted_when_configured() -> None:
    """AGENTRUN_WORKER_CA_SECRET: the Secret of the run's namespace, read-only, and PGSSLROOTCERT at its key
    (last in env, so a spec.worker.env entry of the same name cannot point libpq elsewhere)."""
    spec = model.RunSpec.from_body(
        {"graph": "a.b:g", "worker": {"env": [{"name": "PGSSLROOTCERT", "value": "/tmp/mine"}]}}
    )
    body = pods.manifest(RUN, spec, 1, "first", cfg(AGENTRUN_WORKER_CA_SECRET="pg-ca/ca.crt"))
    (c,) = body["spec"]["containers"]
    assert c["env"][-1] == {"name": "PGSSLROOTCERT", "value": "/etc/agentrun/postgres-ca/ca.crt"}
    assert c["volumeMounts"] == [
        {"name": "postgres-ca", "mountPath": "/etc/agentrun/postgres-ca", "readOnly": True}
    ]
    assert body["spec"]["volumes"] == [
        {
            "name": "postgres-ca",
            "secret": {"secretName": "pg-ca", "items": [{"key": "ca.crt", "path": "ca.crt"}]},
        }
    ]
    plain = pods.manifest(RUN, spec, 1, "first", cfg())
    assert "volumes" not in plain["spec"] and "volumeMounts" not in plain["spec"]["containers"][0]


def test_postgres_ca_setting_is_checked() -> None:
    import pytest

    for bad in ("pg-ca", "pg-ca/", "/ca.crt", "PG_CA/ca.crt"):
        with pytest.raises(settings.SettingsError, match="AGENTRUN_WORKER_CA_SECRET must be secret-name/key"):
            cfg(AGENTRUN_WORKER_CA_SECRET=bad)


def test_a_node_to_avoid_is_a_preference_by_node_name() -> None:
    spec = model.RunSpec.from_body({"graph": "a.b:g", "worker": {"nodeSelector": {"pool": "agents"}}})
    assert "affinity" not in pods.manifest(RUN, spec, 2, "lease_expired", cfg())["spec"]
    body = pods.manifest(RUN, spec, 2, "lease_expired", cfg(), avoid_node="node-a")
    # Preferred, not required: on one node (or a hung worker on a healthy node) it still runs there.
    preferred = body["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert preferred == [
        {
            "weight": 100,
            "preference": {
                "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["node-a"]}]
            },
        }
    ]
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in body["spec"]["affinity"]["nodeAffinity"]
    assert body["spec"]["nodeSelector"] == {"pool": "agents"}  # the run's own placement is kept
