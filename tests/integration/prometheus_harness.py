"""A real Prometheus for the dashboard and alert tests: started on a free port scraping given targets every
second, queried through its HTTP API; and what the shipped dashboards and alert rules say (panel queries as
Grafana sends them, the rules with ``for: 0s``)."""

from __future__ import annotations

import contextlib
import json
import math
import pathlib
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import yaml

from tests.support.sockets import free_port
from tests.support.waiting import wait_for

ROOT = pathlib.Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "alerts" / "agentrun.rules.yaml"
DASHBOARDS = sorted((ROOT / "deploy" / "dashboards").glob("*.json"))
RATE_INTERVAL = "15s"  # what Grafana's $__rate_interval becomes at a 1 s scrape interval over a short run

# --- a real Prometheus -----------------------------------------------------------------------------

PROMETHEUS = shutil.which("prometheus")


class Prometheus:
    def __init__(self, url: str, proc: subprocess.Popen[bytes], log: pathlib.Path) -> None:
        self.url = url
        self.proc = proc
        self.log = log

    def api(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as resp:
                body = json.load(resp)
        except urllib.error.HTTPError as exc:  # a bad query: show Prometheus's own message
            raise AssertionError(f"{path} {params}: HTTP {exc.code}: {exc.read().decode()}") from exc
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.api("query", query=expr)["result"]
        return result

    def query_range(self, expr: str, start: float, end: float, step: float = 1.0) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.api(
            "query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}", step=str(step)
        )["result"]
        return result

    def targets_up(self) -> dict[str, str]:
        data = self.api("targets")
        return {t["labels"]["job"]: t["health"] for t in data["activeTargets"]}

    def firing(self) -> dict[str, list[dict[str, str]]]:
        out: dict[str, list[dict[str, str]]] = {}
        for alert in self.api("alerts")["alerts"]:
            if alert["state"] == "firing":
                out.setdefault(alert["labels"]["alertname"], []).append(alert["labels"])
        return out

    def wait_scraped(self, jobs: list[str], timeout: float = 20.0) -> None:
        wait_for(
            lambda: all(self.targets_up().get(j) == "up" for j in jobs),
            timeout,
            f"targets {jobs} up",
            interval=0.25,
            on_timeout=lambda: f"targets: {self.targets_up()}",
        )


def finite_values(result: list[dict[str, Any]]) -> list[float]:
    values = [
        float(v) for series in result for _, v in series.get("values", [series.get("value", [0, "NaN"])])
    ]
    return [v for v in values if not math.isnan(v) and not math.isinf(v)]


@contextlib.contextmanager
def running(
    tmp: pathlib.Path, targets: dict[str, str], rule_files: list[pathlib.Path]
) -> Iterator[Prometheus]:
    """Start Prometheus scraping ``targets`` (job -> host:port) every second; stop it afterwards."""
    assert PROMETHEUS is not None
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "900ms", "evaluation_interval": "1s"},
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": [addr]}]} for job, addr in targets.items()
        ],
    }
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = tmp / "prometheus.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={tmp / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--storage.tsdb.retention.time=1h",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    prom = Prometheus(f"http://127.0.0.1:{port}", proc, log)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{prom.url}/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"prometheus did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        yield prom
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# --- what the dashboards and alerts say ------------------------------------------------------------------


def panel_queries() -> list[tuple[str, str, str]]:
    out = []
    for path in DASHBOARDS:
        for panel in json.loads(path.read_text())["panels"]:
            for target in panel.get("targets", []):
                out.append((path.stem, panel["title"], target["expr"]))
    return out


def grafana_expr(expr: str, namespace: str) -> str:
    """What Grafana sends for one selected namespace."""
    return expr.replace("$__rate_interval", RATE_INTERVAL).replace("$namespace", namespace)


def fast_rules(tmp: pathlib.Path) -> pathlib.Path:
    """The shipped rules with `for:` set to 0s, so staged conditions fire within a few evaluations."""
    doc = yaml.safe_load(RULES.read_text())
    for group in doc["groups"]:
        group["interval"] = "1s"
        for rule in group["rules"]:
            rule["for"] = "0s"
    path = tmp / "agentrun.fast.rules.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path
