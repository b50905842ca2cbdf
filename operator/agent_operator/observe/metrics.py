"""Prometheus metrics of the operator: a few in-process counters and a Postgres-backed collector.

Surface used by the rest of the operator (all cheap, thread-safe, never raise on odd input):

    metrics.attempt_started(reason, namespace)   # a worker Pod for attempt N was created
    metrics.resume_latency(seconds, reason)      # pod loss observed -> next attempt's Pod running
    metrics.lease_takeover(namespace)            # a run's Lease was taken over after expiry
    metrics.lease_renew_failure(namespace)       # a Lease was seen un-renewed past its renew deadline
    metrics.admission_mode(mode)                 # which admission install steering relies on (gauge)
    metrics.start_metrics_server(port, dsn=..., active=...)  # serve /metrics and /healthz; ledger figures
                                                 # only while active() (the leader), if given

Why two kinds: what only the operator observes (why it started an attempt, how long a resume took) is counted
in-process. Everything about the ledger, heartbeats, approvals and step timings lives in Postgres and is read
by ``LedgerCollector`` at scrape time, so figures survive operator restarts, agree across replicas, and never
depend on short-lived worker processes being alive when Prometheus scrapes. Workers report step and
checkpoint timings as step events (batches, read one per row through the view ``agentrun_step_events``);
the collector turns them into histograms.
The reads are the store's (``agentrun_core.store.metrics_sql``), the conversion to families is
``metric_families``; this module only wires them to the registry and the HTTP server.

Labels are bounded: namespace, tool, status/phase, reason, decision, kind, outcome — never a run or a key.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from wsgiref import simple_server
from wsgiref.simple_server import WSGIServer

import prometheus_client
from prometheus_client import core, exposition

from agent_operator.observe import metric_families
from agentrun_core.store import metrics_sql

log = logging.getLogger(__name__)

REGISTRY = prometheus_client.CollectorRegistry(auto_describe=True)
prometheus_client.ProcessCollector(registry=REGISTRY)
prometheus_client.PlatformCollector(registry=REGISTRY)

# Attempt start reasons form a closed set so a typo or a new Kubernetes reason cannot mint new series.
ATTEMPT_REASONS = frozenset(
    {"first", "evicted", "OOMKilled", "lease_expired", "failed", "drained", "preempted", "deleted",
     "approval", "deadline", "operator_restart", "infra", "lease_lost", "resumed", "retry", "resolved",
     "other"}
)

# Resume latency buckets, seconds (the row-derived histograms' bounds are metrics_sql's).
RESUME_BUCKETS = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300)

ATTEMPTS_STARTED = prometheus_client.Counter(
    "agentrun_attempts_started_total", "Worker attempts started by the operator, by reason.",
    ["namespace", "reason"], registry=REGISTRY,
)
RESUME_LATENCY = prometheus_client.Histogram(
    "agentrun_resume_latency_seconds",
    "Time from the operator observing a pod loss to the next attempt running.",
    ["reason"], buckets=RESUME_BUCKETS, registry=REGISTRY,
)
LEASE_TAKEOVERS = prometheus_client.Counter(
    "agentrun_lease_takeovers_total", "Run Leases taken over after expiry (the holder stopped renewing).",
    ["namespace"], registry=REGISTRY,
)
TENANT_SESSIONS_ENDED = prometheus_client.Counter(
    "agentrun_tenant_sessions_ended_total",
    "Worker-role Postgres sessions the operator ended: they kept others waiting on a lock (lockwatch).",
    ["namespace"], registry=REGISTRY,
)
LEASE_RENEW_FAILURES = prometheus_client.Counter(
    "agentrun_lease_renew_failures_total", "Leases observed not renewed within their renew deadline.",
    ["namespace"], registry=REGISTRY,
)


ADMISSION_MODE = prometheus_client.Gauge(
    "agentrun_operator_admission_mode",
    "1 for the admission install the operator last found (mode: mutating = deploy/admission, "
    "validating-only = deploy/admission-vap-only, none = absent or not as shipped: steering refused, "
    "unknown = could not look), 0 for the others.",
    ["mode"],
    registry=REGISTRY,
)
_ADMISSION_MODES = ("mutating", "validating-only", "none", "unknown")


def admission_mode(mode: str | None) -> None:
    """Which admission install the operator found (None: none as shipped); exactly one mode series is 1."""
    current = mode or "none"
    for m in _ADMISSION_MODES:
        ADMISSION_MODE.labels(mode=m).set(1 if m == current else 0)


def normalize_reason(reason: str) -> str:
    """Map an attempt reason onto the closed label set (unknown reasons become ``other``)."""
    if reason in ATTEMPT_REASONS:
        return reason
    folded = reason.strip().replace("-", "_").replace(" ", "_")
    lowered = {r.lower(): r for r in ATTEMPT_REASONS}
    return lowered.get(folded.lower(), "other")


def attempt_started(reason: str, namespace: str = "") -> None:
    ATTEMPTS_STARTED.labels(namespace=namespace, reason=normalize_reason(reason)).inc()


def resume_latency(seconds: float, reason: str = "other") -> None:
    RESUME_LATENCY.labels(reason=normalize_reason(reason)).observe(max(0.0, seconds))


def lease_takeover(namespace: str = "") -> None:
    LEASE_TAKEOVERS.labels(namespace=namespace).inc()


def lease_renew_failure(namespace: str = "") -> None:
    LEASE_RENEW_FAILURES.labels(namespace=namespace).inc()


def init_namespaces(namespaces: Iterable[str]) -> None:
    """Create the in-process series of each namespace at 0. Prometheus's increase()/rate() only see a
    counter's first increment if the series existed before it, so the first takeover of a namespace would be
    invisible otherwise. The collector calls this with the namespaces it finds in Postgres."""
    for ns in namespaces:
        LEASE_TAKEOVERS.labels(namespace=ns)
        LEASE_RENEW_FAILURES.labels(namespace=ns)
        TENANT_SESSIONS_ENDED.labels(namespace=ns)
        for reason in ATTEMPT_REASONS:
            ATTEMPTS_STARTED.labels(namespace=ns, reason=reason)
    for reason in ATTEMPT_REASONS:
        RESUME_LATENCY.labels(reason=reason)


class LedgerCollector:
    """Collector evaluated at scrape time. ``fetch`` returns a Snapshot; if it raises (Postgres down, a
    statement timeout) the scrape still succeeds with ``agentrun_collector_up 0`` and no ledger figures."""

    def __init__(self, fetch: Callable[[], metrics_sql.Snapshot],
                 on_namespaces: Callable[[Iterable[str]], None] = init_namespaces,
                 active: Callable[[], bool] | None = None) -> None:
        self._fetch = fetch
        # Standby replicas may serve /metrics (probes, process metrics) but must not export the ledger a
        # second time: dashboards sum across targets. ``active`` says whether this replica leads.
        self._active = active
        self._on_namespaces = on_namespaces
        self._up = True
        self._lock = threading.Lock()  # the HTTP server is threaded; one fetch at a time

    def describe(self) -> list[core.Metric]:
        return []  # unchecked collector: its families depend on the data

    def collect(self) -> Iterator[core.Metric]:
        if self._active is not None and not self._active():
            return
        started = time.monotonic()
        try:
            with self._lock:
                snap = self._fetch()
            fams, up = metric_families.families(snap), 1.0
            self._on_namespaces({ns for ns, _, _ in snap.runs})
        except Exception as exc:  # a broken scrape would hide every other metric too
            # Once per outage at warning level; every scrape of a long outage would flood the log.
            log.log(logging.WARNING if self._up else logging.DEBUG, "ledger collector failed: %s", exc)
            fams, up = [], 0.0
        if up and not self._up:
            log.info("ledger collector reads Postgres again")
        self._up = bool(up)
        yield from fams
        yield core.GaugeMetricFamily("agentrun_collector_up", "1 if the last ledger scrape read Postgres.",
                                     value=up)
        yield core.GaugeMetricFamily("agentrun_collector_duration_seconds",
                                     "Time the ledger collector took for this scrape.",
                                     value=time.monotonic() - started)


def postgres_collector(dsn: str, *, statement_timeout_seconds: float = 2.0,
                       connect_timeout_seconds: float = 3.0,
                       active: Callable[[], bool] | None = None) -> LedgerCollector:
    source = metrics_sql.SnapshotSource(dsn, statement_timeout_seconds=statement_timeout_seconds,
                                       connect_timeout_seconds=connect_timeout_seconds)
    return LedgerCollector(source.fetch, active=active)


def start_metrics_server(port: int, dsn: str | None = None, *, addr: str = "0.0.0.0",
                         registry: prometheus_client.CollectorRegistry | None = None,
                         collector: LedgerCollector | None = None,
                         active: Callable[[], bool] | None = None) -> WSGIServer:
    """Serve /metrics on ``addr:port`` (port 0 picks a free one: read ``server.server_port``) in a daemon
    thread, and ``/healthz`` (always 200, touches nothing: for liveness/readiness probes, which must not
    cost a Postgres round of queries each). With ``dsn`` (or an explicit ``collector``) the ledger collector
    is registered too; with ``active`` (e.g. "am I the leader?") it exports ledger figures only while that
    returns True, so a standby replica can serve probes and process metrics without doubling them.
    Stop with ``server.shutdown()``."""
    reg = REGISTRY if registry is None else registry
    if collector is None and dsn is not None:
        collector = postgres_collector(dsn, active=active)
    if collector is not None:
        reg.register(collector)
    metrics_app = prometheus_client.make_wsgi_app(reg)

    def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        if environ.get("PATH_INFO") in {"/healthz", "/readyz"}:
            start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"ok\n"]
        body: Iterable[bytes] = metrics_app(environ, start_response)
        return body

    server = simple_server.make_server(addr, port, app, exposition.ThreadingWSGIServer, _QuietHandler)
    threading.Thread(target=server.serve_forever, name="agentrun-metrics", daemon=True).start()
    return server


class _QuietHandler(simple_server.WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # one line per scrape/probe is noise
        pass


def exported_names(registry: prometheus_client.CollectorRegistry) -> set[str]:
    """Every sample name a registry can expose (``_bucket``, ``_total``, ... expanded); used by the tests
    that check dashboards and alerts name only metrics the code exports."""
    suffixes = {
        "counter": ("_total", "_created"),
        "histogram": ("_bucket", "_sum", "_count", "_created"),
        "gaugehistogram": ("_bucket", "_gsum", "_gcount"),
        "summary": ("_sum", "_count", "_created"),
        "info": ("_info",),
    }
    names: set[str] = set()
    for fam in registry.collect():
        names.update(s.name for s in fam.samples)
        names.update(fam.name + suffix for suffix in suffixes.get(fam.type, ("",)))
    return names
