"""Dashboards and alert rules name only metrics the code exports, and their deploy manifests agree."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import prometheus_client
import pytest
import yaml

from agent_operator.observe import metrics
from agentrun import promql
from agentrun_core.store import metrics_sql
from agentrun_dev import prometheusrule

ROOT = pathlib.Path(__file__).resolve().parents[2]
DASHBOARDS = sorted((ROOT / "deploy" / "dashboards").glob("*.json"))
RULES = ROOT / "deploy" / "alerts" / "agentrun.rules.yaml"


def dashboard_exprs() -> list[tuple[str, str, str]]:
    out = []
    for path in DASHBOARDS:
        board = json.loads(path.read_text())
        for panel in board["panels"]:
            for target in panel.get("targets", []):
                out.append((path.name, panel["title"], target["expr"]))
    return out


def alert_rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def exported() -> set[str]:
    full = metrics_sql.Snapshot(
        runs=[("ns", "running", 1)],
        effects=[("ns", "email", "sent", 1, 0, 1, 0)],
        heartbeat_ages=[("ns", "worker", 1.0)],
        approvals_pending=[("ns", 1, 10.0)],
    )
    reg = prometheus_client.CollectorRegistry()
    reg.register(metrics.LedgerCollector(lambda: full, on_namespaces=lambda _: None))
    return metrics.exported_names(reg) | metrics.exported_names(metrics.REGISTRY)


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('sum by (phase) (agentrun_runs{namespace=~"$namespace"})', {"agentrun_runs"}),
        ('histogram_quantile(0.9, sum by (le) (rate(x_bucket{a="b"}[$__rate_interval])))', {"x_bucket"}),
        ("max by (job, instance) (up) == 0 or absent(foo) unless on (a) bar offset 5m", {"up", "foo", "bar"}),
        ("increase(a_total[15m]) > 1e3", {"a_total"}),
    ],
)
def test_metric_name_extraction(expr: str, names: set[str]) -> None:
    assert promql.metric_names(expr) == names


def test_there_are_dashboards_and_rules() -> None:
    assert {p.name for p in DASHBOARDS} == {"agentrun-overview.json", "agentrun-namespace.json"}
    assert len(dashboard_exprs()) >= 30
    assert {r["alert"] for r in alert_rules()} >= {
        "AgentRunEffectStuckPending",
        "AgentRunHeartbeatStale",
        "AgentRunLeaseTakeoverSpike",
        "AgentRunRunsFailing",
        "AgentRunApprovalNearDeadline",
    }


@pytest.mark.parametrize(("board", "title", "expr"), dashboard_exprs())
def test_dashboard_queries_name_exported_metrics(board: str, title: str, expr: str) -> None:
    names = promql.metric_names(expr)
    assert names, f"{board} / {title}: no metric in {expr!r}"
    unknown = names - exported()
    assert not unknown, f"{board} / {title}: not exported by the code: {sorted(unknown)}"


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda r: r["alert"])
def test_alert_expressions_name_exported_metrics(rule: dict[str, Any]) -> None:
    names = promql.metric_names(rule["expr"])
    assert names
    assert not names - exported(), f"{rule['alert']}: not exported: {sorted(names - exported())}"
    assert rule["labels"]["severity"] in {"info", "warning", "critical"}
    assert rule["annotations"]["summary"] and rule["annotations"]["description"]


def test_a_misspelled_metric_would_be_caught() -> None:
    assert promql.metric_names("sum(agentrun_runz)") - exported() == {"agentrun_runz"}


def test_every_exported_family_is_on_a_dashboard() -> None:
    used = set().union(*(promql.metric_names(e) for _, _, e in dashboard_exprs()))
    families = {f.name for f in metrics.REGISTRY.collect() if f.name.startswith("agentrun_")}
    reg = prometheus_client.CollectorRegistry()
    reg.register(metrics.LedgerCollector(lambda: metrics_sql.Snapshot(), on_namespaces=lambda _: None))
    families |= {f.name for f in reg.collect() if f.name not in {"agentrun_collector_duration_seconds"}}
    shown = {f for f in families if any(u == f or u.startswith(f + "_") for u in used)}
    assert families - shown == set()


def test_dashboards_have_the_namespace_variable_and_unique_panel_ids() -> None:
    for path in DASHBOARDS:
        board = json.loads(path.read_text())
        names = [v["name"] for v in board["templating"]["list"]]
        assert "namespace" in names and "datasource" in names, path.name
        ids = [p["id"] for p in board["panels"]]
        assert len(ids) == len(set(ids)), path.name
        for panel in board["panels"]:
            for target in panel.get("targets", []):
                assert (
                    "$namespace" in target["expr"]
                    or "collector_up" in target["expr"]
                    or "resume_latency" in target["expr"]
                    or "admission_mode" in target["expr"]  # the operator's, not a namespace's
                ), f"{path.name} / {panel['title']} ignores $namespace"
    drill = json.loads((ROOT / "deploy/dashboards/agentrun-namespace.json").read_text())
    assert all('namespace="$namespace"' in t["expr"] for p in drill["panels"] for t in p.get("targets", []))


def test_dashboard_configmap_is_labelled_for_the_grafana_sidecar() -> None:
    kust = yaml.safe_load((ROOT / "deploy/dashboards/kustomization.yaml").read_text())
    assert kust["generatorOptions"]["labels"]["grafana_dashboard"] == "1"
    files = kust["configMapGenerator"][0]["files"]
    assert sorted(files) == sorted(p.name for p in DASHBOARDS)


def test_prometheusrules_are_generated_from_the_plain_rule_file() -> None:
    """One source (agentrun.rules.yaml); the PrometheusRule copies are generated from it."""
    for path, namespace in prometheusrule.TARGETS.items():
        assert path.read_text() == prometheusrule.render(namespace), (
            f"{path.relative_to(ROOT)} is stale: run `python -m agentrun_dev.prometheusrule`"
        )
    assert prometheusrule.SOURCE == RULES
    cr = yaml.safe_load((ROOT / "deploy/alerts/prometheusrule.yaml").read_text())
    assert cr["apiVersion"] == "monitoring.coreos.com/v1" and cr["kind"] == "PrometheusRule"
    assert cr["spec"] == yaml.safe_load(RULES.read_text())
    kust = yaml.safe_load((ROOT / "deploy/alerts/kustomization.yaml").read_text())
    assert kust["resources"] == ["prometheusrule.yaml"]


def test_monitoring_component_scrapes_the_operator_service_and_ships_the_rules() -> None:
    mon = ROOT / "deploy/monitoring"
    kust = yaml.safe_load((mon / "kustomization.yaml").read_text())
    assert kust["kind"] == "Component"
    cr = yaml.safe_load((mon / "prometheusrule.yaml").read_text())
    assert cr["spec"] == yaml.safe_load(RULES.read_text())
    sm = yaml.safe_load((mon / "servicemonitor.yaml").read_text())
    service = yaml.safe_load((ROOT / "deploy/base/service.yaml").read_text())
    assert sm["metadata"]["namespace"] == service["metadata"]["namespace"]
    assert sm["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert sm["spec"]["endpoints"][0]["port"] in {p["name"] for p in service["spec"]["ports"]}
