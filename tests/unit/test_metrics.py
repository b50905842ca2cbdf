"""Metric families built from plain rows, and the in-process recording functions."""

from __future__ import annotations

import prometheus_client
import pytest

from agent_operator.observe import metric_families, metrics
from agentrun_core.store import metrics_sql


def _registry(
    snap: metrics_sql.Snapshot | None = None, fail: bool = False
) -> prometheus_client.CollectorRegistry:
    def fetch() -> metrics_sql.Snapshot:
        if fail:
            raise OSError("connection refused")
        assert snap is not None
        return snap

    reg = prometheus_client.CollectorRegistry()
    reg.register(metrics.LedgerCollector(fetch))
    return reg


def _sample(reg: prometheus_client.CollectorRegistry, name: str, **labels: str) -> float | None:
    value: float | None = reg.get_sample_value(name, labels)
    return value


def _snapshot() -> metrics_sql.Snapshot:
    return metrics_sql.Snapshot(
        runs=[("ns-a", "running", 2), ("ns-a", "parked", 1), ("ns-b", "failed", 3), ("ns-b", "weird", 1)],
        effects=[
            ("ns-a", "email", "pending", 1, 1, 1, 0),
            ("ns-a", "email", "sent", 4, 0, 5, 2),
            ("ns-a", "http", "confirmed", 2, 0, 2, 1),
        ],
        oldest_pending_effect={"ns-a": 42.5},
        heartbeat_ages=[("ns-a", "worker", 2.0), ("ns-a", "worker", 40.0), ("ns-a", "tool", 7.0)],
        approvals_pending=[("ns-a", 1, 3600.0)],
        approvals_decided=[("ns-a", "approved", 2), ("ns-b", "expired", 1)],
        deadline_outcomes=[("ns-b", "cancel", 1)],
        attempts_ended=[
            ("ns-a", "drained", "run", 1),
            ("ns-a", "lost", "run", 2),
            ("ns-a", "lost", "control_plane", 3),
        ],
        approval_wait={"ns-a": metric_families.bucketize([5.0, 120.0], metrics_sql.APPROVAL_WAIT_BUCKETS)},
        step_duration={"ns-a": metric_families.bucketize([0.02, 0.3, 3.0], metrics_sql.STEP_BUCKETS)},
        checkpoint_duration={"ns-a": metric_families.bucketize([0.004], metrics_sql.CHECKPOINT_BUCKETS)},
        effect_divergences=[("ns-a", "email", 2, 5)],
    )


def test_runs_by_phase_with_zeros_for_every_phase() -> None:
    reg = _registry(_snapshot())
    assert _sample(reg, "agentrun_runs", namespace="ns-a", phase="Running") == 2
    assert _sample(reg, "agentrun_runs", namespace="ns-a", phase="WaitingApproval") == 1
    assert _sample(reg, "agentrun_runs", namespace="ns-a", phase="Failed") == 0
    assert _sample(reg, "agentrun_runs", namespace="ns-b", phase="Failed") == 3
    assert _sample(reg, "agentrun_runs", namespace="ns-b", phase="Unknown") == 1
    assert _sample(reg, "agentrun_collector_up") == 1


def test_effects_by_tool_and_status() -> None:
    reg = _registry(_snapshot())
    assert _sample(reg, "agentrun_effects", namespace="ns-a", tool="email", status="sent") == 4
    assert _sample(reg, "agentrun_effects", namespace="ns-a", tool="email", status="confirmed") == 0
    assert _sample(reg, "agentrun_effects_needs_human", namespace="ns-a", tool="email") == 1
    assert _sample(reg, "agentrun_effect_provider_calls_total", namespace="ns-a", tool="email") == 6
    assert _sample(reg, "agentrun_effect_duplicates_prevented_total", namespace="ns-a", tool="email") == 2
    assert _sample(reg, "agentrun_effect_oldest_pending_age_seconds", namespace="ns-a") == 42.5
    assert _sample(reg, "agentrun_effects_divergent", namespace="ns-a", tool="email") == 2
    assert _sample(reg, "agentrun_effect_divergences_total", namespace="ns-a", tool="email") == 5
    assert _sample(reg, "agentrun_effects_divergent", namespace="ns-a", tool="http") == 0  # zero, not absent
    assert _sample(reg, "agentrun_effect_oldest_pending_age_seconds", namespace="ns-b") == 0


def test_heartbeat_distribution_and_stalest() -> None:
    reg = _registry(_snapshot())
    assert (
        _sample(reg, "agentrun_heartbeat_age_seconds_bucket", namespace="ns-a", kind="worker", le="5.0") == 1
    )
    assert (
        _sample(reg, "agentrun_heartbeat_age_seconds_bucket", namespace="ns-a", kind="worker", le="60.0") == 2
    )
    assert _sample(reg, "agentrun_heartbeat_age_seconds_gcount", namespace="ns-a", kind="worker") == 2
    assert _sample(reg, "agentrun_heartbeat_oldest_age_seconds", namespace="ns-a") == 40.0
    assert _sample(reg, "agentrun_heartbeat_oldest_age_seconds", namespace="ns-b") == 0


