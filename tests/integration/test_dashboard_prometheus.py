"""Dashboards and alerts proven on a real Prometheus (Debian's package).

Prometheus scrapes the operator's /metrics every second while a run goes through an eviction and an
approval; then every panel query of both dashboards is evaluated over the run's window through the HTTP API
and must return finite data, and every alert, staged in Postgres and in the operator's counters, must fire.
A query naming a metric the code does not export returns nothing and fails the test.
"""

from __future__ import annotations

import pathlib
import shutil
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import yaml

from agent_operator.observe import metrics
from tests.integration.prometheus_harness import (
    RULES,
    Prometheus,
    fast_rules,
    finite_values,
    grafana_expr,
    panel_queries,
    running,
)
from tests.support.sockets import free_port
from tests.support.waiting import wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("prometheus") is None, reason="prometheus not installed: run scripts/ensure-prometheus"
    ),
]

# --- driving a run through the ledger (until the operator fixture drives a real one) ------------------


class Ledger:
    """Writes the rows worker and operator write, in the schema's own tables."""

    def __init__(self, conn: psycopg.Connection[Any], namespace: str) -> None:
        self.conn, self.ns = conn, namespace

    def sql(self, query: str, *params: object) -> None:
        self.conn.execute(query, params)  # type: ignore[arg-type]
        self.conn.commit()

    def admit(self, run_id: str, status: str = "admitted") -> None:
        self.sql(
            "INSERT INTO agentrun_runs (run_id, namespace, name, graph, input, spec_hash, status)"
            " VALUES (%s, %s, %s, 'agentrun_examples.support_ticket:graph', '{}', 'h', %s)",
            run_id,
            self.ns,
            f"run-{run_id}",
            status,
        )

    def status(self, run_id: str, status: str) -> None:
        self.sql("UPDATE agentrun_runs SET status = %s, updated_at = now() WHERE run_id = %s", status, run_id)

    def attempt(self, run_id: str, attempt: int, reason: str) -> None:
        """Attempt ``attempt`` starts (epoch = attempt), in Pod ``run-<run_id>-<attempt>``; the operator
        counts it."""
        metrics.attempt_started(reason, self.ns)
        pod = f"run-{run_id}-{attempt}"
        self.sql(
            "INSERT INTO agentrun_attempts (run_id, attempt, pod, epoch, start_reason)"
            " VALUES (%s, %s, %s, %s, %s)",
            *(run_id, attempt, pod, attempt, reason),
        )

    def step(
        self, run_id: str, attempt: int, step: str, checkpoint: str, seconds: float, saving: float
    ) -> None:
        """A step of ``seconds`` ended, its checkpoint saved in ``saving`` seconds."""
        self.sql(
            "INSERT INTO agentrun_step_events (run_id, attempt, step, checkpoint_id, started_at,"
            " duration_seconds, checkpoint_seconds) VALUES (%s, %s, %s, %s, now(), %s, %s)",
            *(run_id, attempt, step, checkpoint, seconds, saving),
        )

    def beat(self, run_id: str) -> None:
        self.sql("UPDATE agentrun_heartbeats SET beat_at = now() WHERE run_id = %s", run_id)


