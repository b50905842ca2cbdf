"""The CRD and the operator's spec model come from one field table (agentrun_core.api.spec_schema).

The checked-in CRD must be crdgen's rendering of it, and ``RunSpec.from_body`` must read every field the way
the API server admits it: its defaults, enums, bounds and required fields are the table's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from agent_operator.decide import model, notify
from agentrun_core.api import crdgen, protocol, spec_schema
from agentrun_core.store import rows

GRAPH = "pkg.mod:graph"


def _notify(spec: model.RunSpec) -> notify.NotifySpec:
    found = notify.NotifySpec.from_spec(spec.notify)
    assert found is not None
    return found


# Spec field (dotted path) -> how the operator reads it. Every field with a default, an enum or numeric
# bounds must have a reader here (test_every_checked_field_has_a_reader), so a new one cannot be missed.
READERS: dict[str, Callable[[model.RunSpec], Any]] = {
    "graph": lambda s: s.graph,
    "durability": lambda s: s.durability,
    "lease.durationSeconds": lambda s: s.lease_duration_seconds,
    "retry.maxAttempts": lambda s: s.retry.max_attempts,
    "retry.backoffSeconds": lambda s: s.retry.backoff_seconds,
    "retry.maxBackoffSeconds": lambda s: s.retry.max_backoff_seconds,
    "approval.timeoutSeconds": lambda s: s.approval.timeout_seconds,
    "approval.onTimeout": lambda s: s.approval.on_timeout,
    "approval.allowSelfApproval": lambda s: s.approval.allow_self_approval,
    "approval.notify.format": lambda s: _notify(s).format,
    "approval.notify.tokenSecretRef.key": lambda s: _notify(s).secret_key,
    "ttlSecondsAfterFinished": lambda s: s.ttl_seconds_after_finished,
    "activeDeadlineSeconds": lambda s: s.active_deadline_seconds,
    "progressDeadlineSeconds": lambda s: s.progress_deadline_seconds,
    "cancel": lambda s: s.cancel,
    "suspend": lambda s: s.suspend,
    "retryGeneration": lambda s: s.retry_generation,
    "concurrency.limit": lambda s: s.concurrency.limit if s.concurrency is not None else None,
    "budget.inputTokens": lambda s: s.budget.get("inputTokens"),
    "budget.outputTokens": lambda s: s.budget.get("outputTokens"),
    "budget.totalTokens": lambda s: s.budget.get("totalTokens"),
}
# What an object needs to exist at all (its required fields), so a field under it can be read.
REQUIRED_PARENTS: dict[str, dict[str, Any]] = {
    "approval.notify": {"url": "https://hooks.example/approvals"},
    "approval.notify.tokenSecretRef": {"name": "hook-token"},
}


def spec_with(path: str, value: Any = None, *, leaf: bool = True) -> dict[str, Any]:
    """A minimal valid spec; with ``path`` set to ``value`` (``leaf``), or only its parents present."""
    spec: dict[str, Any] = {"graph": GRAPH}
    node, names = spec, path.split(".")
    for depth, name in enumerate(names[:-1]):
        here = ".".join(names[: depth + 1])
        node = node.setdefault(name, dict(REQUIRED_PARENTS.get(here, {})))
    if leaf:
        node[names[-1]] = value
    return spec


def checked() -> list[tuple[str, dict[str, Any]]]:
    return [
        (path, node)
        for path, node in spec_schema.walk()
        if {"default", "enum", "minimum", "maximum"} & node.keys()
    ]


def test_checked_in_crd_is_the_rendering() -> None:
    assert crdgen.PATH.read_text() == crdgen.render(), "run: python -m agentrun_core.api.crdgen > crds/..."
    assert crdgen.main(["--check"]) == 0


def test_rendering_is_the_spec_table() -> None:
    doc = yaml.safe_load(crdgen.PATH.read_text())
    root = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert root["properties"]["spec"] == spec_schema.SPEC
    assert root["required"] == ["spec"]


def test_schema_is_structural() -> None:
    """The API server refuses a CRD whose nodes lack a type (unless they keep unknown fields as given)."""

    def nodes(node: dict[str, Any], path: str) -> list[tuple[str, dict[str, Any]]]:
        found = [(path, node)]
        for name, child in (node.get("properties") or {}).items():
            found += nodes(child, f"{path}.{name}")
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                found += nodes(node[key], f"{path}[{key}]")
        return found

    root = crdgen.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in nodes(root, ""):
        assert (
            "type" in node
            or node.get("x-kubernetes-preserve-unknown-fields")
            or node.get("x-kubernetes-int-or-string")
        ), path


def test_every_checked_field_has_a_reader() -> None:
    unread = {path for path, _ in checked()} - set(READERS)
    assert not unread, f"spec fields with a default/enum/bounds the test does not read: {sorted(unread)}"


@pytest.mark.parametrize("path", [p for p, n in checked() if "default" in n])
def test_defaults_are_the_crds(path: str) -> None:
    """Absent field, absent parent object: the model assumes what the API server would have defaulted."""
    want = spec_schema.default(path)
    assert READERS[path](model.RunSpec.from_body(spec_with(path, leaf=False))) == want
    if "." in path and path.rsplit(".", 1)[0] not in REQUIRED_PARENTS:
        assert READERS[path](model.RunSpec.from_body({"graph": GRAPH})) == want
    assert READERS[path](model.RunSpec.from_body(spec_with(path, want))) == want


@pytest.mark.parametrize("path", [p for p, n in checked() if "enum" in n])
def test_enum_values_parse_as_given(path: str) -> None:
    for value in spec_schema.enum(path):
        assert READERS[path](model.RunSpec.from_body(spec_with(path, value))) == value


@pytest.mark.parametrize("path", [p for p, n in checked() if {"minimum", "maximum"} & n.keys()])
def test_bounds_parse_as_given(path: str) -> None:
    node = spec_schema.field(path)
    for bound in ("minimum", "maximum"):
        if bound in node:
            assert READERS[path](model.RunSpec.from_body(spec_with(path, node[bound]))) == node[bound]


def test_required_fields() -> None:
    assert spec_schema.SPEC["required"] == ["graph"]
    graph = {f.name: f for f in dataclasses.fields(model.RunSpec)}["graph"]
    assert graph.default is dataclasses.MISSING  # the model has no default for a required field either
    assert spec_schema.field("approval.notify")["required"] == ["url"]
    assert notify.NotifySpec.from_spec({"format": "json"}) is None
    assert spec_schema.field("forkOf")["required"] == ["run"]
    assert model.ForkRequest.from_json({"step": "draft"}) is None


def test_enums_are_the_protocols() -> None:
    assert spec_schema.enum("durability") == protocol.DURABILITIES == rows.DURABILITIES
    assert spec_schema.enum("approval.onTimeout") == spec_schema.ON_TIMEOUT
    assert spec_schema.enum("approval.notify.format") == spec_schema.NOTIFY_FORMATS


def test_statuses_have_one_definition() -> None:
    assert rows.RUN_STATUSES is protocol.RUN_STATUSES
    assert rows.FINAL_RUN_STATUSES is protocol.FINAL_RUN_STATUSES
    assert frozenset(protocol.FINAL_RUN_STATUSES) == model.DB_FINAL
    assert set(protocol.FINAL_RUN_STATUSES) <= set(protocol.RUN_STATUSES)
    assert ("pending", *protocol.DECISIONS) == protocol.APPROVAL_STATUSES