def test_approvals() -> None:
    reg = _registry(_snapshot())
    assert _sample(reg, "agentrun_approvals_pending", namespace="ns-a") == 1
    assert _sample(reg, "agentrun_approvals_pending", namespace="ns-b") == 0
    assert _sample(reg, "agentrun_approval_deadline_remaining_seconds", namespace="ns-a") == 3600
    assert _sample(reg, "agentrun_approval_deadline_remaining_seconds", namespace="ns-b") is None
    assert _sample(reg, "agentrun_approvals_decided_total", namespace="ns-a", decision="approved") == 2
    assert _sample(reg, "agentrun_approvals_decided_total", namespace="ns-a", decision="rejected") == 0
    assert _sample(reg, "agentrun_approval_deadline_outcomes_total", namespace="ns-b", action="cancel") == 1
    assert _sample(reg, "agentrun_approval_wait_seconds_bucket", namespace="ns-a", le="10.0") == 1
    assert _sample(reg, "agentrun_approval_wait_seconds_bucket", namespace="ns-a", le="+Inf") == 2
    assert _sample(reg, "agentrun_approval_wait_seconds_sum", namespace="ns-a") == 125


def test_step_and_checkpoint_histograms() -> None:
    reg = _registry(_snapshot())
    assert _sample(reg, "agentrun_step_duration_seconds_bucket", namespace="ns-a", le="0.5") == 2
    assert _sample(reg, "agentrun_step_duration_seconds_count", namespace="ns-a") == 3
    assert (
        _sample(reg, "agentrun_checkpoint_write_duration_seconds_bucket", namespace="ns-a", le="0.005") == 1
    )
    assert _sample(reg, "agentrun_attempts_ended_total", namespace="ns-a", outcome="lost", cause="run") == 2
    ended = {"namespace": "ns-a", "outcome": "lost", "cause": "control_plane"}
    assert _sample(reg, "agentrun_attempts_ended_total", **ended) == 3
    assert _sample(reg, "agentrun_attempts_ended_total", **{**ended, "outcome": "fenced"}) == 0


def test_postgres_down_still_scrapes_with_collector_up_zero() -> None:
    reg = _registry(fail=True)
    text = prometheus_client.generate_latest(reg).decode()
    assert "agentrun_collector_up 0.0" in text
    assert "agentrun_runs" not in text


def test_exposition_parses_as_prometheus_text() -> None:
    from prometheus_client import parser

    text = prometheus_client.generate_latest(_registry(_snapshot())).decode()
    names = {fam.name for fam in parser.text_string_to_metric_families(text)}
    assert {"agentrun_runs", "agentrun_heartbeat_age_seconds", "agentrun_step_duration_seconds"} <= names


def test_bucketize_is_cumulative() -> None:
    h = metric_families.bucketize([0.5, 1.0, 1.5, 10.0], (1.0, 2.0))
    assert list(h.counts) == [2, 3]
    assert h.count == 4
    assert h.total == 13.0


@pytest.mark.parametrize(
    ("given", "label"),
    [
        ("evicted", "evicted"),
        ("OOMKilled", "OOMKilled"),
        ("oomkilled", "OOMKilled"),
        ("lease-expired", "lease_expired"),
        ("Evicted", "evicted"),
        ("run-1234", "other"),
        ("", "other"),
    ],
)
def test_attempt_reasons_are_a_closed_set(given: str, label: str) -> None:
    assert metrics.normalize_reason(given) == label


def test_recording_functions_count_in_the_operator_registry() -> None:
    reg = metrics.REGISTRY

    def value(name: str, **labels: str) -> float:
        return reg.get_sample_value(name, labels) or 0.0

    before = value("agentrun_attempts_started_total", namespace="unit-ns", reason="evicted")
    metrics.attempt_started("Evicted", "unit-ns")
    assert value("agentrun_attempts_started_total", namespace="unit-ns", reason="evicted") == before + 1

    takeovers = value("agentrun_lease_takeovers_total", namespace="unit-ns")
    metrics.lease_takeover("unit-ns")
    assert value("agentrun_lease_takeovers_total", namespace="unit-ns") == takeovers + 1

    failures = value("agentrun_lease_renew_failures_total", namespace="unit-ns")
    metrics.lease_renew_failure("unit-ns")
    assert value("agentrun_lease_renew_failures_total", namespace="unit-ns") == failures + 1

    n = value("agentrun_resume_latency_seconds_count", reason="evicted")
    metrics.resume_latency(1.5, "evicted")
    assert value("agentrun_resume_latency_seconds_count", reason="evicted") == n + 1
    assert value("agentrun_resume_latency_seconds_bucket", reason="evicted", le="2.0") >= 1


def test_exported_names_cover_unobserved_labelled_metrics() -> None:
    reg = prometheus_client.CollectorRegistry()
    reg.register(metrics.LedgerCollector(lambda: metrics_sql.Snapshot()))
    names = metrics.exported_names(reg) | metrics.exported_names(metrics.REGISTRY)
    for name in (
        "agentrun_attempts_started_total",
        "agentrun_resume_latency_seconds_bucket",
        "agentrun_runs",
        "agentrun_approval_wait_seconds_bucket",
        "agentrun_collector_up",
        "agentrun_heartbeat_age_seconds_bucket",
    ):
        assert name in names


def test_a_standby_replica_exports_no_ledger_figures() -> None:
    leading = [False]
    reg = prometheus_client.CollectorRegistry()
    reg.register(metrics.LedgerCollector(_snapshot, on_namespaces=lambda _: None, active=lambda: leading[0]))
    assert reg.get_sample_value("agentrun_collector_up") is None
    assert reg.get_sample_value("agentrun_runs", {"namespace": "ns-a", "phase": "Running"}) is None
    leading[0] = True
    assert reg.get_sample_value("agentrun_collector_up") == 1
    assert reg.get_sample_value("agentrun_runs", {"namespace": "ns-a", "phase": "Running"}) == 2
