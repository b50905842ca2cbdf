"""The alert rules through Debian's promtool: syntax (`check rules`) and behaviour (`test rules`: each alert
fires on staged series and stays quiet on healthy ones)."""

from __future__ import annotations

import pathlib
import shutil
import subprocess

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "alerts" / "agentrun.rules.yaml"
PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed: run scripts/ensure-prometheus"
)


def promtool(*args: str, cwd: pathlib.Path | None = None) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=60, cwd=cwd)


def test_promtool_check_rules() -> None:
    result = promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 9 rules found" in result.stdout


def test_promtool_check_rules_of_the_prometheusrule_spec(tmp_path: pathlib.Path) -> None:
    spec = yaml.safe_load((ROOT / "deploy/alerts/prometheusrule.yaml").read_text())["spec"]
    (tmp_path / "cr.rules.yaml").write_text(yaml.safe_dump(spec))
    result = promtool("check", "rules", str(tmp_path / "cr.rules.yaml"))
    assert result.returncode == 0, result.stdout + result.stderr


SEVERITY = {
    r["alert"]: r["labels"]["severity"]
    for g in yaml.safe_load(RULES.read_text())["groups"]
    for r in g["rules"]
}


def _alert(name: str, at: str, labels: dict[str, str] | None = None) -> dict[str, object]:
    """Expect exactly one `name` alert firing at `at` with these labels, or none when labels is None."""
    if labels is None:
        return {"eval_time": at, "alertname": name, "exp_alerts": []}
    return {
        "eval_time": at,
        "alertname": name,
        "exp_alerts": [{"exp_labels": {**labels, "severity": SEVERITY[name]}}],
    }


def test_each_alert_fires_on_staged_series_and_not_on_healthy_ones(tmp_path: pathlib.Path) -> None:
    ns = {"namespace": "team-a"}
    series = [
        # stuck: the oldest pending effect ages one second per second from 0 to 20 minutes
        {"series": 'agentrun_effect_oldest_pending_age_seconds{namespace="team-a"}', "values": "0+60x20"},
        {"series": 'agentrun_effect_oldest_pending_age_seconds{namespace="ok"}', "values": "0x20"},
        {"series": 'agentrun_effects_needs_human{namespace="team-a",tool="email"}', "values": "0 0 1x18"},
        {"series": 'agentrun_heartbeat_oldest_age_seconds{namespace="team-a"}', "values": "2 2 2 90x17"},
        {"series": 'agentrun_heartbeat_oldest_age_seconds{namespace="ok"}', "values": "5x20"},
        {"series": 'agentrun_lease_takeovers_total{namespace="team-a"}', "values": "0 0 2 4 6 8x15"},
        {"series": 'agentrun_lease_takeovers_total{namespace="ok"}', "values": "0 0 1x18"},
        {"series": 'agentrun_lease_renew_failures_total{namespace="team-a"}', "values": "0 0 1x18"},
        {"series": 'agentrun_runs{namespace="team-a",phase="Failed"}', "values": "0 0 0 1 2x16"},
        {"series": 'agentrun_runs{namespace="ok",phase="Failed"}', "values": "3x20"},
        {
            "series": 'agentrun_approval_deadline_remaining_seconds{namespace="team-a"}',
            "values": "7200-300x20",
        },
        # waiting since 10 minutes before the test window: over 1800 s from minute 20 on (none in "ok")
        {"series": 'agentrun_approval_oldest_pending_age_seconds{namespace="team-a"}', "values": "600+60x25"},
        {"series": 'agentrun_approval_oldest_pending_age_seconds{namespace="ok"}', "values": "60x25"},
        {"series": 'agentrun_collector_up{job="agentrun-operator",instance="op:8080"}', "values": "1 1 0x18"},
    ]
    tests = [
        _alert("AgentRunEffectStuckPending", "8m"),  # 480 s old: not yet stuck
        _alert("AgentRunEffectStuckPending", "18m", ns),  # > 600 s since 11m, for 5m
        _alert("AgentRunEffectNeedsHuman", "5m", ns),
        _alert("AgentRunHeartbeatStale", "1m"),
        _alert("AgentRunHeartbeatStale", "6m", ns),
        _alert("AgentRunLeaseTakeoverSpike", "5m", ns),  # the "ok" namespace had one takeover only
        _alert("AgentRunLeaseRenewFailures", "8m", ns),
        _alert("AgentRunRunsFailing", "1m"),
        _alert("AgentRunRunsFailing", "5m", ns),
        _alert("AgentRunApprovalNearDeadline", "5m"),  # 5700 s left
        _alert("AgentRunApprovalNearDeadline", "15m", ns),  # 2700 s left
        _alert("AgentRunApprovalPending", "19m"),  # 1740 s: not yet
        _alert("AgentRunApprovalPending", "22m", ns),  # 1920 s
        _alert("AgentRunCollectorDown", "1m"),
        _alert("AgentRunCollectorDown", "6m", {"job": "agentrun-operator", "instance": "op:8080"}),
    ]
    # promtool compares rendered annotations too; they are checked by `check rules`, so the copy under test
    # drops them and keeps exprs, durations and labels exactly as shipped.
    rules = yaml.safe_load(RULES.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules))
    doc = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": tests}],
    }
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    result = promtool("test", "rules", "test.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