def drive_run(ledger: Ledger, hold: float = 2.0) -> None:
    """One run: attempt 1 runs two steps and sends an email, is evicted; attempt 2 resumes, parks on an
    approval, is approved; attempt 3 finishes. Each state is held for a few scrapes."""
    run = "e2e-1"
    ledger.admit(run)
    metrics.admission_mode("mutating")  # as the operator reports the shipped policies it found
    time.sleep(hold)  # the namespace's zero series exist before the first event
    ledger.attempt(run, 1, "first")
    ledger.status(run, "running")
    ledger.sql("INSERT INTO agentrun_heartbeats (run_id, key) VALUES (%s, 'worker')", run)
    ledger.step(run, 1, "classify", "c1", 0.4, 0.006)
    ledger.sql(
        "INSERT INTO agentrun_effects (idempotency_key, run_id, step, action, tool, args_hash, args,"
        " epoch, attempts) VALUES ('k-email', %s, 'reply', 'send_email', 'email', 'a1', '{}', 1, 1)",
        run,
    )
    time.sleep(hold)
    ledger.sql(
        "UPDATE agentrun_effects SET status = 'sent', sent_at = now() WHERE idempotency_key = 'k-email'"
    )
    ledger.step(run, 1, "reply", "c2", 1.2, 0.008)
    ledger.beat(run)
    # spec.budget: one model call's usage, as a budgeted worker records it (agentrun_model_usage)
    ledger.sql(
        "INSERT INTO agentrun_model_usage (run_id, call_key, attempt, step, model, input_tokens,"
        " output_tokens, total_tokens, cost_micro) VALUES (%s, 'e1/reply:2/0', 1, 'reply:2', 'm', 120, 30,"
        " 150, 900)",
        run,
    )
    time.sleep(hold)
    # eviction: the pod drains, the operator starts attempt 2, which hits the ledger for the sent email
    ledger.sql("UPDATE agentrun_attempts SET ended_at = now(), outcome = 'drained' WHERE run_id = %s", run)
    lost_at = time.monotonic()
    ledger.attempt(run, 2, "evicted")
    metrics.resume_latency(time.monotonic() - lost_at + 1.7, "evicted")
    ledger.sql("UPDATE agentrun_effects SET duplicates_prevented = 1 WHERE idempotency_key = 'k-email'")
    ledger.beat(run)
    time.sleep(hold)
    # approval: attempt 2 parks
    ledger.sql(
        "INSERT INTO agentrun_approvals (approval_id, run_id, interrupt_id, prompt, deadline) VALUES"
        " ('a-e2e', %s, 'i1', '{\"q\": \"refund?\"}', now() + interval '1 day')",
        run,
    )
    ledger.sql(
        "UPDATE agentrun_attempts SET ended_at = now(), outcome = 'parked' WHERE run_id = %s AND attempt = 2",
        run,
    )
    ledger.status(run, "parked")
    time.sleep(hold)
    ledger.sql(
        "UPDATE agentrun_approvals SET status = 'approved', decided_by = 'alice', decided_at = now()"
        " WHERE approval_id = 'a-e2e'"
    )
    ledger.attempt(run, 3, "approval")
    ledger.status(run, "running")
    ledger.beat(run)
    ledger.step(run, 3, "refund", "c3", 0.7, 0.004)
    time.sleep(hold)
    ledger.sql("UPDATE agentrun_effects SET status = 'confirmed', confirmed_at = now()")
    ledger.sql(
        "UPDATE agentrun_attempts SET ended_at = now(), outcome = 'succeeded' WHERE run_id = %s"
        " AND attempt = 3",
        run,
    )
    ledger.status(run, "succeeded")
    time.sleep(hold)


def stage_alerts(ledger: Ledger) -> None:
    """Make every alert's condition true in namespace ``ledger.ns``."""
    ns = ledger.ns
    ledger.admit("st-stuck", "running")
    ledger.sql(
        "INSERT INTO agentrun_effects (idempotency_key, run_id, step, action, tool, args_hash, args,"
        " epoch, needs_human, created_at) VALUES ('k-stuck', 'st-stuck', 's', 'send_email', 'email',"
        " 'x', '{}', 1, true, now() - interval '1 hour')"
    )
    ledger.sql(
        "INSERT INTO agentrun_heartbeats (run_id, key, beat_at) VALUES ('st-stuck', 'worker',"
        " now() - interval '10 minutes')"
    )
    ledger.admit("st-wait", "parked")
    ledger.sql(
        "INSERT INTO agentrun_approvals (approval_id, run_id, interrupt_id, prompt, deadline, requested_at)"
        " VALUES ('a-st', 'st-wait', 'i', '{}', now() + interval '10 minutes', now() - interval '1 hour')"
    )
    ledger.admit("st-fail", "running")
    metrics.init_namespaces([ns])  # the takeover counter exists at 0 before it rises
    time.sleep(3)  # counters and the Failed gauge are seen at their old value first
    ledger.status("st-fail", "failed")
    for _ in range(4):
        metrics.lease_takeover(ns)
    metrics.lease_renew_failure(ns)


@pytest.fixture
def operator_metrics(pg_dsn: str) -> Iterator[str]:
    """The operator's /metrics: in-process counters + the collector on this test's Postgres."""
    collector = metrics.postgres_collector(pg_dsn)
    server = metrics.start_metrics_server(0, addr="127.0.0.1", collector=collector)
    try:
        yield f"127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        metrics.REGISTRY.unregister(collector)  # type: ignore[arg-type]


@pytest.fixture
def broken_operator_metrics() -> Iterator[str]:
    """An operator whose Postgres is gone: its scrape must still work and say agentrun_collector_up 0."""
    import prometheus_client

    collector = metrics.postgres_collector("postgresql://x@127.0.0.1:1/x", connect_timeout_seconds=1)
    server = metrics.start_metrics_server(
        0, addr="127.0.0.1", registry=prometheus_client.CollectorRegistry(), collector=collector
    )
    try:
        yield f"127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()


