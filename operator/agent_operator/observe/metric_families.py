"""Ledger figures as Prometheus families: a pure conversion of one ``metrics_sql.Snapshot`` (the rows a
scrape read from Postgres) into metric families.

Rule: pure and total — no I/O, no globals, never raises on odd rows (an unknown status maps to ``Unknown``,
an unknown label gets its own series). Every namespace with runs gets every phase/status/outcome series at 0,
so dashboards and alerts see 0 rather than an absent series. Labels are bounded: namespace, tool,
status/phase, decision, kind, outcome — never a run or a key.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from prometheus_client import core

from agentrun_core.api import status as api_status
from agentrun_core.store import metrics_sql

# Heartbeat ages should sit near the renew interval (seconds) when healthy.
HEARTBEAT_AGE_BUCKETS = (1, 5, 10, 15, 30, 60, 120, 300, 900, 3600)

# AgentRun phase for each agentrun_runs.status (docs/design.md). needs_human has no phase of its own in the
# CRD (the run is Failed or waiting); it is shown apart because it is what an operator must act on.
PHASE_BY_STATUS = {
    "admitted": api_status.PENDING,
    "running": api_status.RUNNING,
    "parked": api_status.WAITING_APPROVAL,
    "needs_human": api_status.NEEDS_HUMAN,
    "succeeded": api_status.SUCCEEDED,
    "failed": api_status.FAILED,
    "cancelled": api_status.CANCELLED,
}
EFFECT_STATUSES = ("pending", "sent", "confirmed", "failed")
DECISIONS = ("approved", "rejected", "expired")
DEADLINE_ACTIONS = ("escalate", "cancel", "read_only")
ATTEMPT_OUTCOMES = ("succeeded", "failed", "parked", "drained", "fenced", "needs_human", "lost")
# What a worker's row says when the control plane lost its attempt: "fenced" (its Lease lapsed while the
# API server was away, exit 12) or "lost" (Postgres gone, exit 14, or closed by the operator).
CONTROL_PLANE_OUTCOMES = ("fenced", "lost")


def bucketize(values: Iterable[float], bounds: Sequence[float]) -> metrics_sql.Histogram:
    vals = list(values)
    counts = [sum(1 for v in vals if v <= b) for b in bounds]
    return metrics_sql.Histogram(bounds=bounds, counts=counts, count=len(vals), total=float(sum(vals)))


def _buckets(h: metrics_sql.Histogram) -> list[tuple[str, float]]:
    # str(float) matches the client library's own "le" spelling (1.0, 0.25, 86400.0).
    pairs = [(str(float(b)), float(c)) for b, c in zip(h.bounds, h.counts, strict=True)]
    return [*pairs, ("+Inf", float(h.count))]


def families(snap: metrics_sql.Snapshot) -> list[core.Metric]:
    """Metric families for one snapshot. Every namespace with runs gets every phase/status (zeros
    included) so dashboards and alerts see 0 rather than an absent series."""
    namespaces = sorted({ns for ns, _, _ in snap.runs} | {row[0] for row in snap.effects})
    out: list[core.Metric] = []

    runs = core.GaugeMetricFamily("agentrun_runs", "Runs known to the ledger, by AgentRun phase.",
                                  labels=["namespace", "phase"])
    _counted(runs, ((ns, PHASE_BY_STATUS.get(st, "Unknown")) for ns in namespaces for st in PHASE_BY_STATUS),
             (((ns, PHASE_BY_STATUS.get(st, "Unknown")), n) for ns, st, n in snap.runs))
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
    out += _model_families(snap)

    ended = core.CounterMetricFamily("agentrun_attempts_ended",
                                     "Worker attempts ended, by outcome and cause (control_plane: lost to "
                                     "the control plane, not counted against maxAttempts; run: the rest).",
                                     labels=["namespace", "outcome", "cause"])
    # Zeros: every outcome as "run", and the outcomes a control-plane loss ends with as "control_plane".
    zeros = [(ns, o, "run") for ns in namespaces for o in ATTEMPT_OUTCOMES]
    zeros += [(ns, o, "control_plane") for ns in namespaces for o in CONTROL_PLANE_OUTCOMES]
    _counted(ended, zeros, (((ns, outcome, cause), n) for ns, outcome, cause, n in snap.attempts_ended))
    out.append(ended)

    for name, doc, data, bounds in (
        ("agentrun_step_duration_seconds", "Duration of graph steps, reported by workers.",
         snap.step_duration, metrics_sql.STEP_BUCKETS),
        ("agentrun_checkpoint_write_duration_seconds", "Duration of checkpoint writes, reported by workers.",
         snap.checkpoint_duration, metrics_sql.CHECKPOINT_BUCKETS),
    ):
        fam = core.HistogramMetricFamily(name, doc, labels=["namespace"])
        for ns, h in sorted(_with_zeros(data, namespaces, bounds).items()):
            fam.add_metric([ns], _buckets(h), h.total)
        out.append(fam)
    return out


def _model_families(snap: metrics_sql.Snapshot) -> list[core.Metric]:
    """spec.budget's counting: only namespaces whose runs counted model calls (runs without a budget count
    nothing, so a zero there would claim what nobody measured)."""
    tokens = core.CounterMetricFamily("agentrun_model_tokens", "Model tokens counted by workers (runs with "
                                      "spec.budget), by kind.", labels=["namespace", "kind"])
    cost = core.CounterMetricFamily("agentrun_model_cost", "Cost of the model calls counted (runs with "
                                    "spec.budget), in each run's spec.budget.currency.", labels=["namespace"])
    calls = core.CounterMetricFamily("agentrun_model_calls", "Model calls counted (runs with spec.budget).",
                                     labels=["namespace"])
    for ns, n, inp, out, micro in sorted(snap.model_usage):
        tokens.add_metric([ns, "input"], inp)
        tokens.add_metric([ns, "output"], out)
        cost.add_metric([ns], micro / 1_000_000)
        calls.add_metric([ns], n)
    return [tokens, cost, calls]


def _with_zeros(
    data: dict[str, metrics_sql.Histogram], namespaces: list[str], bounds: Sequence[float]
) -> dict[str, metrics_sql.Histogram]:
    """Row-derived histograms start at 0 for every namespace with runs: a series born with count 1 hides
    its first observation from rate(), and a namespace's first approval would never reach a quantile."""
    zero = metrics_sql.Histogram(bounds=bounds, counts=[0] * len(bounds), count=0, total=0.0)
    return {**{ns: zero for ns in namespaces}, **data}


