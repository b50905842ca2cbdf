"""Prometheus metrics of the operator: a few in-process counters and a Postgres-backed collector.

Surface used by the rest of the operator (all cheap, thread-safe, never raise on odd input):

    metrics.attempt_started(reason, namespace)   # a worker Pod for attempt N was created
    metrics.resume_latency(seconds, reason)      # pod loss observed -> next attempt's Pod running
    metrics.lease_takeover(namespace)            # a run's Lease was taken over after expiry
    metrics.lease_renew_failure(namespace)       # a Lease was seen un-renewed past its renew deadline
    metrics.start_metrics_server(port, dsn=..., active=...)  # serve /metrics and /healthz; ledger figures
                                                 # only while active() (the leader), if given

Why two kinds: what only the operator observes (why it started an attempt, how long a resume took) is counted
in-process. Everything about the ledger, heartbeats, approvals and step timings lives in Postgres and is read
by ``LedgerCollector`` at scrape time, so figures survive operator restarts, agree across replicas, and never
depend on short-lived worker processes being alive when Prometheus scrapes. Workers report step and
checkpoint timings by writing ``agentrun_step_events`` rows; the collector turns them into histograms.

Labels are bounded: namespace, tool, status/phase, reason, decision, kind, outcome — never a run or a key.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any
from wsgiref import simple_server
from wsgiref.simple_server import WSGIServer

import prometheus_client
from prometheus_client import core, exposition

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

# Histogram buckets, seconds. Steps and checkpoint writes are sub-second to minutes; human waits are
# minutes to days; heartbeat ages should sit near the renew interval (seconds) when healthy.
RESUME_BUCKETS = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300)
STEP_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
CHECKPOINT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)
APPROVAL_WAIT_BUCKETS = (1, 10, 60, 300, 900, 3600, 4 * 3600, 86400, 3 * 86400, 7 * 86400)
HEARTBEAT_AGE_BUCKETS = (1, 5, 10, 15, 30, 60, 120, 300, 900, 3600)

# AgentRun phase for each agentrun_runs.status (docs/design.md). needs_human has no phase of its own in the
# CRD (the run is Failed or waiting); it is shown apart because it is what an operator must act on.
PHASE_BY_STATUS = {
    "admitted": "Pending",
    "running": "Running",
    "parked": "WaitingApproval",
    "needs_human": "NeedsHuman",
    "succeeded": "Succeeded",
    "failed": "Failed",
    "cancelled": "Cancelled",
}
EFFECT_STATUSES = ("pending", "sent", "confirmed", "failed")
DECISIONS = ("approved", "rejected", "expired")
DEADLINE_ACTIONS = ("escalate", "cancel", "read_only")
ATTEMPT_OUTCOMES = ("succeeded", "failed", "parked", "drained", "fenced", "needs_human", "lost")
# What a worker's row says when the control plane lost its attempt: "fenced" (its Lease lapsed while the
# API server was away, exit 12) or "lost" (Postgres gone, exit 14, or closed by the operator).
CONTROL_PLANE_OUTCOMES = ("fenced", "lost")

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
LEASE_RENEW_FAILURES = prometheus_client.Counter(
    "agentrun_lease_renew_failures_total", "Leases observed not renewed within their renew deadline.",
    ["namespace"], registry=REGISTRY,
)


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
        for reason in ATTEMPT_REASONS:
            ATTEMPTS_STARTED.labels(namespace=ns, reason=reason)
    for reason in ATTEMPT_REASONS:
        RESUME_LATENCY.labels(reason=reason)


# --------------------------------------------------------------------------------------------------------
# The ledger collector: pure conversion of query rows to metric families, and the Postgres fetch.


@dataclasses.dataclass(frozen=True)
class Histogram:
    """Cumulative bucket counts as Prometheus wants them: ``counts[i]`` = observations <= ``bounds[i]``."""

    bounds: Sequence[float]
    counts: Sequence[int]
    count: int
    total: float


@dataclasses.dataclass
class Snapshot:
    """Everything one scrape reads from Postgres, as plain rows (tests build these by hand)."""

    runs: list[tuple[str, str, int]] = dataclasses.field(default_factory=list)  # namespace, status, n
    # namespace, tool, status, n, needs_human, provider calls, duplicates prevented
    effects: list[tuple[str, str, str, int, int, int, int]] = dataclasses.field(default_factory=list)
    oldest_pending_effect: dict[str, float] = dataclasses.field(default_factory=dict)  # namespace -> s
    heartbeat_ages: list[tuple[str, str, float]] = dataclasses.field(default_factory=list)  # ns, kind, s
    # namespace, pending count, seconds to the nearest deadline (None: no deadline)
    approvals_pending: list[tuple[str, int, float | None]] = dataclasses.field(default_factory=list)
    approvals_decided: list[tuple[str, str, int]] = dataclasses.field(default_factory=list)  # ns, decision, n
    deadline_outcomes: list[tuple[str, str, int]] = dataclasses.field(default_factory=list)  # ns, action, n
    # namespace, outcome, cause ("control_plane": lost to the control plane, not counted against maxAttempts;
    # "run": everything else), n
    attempts_ended: list[tuple[str, str, str, int]] = dataclasses.field(default_factory=list)
    approval_wait: dict[str, Histogram] = dataclasses.field(default_factory=dict)
    step_duration: dict[str, Histogram] = dataclasses.field(default_factory=dict)
    checkpoint_duration: dict[str, Histogram] = dataclasses.field(default_factory=dict)
    # namespace, tool, rows replayed with other arguments, such replays in total (stored result returned)
    effect_divergences: list[tuple[str, str, int, int]] = dataclasses.field(default_factory=list)
    # namespace, seconds since a pending approval was requested: one entry per pending approval
    approval_pending_ages: list[tuple[str, float]] = dataclasses.field(default_factory=list)


def bucketize(values: Iterable[float], bounds: Sequence[float]) -> Histogram:
    vals = list(values)
    counts = [sum(1 for v in vals if v <= b) for b in bounds]
    return Histogram(bounds=bounds, counts=counts, count=len(vals), total=float(sum(vals)))


def _buckets(h: Histogram) -> list[tuple[str, float]]:
    # str(float) matches the client library's own "le" spelling (1.0, 0.25, 86400.0).
    pairs = [(str(float(b)), float(c)) for b, c in zip(h.bounds, h.counts, strict=True)]
    return [*pairs, ("+Inf", float(h.count))]


def families(snap: Snapshot) -> list[core.Metric]:
    """Metric families for one snapshot. Every namespace with runs gets every phase/status (zeros
    included) so dashboards and alerts see 0 rather than an absent series."""
    namespaces = sorted({ns for ns, _, _ in snap.runs} | {row[0] for row in snap.effects})
    out: list[core.Metric] = []

    runs = core.GaugeMetricFamily("agentrun_runs", "Runs known to the ledger, by AgentRun phase.",
                                  labels=["namespace", "phase"])
    per_phase = {(ns, PHASE_BY_STATUS.get(st, "Unknown")): 0 for ns in namespaces for st in PHASE_BY_STATUS}
    for ns, status, n in snap.runs:
        key = (ns, PHASE_BY_STATUS.get(status, "Unknown"))
        per_phase[key] = per_phase.get(key, 0) + n
    for (ns, phase), n in sorted(per_phase.items()):
        runs.add_metric([ns, phase], n)
    out.append(runs)

    effects = core.GaugeMetricFamily("agentrun_effects", "Effect ledger rows, by tool and status.",
                                     labels=["namespace", "tool", "status"])
    human = core.GaugeMetricFamily("agentrun_effects_needs_human",
                                   "Effects of unknown outcome awaiting a human.",
                                   labels=["namespace", "tool"])
    calls = core.CounterMetricFamily("agentrun_effect_provider_calls", "Provider calls made for effects.",
                                     labels=["namespace", "tool"])
    dups = core.CounterMetricFamily("agentrun_effect_duplicates_prevented",
                                    "Ledger hits that returned a stored result, skipping a provider call.",
                                    labels=["namespace", "tool"])
    by_status: dict[tuple[str, str, str], int] = {}
    by_tool: dict[tuple[str, str], list[int]] = {}
    for ns, tool, status, n, nh, pc, dp in snap.effects:
        for st in EFFECT_STATUSES:
            by_status.setdefault((ns, tool, st), 0)
        by_status[(ns, tool, status)] = by_status.get((ns, tool, status), 0) + n
        acc = by_tool.setdefault((ns, tool), [0, 0, 0])
        acc[0] += nh
        acc[1] += pc
        acc[2] += dp
    for (ns, tool, st), n in sorted(by_status.items()):
        effects.add_metric([ns, tool, st], n)
    for (ns, tool), (nh, pc, dp) in sorted(by_tool.items()):
        human.add_metric([ns, tool], nh)
        calls.add_metric([ns, tool], pc)
        dups.add_metric([ns, tool], dp)
    out += [effects, human, calls, dups]
    divergent = core.GaugeMetricFamily(
        "agentrun_effects_divergent",
        "Effect rows a replay asked for with other arguments (a nondeterministic step); never repeated.",
        labels=["namespace", "tool"],
    )
    divergences = core.CounterMetricFamily(
        "agentrun_effect_divergences",
        "Replays that reached a recorded effect's position with other arguments (stored result returned).",
        labels=["namespace", "tool"],
    )
    # Zeros for every (namespace, tool) with effects: dashboards and rates see 0, not an absent series.
    diverged = {key: (0, 0) for key in by_tool}
    diverged |= {(ns, tool): (n, d) for ns, tool, n, d in snap.effect_divergences}
    for (ns, tool), (rows, total) in sorted(diverged.items()):
        divergent.add_metric([ns, tool], rows)
        divergences.add_metric([ns, tool], total)
    out += [divergent, divergences]

    oldest = core.GaugeMetricFamily("agentrun_effect_oldest_pending_age_seconds",
                                    "Age of the oldest effect still pending (0: none pending).",
                                    labels=["namespace"])
    for ns in sorted(set(namespaces) | set(snap.oldest_pending_effect)):
        oldest.add_metric([ns], snap.oldest_pending_effect.get(ns, 0.0))
    out.append(oldest)

    out += _heartbeat_families(snap, namespaces)
    out += _approval_families(snap, namespaces)

    ended = core.CounterMetricFamily("agentrun_attempts_ended",
                                     "Worker attempts ended, by outcome and cause (control_plane: lost to "
                                     "the control plane, not counted against maxAttempts; run: the rest).",
                                     labels=["namespace", "outcome", "cause"])
    # Zeros: every outcome as "run", and the outcomes a control-plane loss ends with as "control_plane".
    per_outcome = {(ns, o, "run"): 0 for ns in namespaces for o in ATTEMPT_OUTCOMES}
    per_outcome |= {(ns, o, "control_plane"): 0 for ns in namespaces for o in CONTROL_PLANE_OUTCOMES}
    for ns, outcome, cause, n in snap.attempts_ended:
        per_outcome[(ns, outcome, cause)] = per_outcome.get((ns, outcome, cause), 0) + n
    for (ns, outcome, cause), n in sorted(per_outcome.items()):
        ended.add_metric([ns, outcome, cause], n)
    out.append(ended)

    for name, doc, data, bounds in (
        ("agentrun_step_duration_seconds", "Duration of graph steps, reported by workers.",
         snap.step_duration, STEP_BUCKETS),
        ("agentrun_checkpoint_write_duration_seconds", "Duration of checkpoint writes, reported by workers.",
         snap.checkpoint_duration, CHECKPOINT_BUCKETS),
    ):
        fam = core.HistogramMetricFamily(name, doc, labels=["namespace"])
        for ns, h in sorted(_with_zeros(data, namespaces, bounds).items()):
            fam.add_metric([ns], _buckets(h), h.total)
        out.append(fam)
    return out


def _with_zeros(
    data: dict[str, Histogram], namespaces: list[str], bounds: Sequence[float]
) -> dict[str, Histogram]:
    """Row-derived histograms start at 0 for every namespace with runs: a series born with count 1 hides
    its first observation from rate(), and a namespace's first approval would never reach a quantile."""
    zero = Histogram(bounds=bounds, counts=[0] * len(bounds), count=0, total=0.0)
    return {**{ns: zero for ns in namespaces}, **data}