def assert_panels_have_data(
    prom: Prometheus, namespace: str, start: float, end: float, unused: tuple[str, ...] = ()
) -> None:
    """Every panel query, as Grafana sends it for this namespace, returns finite data over the window;
    ``unused``: panels (by a part of their title) of a feature the run does not use, proven elsewhere."""
    empty = []
    for board, title, expr in panel_queries():
        if any(part in title for part in unused):
            continue
        result = prom.query_range(grafana_expr(expr, namespace), start, end)
        if not finite_values(result):
            empty.append(f"{board} / {title}: {expr}")
    assert not empty, "panels without data:\n" + "\n".join(empty)


def peak(prom: Prometheus, expr: str, start: float, end: float) -> float:
    values = finite_values(prom.query_range(expr, start, end))
    assert values, f"no data for {expr}"
    return max(values)


def assert_alerts_fire_when_staged(
    prom: Prometheus, conn: psycopg.Connection[Any], staged: str, broken_job: str
) -> None:
    # nothing fires for a healthy run (an operator whose Postgres is gone is the one exception)
    firing = prom.firing()
    assert set(firing) <= {"AgentRunCollectorDown"}, firing
    stage_alerts(Ledger(conn, staged))
    alerts = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}

    def all_firing() -> dict[str, list[dict[str, str]]] | None:
        now = prom.firing()
        return now if alerts <= set(now) else None

    firing = wait_for(
        all_firing, 30, f"alerts {sorted(alerts)} firing", interval=0.5, on_timeout=lambda: str(prom.firing())
    )
    for name, labels in firing.items():
        if name == "AgentRunCollectorDown":
            assert [lb["job"] for lb in labels] == [broken_job]
        else:
            assert {lb["namespace"] for lb in labels} == {staged}, (name, labels)
    # and every alert expression evaluated directly through the API returns the staged series
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            assert prom.query(rule["expr"]), rule["alert"]


def test_dashboards_and_alerts_on_ledger_rows(
    tmp_path: pathlib.Path, pg_dsn: str, operator_metrics: str, broken_operator_metrics: str
) -> None:
    """The collector and the in-process metrics of this process, fed by rows written as worker and operator
    write them: fast, and independent of the worker and operator (the real run is the next test)."""
    namespace = f"obs-rows-{int(time.time())}"
    targets = {"agentrun-operator": operator_metrics, "agentrun-operator-nodb": broken_operator_metrics}
    with running(tmp_path, targets, [fast_rules(tmp_path)]) as prom, psycopg.connect(pg_dsn) as conn:
        prom.wait_scraped(list(targets))
        start = time.time()
        drive_run(Ledger(conn, namespace))
        end = time.time()
        assert_panels_have_data(prom, namespace, start, end)
        sel = f'namespace="{namespace}"'
        assert peak(prom, f'agentrun_attempts_started_total{{{sel},reason="evicted"}}', start, end) == 1
        assert peak(prom, f'agentrun_approvals_decided_total{{{sel},decision="approved"}}', start, end) == 1
        assert peak(prom, f"agentrun_approvals_pending{{{sel}}}", start, end) == 1
        assert peak(prom, f"agentrun_effect_duplicates_prevented_total{{{sel}}}", start, end) == 1
        assert peak(prom, f"agentrun_step_duration_seconds_count{{{sel}}}", start, end) == 3
        assert peak(prom, f'agentrun_runs{{{sel},phase="Succeeded"}}', start, end) == 1
        assert_alerts_fire_when_staged(prom, conn, f"{namespace}-staged", "agentrun-operator-nodb")


# --- the real operator, evicted once and approved once -----------------------------------------------