def _heartbeat_families(snap: metrics_sql.Snapshot, namespaces: list[str]) -> list[core.Metric]:
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


def _approval_families(snap: metrics_sql.Snapshot, namespaces: list[str]) -> list[core.Metric]:
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
    _counted(decided, ((ns, d) for ns in namespaces for d in DECISIONS),
             (((ns, d), n) for ns, d, n in snap.approvals_decided))

    outcomes = core.CounterMetricFamily("agentrun_approval_deadline_outcomes",
                                        "Approvals that reached their deadline, by the action taken.",
                                        labels=["namespace", "action"])
    _counted(outcomes, ((ns, a) for ns in namespaces for a in DEADLINE_ACTIONS),
             (((ns, action), n) for ns, action, n in snap.deadline_outcomes))

    wait = core.HistogramMetricFamily("agentrun_approval_wait_seconds",
                                      "Time from an approval being requested to its decision.",
                                      labels=["namespace"])
    approval_wait = _with_zeros(snap.approval_wait, namespaces, metrics_sql.APPROVAL_WAIT_BUCKETS)
    for ns, h in sorted(approval_wait.items()):
        wait.add_metric([ns], _buckets(h), h.total)
    return [pending, remaining, decided, outcomes, wait, *_pending_age_families(snap, namespaces)]


# Age bands of waiting approvals (upper bound in seconds, label), for "waiting approvals by age".
PENDING_AGE_BANDS: tuple[tuple[float, str], ...] = (
    (300.0, "<5m"),
    (3600.0, "5m-1h"),
    (86400.0, "1h-1d"),
    (float("inf"), ">1d"),
)


def _pending_age_families(snap: metrics_sql.Snapshot, namespaces: list[str]) -> list[core.Metric]:
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
    _counted(by_age, ((ns, label) for ns in namespaces for _, label in PENDING_AGE_BANDS),
             (((ns, next(lbl for bound, lbl in PENDING_AGE_BANDS if age < bound)), 1)
              for ns, age in snap.approval_pending_ages))
    worst: dict[str, float] = {}
    for ns, age in snap.approval_pending_ages:
        worst[ns] = max(worst.get(ns, 0.0), age)
    for ns, age in sorted(worst.items()):
        oldest.add_metric([ns], age)
    return [by_age, oldest]


def _counted(
    family: core.GaugeMetricFamily | core.CounterMetricFamily,
    zeros: Iterable[tuple[str, ...]],
    rows: Iterable[tuple[tuple[str, ...], float]],
) -> None:
    """One sample per label tuple: every one of ``zeros`` (0 unless counted: dashboards and alerts see 0
    rather than an absent series) and every one the ``rows`` count, their counts summed, in sorted order."""
    per: dict[tuple[str, ...], float] = dict.fromkeys(zeros, 0)
    for key, n in rows:
        per[key] = per.get(key, 0) + n
    for key, n in sorted(per.items()):
        family.add_metric(list(key), n)