def _heartbeat_families(snap: Snapshot, namespaces: list[str]) -> list[core.Metric]:
    dist = core.GaugeHistogramMetricFamily(
        "agentrun_heartbeat_age_seconds",
        "Current age of heartbeats of running runs (kind: worker, step, tool).",
        labels=["namespace", "kind"])
    stalest = core.GaugeMetricFamily("agentrun_heartbeat_oldest_age_seconds",
                                     "Age of the stalest heartbeat of a running run (0: none).",
                                     labels=["namespace"])
    grouped: dict[tuple[str, str], list[float]] = {}
    for ns, kind, age in snap.heartbeat_ages:
        grouped.setdefault((ns, kind), []).append(age)
    for (ns, kind), ages in sorted(grouped.items()):
        h = bucketize(ages, HEARTBEAT_AGE_BUCKETS)
        dist.add_metric([ns, kind], _buckets(h), h.total)
    worst = {ns: 0.0 for ns in namespaces}
    for ns, _, age in snap.heartbeat_ages:
        worst[ns] = max(worst.get(ns, 0.0), age)
    for ns, age in sorted(worst.items()):
        stalest.add_metric([ns], age)
    return [dist, stalest]


def _approval_families(snap: Snapshot, namespaces: list[str]) -> list[core.Metric]:
    pending = core.GaugeMetricFamily("agentrun_approvals_pending", "Approvals waiting for a human.",
                                     labels=["namespace"])
    remaining = core.GaugeMetricFamily(
        "agentrun_approval_deadline_remaining_seconds",
        "Seconds until the nearest deadline of a pending approval (negative: overdue; absent: none).",
        labels=["namespace"])
    counts = {ns: 0 for ns in namespaces}
    for ns, n, left in snap.approvals_pending:
        counts[ns] = counts.get(ns, 0) + n
        if left is not None and n > 0:
            remaining.add_metric([ns], left)
    for ns, n in sorted(counts.items()):
        pending.add_metric([ns], n)

    decided = core.CounterMetricFamily("agentrun_approvals_decided", "Approvals decided, by decision.",
                                       labels=["namespace", "decision"])
    per_decision = {(ns, d): 0 for ns in namespaces for d in DECISIONS}
    for ns, d, n in snap.approvals_decided:
        per_decision[(ns, d)] = per_decision.get((ns, d), 0) + n
    for (ns, d), n in sorted(per_decision.items()):
        decided.add_metric([ns, d], n)

    outcomes = core.CounterMetricFamily("agentrun_approval_deadline_outcomes",
                                        "Approvals that reached their deadline, by the action taken.",
                                        labels=["namespace", "action"])
    per_action = {(ns, a): 0 for ns in namespaces for a in DEADLINE_ACTIONS}
    for ns, action, n in snap.deadline_outcomes:
        per_action[(ns, action)] = per_action.get((ns, action), 0) + n
    for (ns, action), n in sorted(per_action.items()):
        outcomes.add_metric([ns, action], n)

    wait = core.HistogramMetricFamily("agentrun_approval_wait_seconds",
                                      "Time from an approval being requested to its decision.",
                                      labels=["namespace"])
    for ns, h in sorted(_with_zeros(snap.approval_wait, namespaces, APPROVAL_WAIT_BUCKETS).items()):
        wait.add_metric([ns], _buckets(h), h.total)
    return [pending, remaining, decided, outcomes, wait, *_pending_age_families(snap, namespaces)]