@pytest.mark.cluster
def test_dashboards_and_alerts_on_a_real_run(
    tmp_path: pathlib.Path,
    dev_cluster: Any,
    kube: Any,
    namespace: str,
    pg_dsn: str,
    operator: Any,
    identity: Any,
    broken_operator_metrics: str,
) -> None:
    """Operator + worker + the support-ticket graph: evicted inside `retrieve` (its 8 s pause, right after
    `analyze` is recorded), approved at `review`."""
    env = dev_cluster.env
    spec = {
        "graph": "agentrun_examples.support_ticket:graph",
        "input": {
            "ticket": {
                "id": "T-1042",
                "customer": {"name": "Ada", "email": "ada@example.com"},
                "subject": "Charged twice",
                "body": "I was charged twice for my subscription.",
            },
            "options": {"pause_seconds": {"retrieve": 8}},
        },
        "worker": {
            "env": [
                {"name": "SUPPORT_SMTP_HOST", "value": env.get("AGENTRUN_SMTP_HOST", "127.0.0.1")},
                {"name": "SUPPORT_SMTP_PORT", "value": env.get("AGENTRUN_SMTP_PORT", "2525")},
                {"name": "SUPPORT_SMTP_API", "value": env.get("AGENTRUN_SMTP_API", "")},
            ]
        },
    }
    evict_after = "analyze"
    import kubernetes

    from tests.support import kube as op
    from tests.support import waiting

    # the operator under test serves /metrics (restarted with a port; the fixture's replica had none)
    port = free_port()
    first = operator.current.identity
    operator.kill()
    operator.start(extra_env={"AGENTRUN_METRICS_PORT": str(port)})
    operator.wait_leader(kube, timeout=60, not_=first)
    staging = metrics.start_metrics_server(0, addr="127.0.0.1", registry=metrics.REGISTRY)
    targets = {
        "agentrun-operator": f"127.0.0.1:{port}",
        "agentrun-staging": f"127.0.0.1:{staging.server_port}",
        "agentrun-operator-nodb": broken_operator_metrics,
    }
    name = "ticket-obs"
    op.bind(kube, namespace, "alice", "agentrun-approver")
    try:
        with running(tmp_path, targets, [fast_rules(tmp_path)]) as prom, psycopg.connect(pg_dsn) as conn:
            prom.wait_scraped(list(targets), timeout=60)
            start = time.time()
            uid = op.create_run(kube, namespace, name, spec)["metadata"]["uid"]

            def after_step() -> Any:  # the worker has recorded evict_after's step event
                row = conn.execute(
                    "SELECT 1 FROM agentrun_step_events WHERE run_id = %s AND attempt = 1"
                    " AND split_part(step, ':', 1) = %s",  # the worker records "<node>:<step number>"
                    (uid, evict_after),
                ).fetchone()
                conn.commit()
                return row is not None and op.run_status(kube, namespace, name).get("workerPod")

            pod = waiting.wait_for(after_step, 90, f"attempt 1 past {evict_after}", on_timeout=operator.logs)
            time.sleep(1)
            kubernetes.client.CoreV1Api(kube).create_namespaced_pod_eviction(
                pod, namespace, {"metadata": {"name": pod, "namespace": namespace}}
            )
            status = waiting.wait_phase(
                kube, namespace, name, "WaitingApproval", timeout=120, handle=operator
            )
            assert status["attempts"] >= 2
            time.sleep(2)
            approved = op.kubectl(identity("alice"), "agentrun", "approve", name, "-n", namespace, dsn=pg_dsn)
            assert approved.returncode == 0, approved.stderr
            waiting.wait_phase(kube, namespace, name, "Succeeded", timeout=120, handle=operator)
            time.sleep(4)  # a few scrapes of the final state
            end = time.time()

            traced = op.kubectl(
                dev_cluster.kubeconfig, "agentrun", "trace", name, "-n", namespace, dsn=pg_dsn
            )
            print(traced.stdout)
            assert traced.returncode == 0, traced.stderr
            for fragment in (f"{name}-1", f"{name}-2", "evicted", "alice", "approved"):
                assert fragment in traced.stdout, fragment

            # The support-ticket run has no spec.budget and makes no model call: the budget panel is proven by
            # the ledger-rows test, which writes the usage rows a budgeted worker writes.
            assert_panels_have_data(prom, namespace, start, end, unused=("(spec.budget)",))
            sel = f'job="agentrun-operator",namespace="{namespace}"'
            assert peak(prom, f'agentrun_attempts_started_total{{{sel},reason="evicted"}}', start, end) == 1
            assert (
                peak(prom, f'agentrun_approvals_decided_total{{{sel},decision="approved"}}', start, end) == 1
            )
            assert peak(prom, f'agentrun_runs{{{sel},phase="Succeeded"}}', start, end) == 1
            assert (
                peak(prom, 'agentrun_resume_latency_seconds_count{job="agentrun-operator"}', start, end) >= 1
            )
            latency = peak(
                prom, 'sum(agentrun_resume_latency_seconds_sum{job="agentrun-operator"})', start, end
            )
            print(
                f"{len(panel_queries())} panel queries returned data; resume latency (pod loss observed ->"
                f" next attempt running) {latency:.2f}s"
            )
            assert_alerts_fire_when_staged(prom, conn, f"{namespace}-staged", "agentrun-operator-nodb")
    finally:
        staging.shutdown()
