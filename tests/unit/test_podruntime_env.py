"""Env resolution of the local pod runtime (kubelet semantics), over plain dicts."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from agentrun_dev.podruntime import envresolve

POD: dict[str, Any] = {
    "metadata": {
        "name": "w-1",
        "namespace": "ns1",
        "uid": "u-1",
        "labels": {"app": "a"},
        "annotations": {"note": "hi"},
    },
    "spec": {"nodeName": "agentrun-dev-node", "serviceAccountName": "worker"},
    "status": {"podIP": "127.0.0.1", "hostIP": "127.0.0.1"},
}
SECRETS = {"db": {"dsn": "postgres://x", "pw": "s3cret"}}
CMS = {"cfg": {"MODE": "fast", "bad key": "skipped", "LEVEL": "3"}}
LOOKUP = envresolve.Lookup(secret=SECRETS.get, config_map=CMS.get)


def resolve(container: dict[str, Any]) -> dict[str, str]:
    return envresolve.resolve(POD, container, LOOKUP, {"cpu": "2", "memory": "1Gi"})


# (variable, the Pod's field, its value for POD): the kubelet's downward API fields the runtime serves
DOWNWARD = [
    ("POD", "metadata.name", "w-1"),
    ("NS", "metadata.namespace", "ns1"),
    ("UID", "metadata.uid", "u-1"),
    ("APP", "metadata.labels['app']", "a"),
    ("NOTE", "metadata.annotations['note']", "hi"),
    ("NODE", "spec.nodeName", "agentrun-dev-node"),
    ("SA", "spec.serviceAccountName", "worker"),
    ("IP", "status.podIP", "127.0.0.1"),
]


def test_values_refs_and_downward_api() -> None:
    fields = [{"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}} for name, path, _ in DOWNWARD]
    env = resolve(
        {
            "env": [
                {"name": "A", "value": "1"},
                {"name": "B", "value": "$(A)-$$(A)-$(NOPE)"},
                {"name": "DSN", "valueFrom": {"secretKeyRef": {"name": "db", "key": "dsn"}}},
                {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "MODE"}}},
                *fields,
            ]
        }
    )
    assert env == {
        "A": "1",
        "B": "1-$(A)-$(NOPE)",
        "DSN": "postgres://x",
        "MODE": "fast",
        **{name: value for name, _, value in DOWNWARD},
    }


def test_env_from_prefix_skips_invalid_names_and_env_wins() -> None:
    env = resolve(
        {
            "envFrom": [{"configMapRef": {"name": "cfg"}, "prefix": "C_"}, {"secretRef": {"name": "db"}}],
            "env": [{"name": "C_MODE", "value": "slow"}],
        }
    )
    assert env == {"C_MODE": "slow", "C_LEVEL": "3", "dsn": "postgres://x", "pw": "s3cret"}


@pytest.mark.parametrize(
    ("var", "message"),
    [
        ({"secretKeyRef": {"name": "missing", "key": "k"}}, 'secret "missing" not found'),
        ({"secretKeyRef": {"name": "db", "key": "nokey"}}, "couldn't find key nokey in Secret ns1/db"),
        ({"configMapKeyRef": {"name": "missing", "key": "k"}}, 'configmap "missing" not found'),
        ({"fieldRef": {"fieldPath": "spec.bogus"}}, "unsupported fieldRef"),
    ],
)
def test_missing_required_is_a_config_error(var: dict[str, Any], message: str) -> None:
    with pytest.raises(envresolve.ConfigError, match=message):
        resolve({"env": [{"name": "X", "valueFrom": var}]})
    with pytest.raises(envresolve.ConfigError, match="not found"):
        resolve({"envFrom": [{"secretRef": {"name": "missing"}}]})


def test_optional_missing_is_skipped() -> None:
    env = resolve(
        {
            "envFrom": [{"configMapRef": {"name": "missing", "optional": True}}],
            "env": [
                {
                    "name": "X",
                    "valueFrom": {"secretKeyRef": {"name": "missing", "key": "k", "optional": True}},
                },
                {
                    "name": "Y",
                    "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "no", "optional": True}},
                },
            ],
        }
    )
    assert env == {}


def test_resource_field_ref_with_divisor_and_node_fallback() -> None:
    c = {
        "resources": {"limits": {"memory": "64Mi", "cpu": "500m"}},
        "env": [
            {
                "name": "MEM",
                "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}},
            },
            {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
            {"name": "MCPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "1m"}}},
        ],
    }
    assert resolve(c) == {"MEM": "64", "CPU": "1", "MCPU": "500"}
    no_limits = {"env": [{"name": "M", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory"}}}]}
    assert resolve(no_limits) == {"M": str(1024**3)}


def test_argv_expands_and_requires_a_command() -> None:
    assert envresolve.argv(
        {"command": ["echo", "$(A)"], "args": ["$(B)", "$$(A)"]}, {"A": "x", "B": "y"}
    ) == ["echo", "x", "y", "$(A)"]
    assert envresolve.argv({"args": ["python", "-V"]}, {}) == ["python", "-V"]
    with pytest.raises(envresolve.ConfigError, match="no command"):
        envresolve.argv({"image": "busybox"}, {})


def test_secret_data_is_base64_decoded() -> None:
    raw = {"data": {"k": base64.b64encode(b"v\xff").decode()}}
    assert envresolve.decode_secret_data(raw) == {"k": "v\udcff"}