# Age bands of waiting approvals (upper bound in seconds, label), for "waiting approvals by age".
PENDING_AGE_BANDS: tuple[tuple[float, str], ...] = (
    (300.0, "<5m"),
    (3600.0, "5m-1h"),
    (86400.0, "1h-1d"),
    (float("inf"), ">1d"),
)


def _pending_age_families(snap: Snapshot, namespaces: list[str]) -> list[core.Metric]:
    """Waiting approvals by age band (zeros for known namespaces: a band emptying shows as 0, not a gap) and
    the oldest one's age (absent when none waits: AgentRunApprovalPending then cannot fire)."""
    by_age = core.GaugeMetricFamily(
        "agentrun_approvals_pending_by_age",
        "Approvals waiting for a human, by how long they have waited (age band).",
        labels=["namespace", "age"],
    )
    oldest = core.GaugeMetricFamily(
        "agentrun_approval_oldest_pending_age_seconds",
        "Seconds the longest-waiting pending approval has waited (absent: none pending).",
        labels=["namespace"],
    )
    bands = {(ns, label): 0 for ns in namespaces for _, label in PENDING_AGE_BANDS}
    worst: dict[str, float] = {}
    for ns, age in snap.approval_pending_ages:
        label = next(lbl for bound, lbl in PENDING_AGE_BANDS if age < bound)
        bands[(ns, label)] = bands.get((ns, label), 0) + 1
        worst[ns] = max(worst.get(ns, 0.0), age)
    for (ns, label), n in sorted(bands.items()):
        by_age.add_metric([ns, label], n)
    for ns, age in sorted(worst.items()):
        oldest.add_metric([ns], age)
    return [by_age, oldest]


class LedgerCollector:
    """Collector evaluated at scrape time. ``fetch`` returns a Snapshot; if it raises (Postgres down, a
    statement timeout) the scrape still succeeds with ``agentrun_collector_up 0`` and no ledger figures."""

    def __init__(self, fetch: Callable[[], Snapshot],
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
            fams, up = families(snap), 1.0
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


# The Postgres side lives in metrics_pg to keep this module about metric definitions.
def postgres_collector(dsn: str, *, statement_timeout_seconds: float = 2.0,
                       connect_timeout_seconds: float = 3.0,
                       active: Callable[[], bool] | None = None) -> LedgerCollector:
    from agent_operator import metrics_pg

    source = metrics_pg.SnapshotSource(dsn, statement_timeout_seconds=statement_timeout_seconds,
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
