"""The alert rules' one source: ``deploy/alerts/agentrun.rules.yaml``; writes the PrometheusRule copies.

Rule: only the plain rule file (what ``rule_files:`` in prometheus.yml loads, with its comments) is edited
by hand. The Prometheus Operator needs the same groups inline in a PrometheusRule object and kustomize cannot
splice a file into a field, so the two PrometheusRule files are generated from it: ``deploy/alerts`` (no
namespace: applied where the user says) and the ``deploy/monitoring`` component (in the operator's
namespace, next to its ServiceMonitor).

``python -m agentrun_dev.prometheusrule`` rewrites them; tests/unit/test_dashboards.py checks that the
checked-in files are this module's output.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
SOURCE = DEPLOY / "alerts" / "agentrun.rules.yaml"
# Each generated file and the namespace its PrometheusRule names (None: none, kustomize/kubectl decide).
TARGETS: dict[Path, str | None] = {
    DEPLOY / "alerts" / "prometheusrule.yaml": None,
    DEPLOY / "monitoring" / "prometheusrule.yaml": "agentrun-system",
}
LABELS = {
    "app.kubernetes.io/name": "agentrun",
    "app.kubernetes.io/component": "alerts",
    "prometheus": "k8s",  # the labels kube-prometheus' default ruleSelector looks for
    "role": "alert-rules",
}
HEADER = """\
# Generated from deploy/alerts/agentrun.rules.yaml by `python -m agentrun_dev.prometheusrule`; do not edit by
# hand (edit the rule file, then regenerate).
"""


def groups() -> list[dict[str, Any]]:
    """The rule groups of the source file."""
    data = yaml.safe_load(SOURCE.read_text(encoding="utf-8"))
    result: list[dict[str, Any]] = data["groups"]
    return result


def render(namespace: str | None) -> str:
    metadata: dict[str, Any] = {"name": "agentrun", "labels": dict(LABELS)}
    if namespace is not None:
        metadata["namespace"] = namespace
    body = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": metadata,
        "spec": {"groups": groups()},
    }
    return HEADER + yaml.safe_dump(body, sort_keys=False, width=10_000, allow_unicode=True)


def main() -> int:
    for path, namespace in TARGETS.items():
        path.write_text(render(namespace), encoding="utf-8")
        print(f"wrote {path.relative_to(DEPLOY.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
