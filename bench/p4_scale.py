"""P4: N parked runs and N concurrent active runs on the dev cluster, with a real operator.

For each N: a fresh namespace and database, one ``agentrun operator`` process (scoped to the namespace), N
AgentRuns created at once (8 creators in parallel). Reported: time until all are parked on approval
(``bench.graphs:park``) or all succeeded (``bench.graphs:noop_10``), Pods holding a process, Pod objects
left, runs/min, the operator's RSS, the load on each part (``bench.load``) — for parked runs over 5 slices
after they are all parked, against the same slices before any run existed, and once more 11 minutes after
the last one parked (full mode: idle polls stretched to their longest, the parking's finished Pods deleted),
with what the cluster stores per parked run (``bench.stored``); then up to 1,000 of them approved through
the API server as a person would, timed until all have succeeded; for active runs as the mean over the run.
Each also gives what a run cost in all: CPU-seconds per run, each part, transactions per run.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import time

from agent_operator import settings as operator_settings
from agentrun_core.api import status as api_status
from bench import cluster, db, load, stats, stored


def _stored(c: cluster.Cluster) -> stored.Stored:
    return stored.sample(c.api, c.namespace)


# How many of the parked runs are approved and resumed (the figure: 1,000 of 10,000).
RESUME_AT_MOST = 1000


def parked_case(report: stats.Report, section: str, n: int, window: float, settle: float) -> None:
    with db.fresh_database(f"p4p{n}") as dsn, cluster.Cluster(f"parked{n}") as c:
        pid = c.start_operator(dsn)
        with load.meter(dsn, pid, c.api) as meter:
            idle, idle_tx = meter.cpu_slices(window)
            t0, before, kept_before = time.monotonic(), meter.sample(), _stored(c)
            c.create_runs(n, "bench.graphs:park")
            reached = time.monotonic() - t0 + c.wait_all("WaitingApproval", n, timeout=120 + 6.0 * n)
            parked_at, parked = time.monotonic(), meter.sample()
            # Let the last workers exit and their Pods settle, and Postgres count what the parking did: an
            # idle backend reports its transactions to the statistics up to 10 s later (bench/load.py).
            time.sleep(12)
            busy, busy_tx = meter.cpu_slices(window)
            settled: tuple[dict[str, list[float]], float, int] | None = None
            if settle > 0:  # idle polls at their longest, finished Pods gone (``run``)
                time.sleep(max(0.0, parked_at + settle - time.monotonic()))
                settled = (*meter.cpu_slices(window), c.pods()[1])
            kept = _stored(c)
            live, objects = c.pods()
            rss = cluster.rss_mb(pid)
            label = f"{n} runs parked on approval"
            resumed = _resume(label, c, meter, min(n, RESUME_AT_MOST))
        report.add(section, stats.Row(f"{label}: time to all parked", [reached], unit="s"))
        _idle_rows(report, section, label, "while all idle", busy, busy_tx, idle, idle_tx)
        if settled is not None:
            when = f"idle {settle / 60:.0f} min after the last parked"
            cpu, tx, pods = settled
            _idle_rows(report, section, label, when, cpu, tx, idle, idle_tx)
            report.add(section, stats.Row(f"{label}: Pod objects left {when}", [float(pods)], unit="pods"))
        for row in (load.cpu_per_run(before, parked, n), load.requests_per_run(before, parked, n)):
            report.add(section, dataclasses.replace(row, figure=f"{label}: until parked, {row.figure}"))
        report.add(section, stats.Row(f"{label}: operator RSS", [rss], unit="MB"))
        for row in stored.per_run(kept_before, kept, n, f"{label}: {'settled' if settle > 0 else 'parked'}"):
            report.add(section, row)
        report.add(
            section,
            stats.Row(
                f"{label}: Pods holding a process / Pod objects left",
                [float(live)],
                unit="pods",
                note=f"{objects} Pod objects",
            ),
        )
        for row in resumed:
            report.add(section, row)


def _resume(label: str, c: cluster.Cluster, meter: load.Meter, m: int) -> list[stats.Row]:
    """Approve ``m`` of the parked runs as a person would (``agentrun approve``'s client: read the run, then
    annotate it; 8 approvers at once) and time them until they have all succeeded (the graph ends after its
    approval: each resume is a new worker Pod, its attempt, and the operator's bookkeeping)."""
    from agentrun.client import Client

    client = Client(kubeconfig=c.approver(), namespace=c.namespace)
    names = [cluster.run_name(i) for i in range(m)]  # the first m create_runs made
    before, t0 = meter.sample(), time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(client.approve, names))
    sent = time.monotonic() - t0
    done = time.monotonic() - t0 + c.wait_all(api_status.SUCCEEDED, m, timeout=120 + 6.0 * m)
    after = meter.sample()
    client.api.close()  # type: ignore[no-untyped-call]
    what = f"{label}: {m} of them approved"
    rows = [
        stats.Row(
            f"{what}: approvals through the API server", [m / sent], unit="/s", note=f"{sent:.2f} s for all"
        ),
        stats.Row(f"{what}: from the first approval to all succeeded", [done], unit="s"),
        stats.Row(f"{what}: resumed and finished", [60.0 * m / done], unit="runs/min"),
    ]
    for row in (load.cpu_per_run(before, after, m), load.requests_per_run(before, after, m)):
        rows.append(dataclasses.replace(row, figure=f"{what}: approved to succeeded, {row.figure}"))
    return rows


def _idle_rows(
    report: stats.Report,
    section: str,
    label: str,
    when: str,
    cpu: dict[str, list[float]],
    tx: float,
    baseline: dict[str, list[float]],
    baseline_tx: float,
) -> None:
    """Each part's CPU and the database's transactions/s over the slices ``cpu`` / ``tx`` (taken ``when``)
    against the same before any run existed."""
    for part, name in (("operator", "operator CPU"), *load.LABELS.items()):
        report.add(
            section,
            stats.Row(f"{label}: {name} {when} vs with 0 runs", cpu[part], baseline[part], unit="%"),
        )
    report.add(
        section,
        stats.Row(
            f"{label}: Postgres transactions/s (this database) {when} vs with 0 runs",
            [tx],
            [baseline_tx],
            unit="/s",
        ),
    )


def active_case(report: stats.Report, section: str, n: int, steps: int) -> None:
    with db.fresh_database(f"p4a{n}") as dsn, cluster.Cluster(f"active{n}") as c:
        pid = c.start_operator(dsn)
        with load.meter(dsn, pid, c.api) as meter:
            before = meter.sample()
            t0 = time.monotonic()
            c.create_runs(n, f"bench.graphs:noop_{steps}")
            peak_live = 0
            while True:
                phases = c.phases()
                live, objects = c.pods()
                peak_live = max(peak_live, live)
                if phases.get("Succeeded", 0) >= n:
                    break
                if phases.get("Failed", 0):
                    raise RuntimeError(f"runs failed: {phases}; log: {c.log}")
                if time.monotonic() - t0 > 300 + 20.0 * n:
                    raise TimeoutError(f"{n} active runs not done: {phases}; log: {c.log}")
                time.sleep(1.0)
            elapsed = time.monotonic() - t0
            after = meter.sample()
        mean = load.cpu_percent(before, after)
        label = f"{n} concurrent runs of {steps} steps"
        report.add(section, stats.Row(f"{label}: time until all succeeded", [elapsed], unit="s"))
        report.add(section, stats.Row(f"{label}: throughput", [60.0 * n / elapsed], unit="runs/min"))
        report.add(
            section,
            stats.Row(
                f"{label}: peak Pods holding a process",
                [float(peak_live)],
                unit="pods",
                note=f"{objects} Pod objects left",
            ),
        )
        report.add(
            section,
            stats.Row(
                f"{label}: operator CPU (mean over the run), RSS",
                [mean["operator"]],
                unit="%",
                note=f"RSS {cluster.rss_mb(pid):.0f} MB",
            ),
        )
        for part, name in load.LABELS.items():
            report.add(section, stats.Row(f"{label}: {name} (mean over the run)", [mean[part]], unit="%"))
        report.add(
            section,
            stats.Row(
                f"{label}: Postgres transactions/s (this database, mean over the run)",
                [load.transactions_per_second(before, after)],
                unit="/s",
            ),
        )
        for row in (load.cpu_per_run(before, after, n), load.requests_per_run(before, after, n)):
            report.add(section, dataclasses.replace(row, figure=f"{label}: {row.figure}"))


def _counts(text: str | None, default: list[int]) -> list[int]:
    if not text:
        return default
    return [int(x) for x in text.split(",") if x.strip() and int(x) > 0]  # 0: none of that case


def waiting_case(
    report: stats.Report, section: str, n: int, window: float, settle: float, baseline_window: float
) -> None:
    """The operator's memory per waiting run, at sizes parking cannot reach in a sitting (a parked run's
    worker is a process start each: ~1 CPU-s): ``n`` runs created suspended are admitted and wait with no
    Pod, held by the operator as a parked run is (its AgentRun watched, its loop asleep). Its CPU is read
    ``settle`` s after the last was admitted (the idle polls at their longest), over ``window`` s: runs
    admitted together poll together, so a window shorter than their poll can fall between two polls."""
    with db.fresh_database(f"p4w{n}") as dsn, cluster.Cluster(f"waiting{n}") as c:
        pid = c.start_operator(dsn)
        time.sleep(5)  # the operator's own start settles (imports, first lists)
        with load.meter(dsn, pid, c.api) as meter:
            idle, idle_tx = meter.cpu_slices(baseline_window, slices=1)
            before = cluster.rss_mb(pid)
            t0 = time.monotonic()
            with concurrent.futures.ThreadPoolExecutor(8) as pool:
                spec = {"graph": "bench.graphs:park", "input": {}, "suspend": True}
                list(pool.map(lambda i: c.create_run(f"r{i:05d}", spec), range(n)))
            c.wait_all(api_status.SUSPENDED, n, timeout=120 + 2.0 * n)
            admitted = time.monotonic() - t0  # before the namespace's teardown: minutes at 10,000
            after = cluster.rss_mb(pid)
            time.sleep(settle)
            cpu, tx = meter.cpu_slices(window, slices=1)  # the mean: the polls come in bursts
            settled = cluster.rss_mb(pid)
    label = f"{n} runs waiting suspended (admitted, no Pod)"
    rows = [
        stats.Row(f"{label}: time to all admitted and waiting", [admitted], unit="s"),
        stats.Row(f"{label}: operator RSS", [after], unit="MB", note=f"{before:.0f} MB with 0 runs"),
        stats.Row(f"{label}: operator memory per waiting run", [(after - before) * 1024 / n], unit="KiB"),
    ]
    for row in rows:
        report.add(section, row)
    when = f"over {window / 60:.0f} min from {settle / 60:.1f} min after the last admitted"
    later = f"{(settle + window) / 60:.1f} min after the last admitted"
    report.add(section, stats.Row(f"{label}: operator RSS {later}", [settled], unit="MB"))
    _idle_rows(report, section, label, when, cpu, tx, idle, idle_tx)
    # Each quiet waiting run's fallback poll is one round and one Postgres transaction: what one costs the
    # operator, so the idle CPU at any number of runs is (runs / AGENTRUN_IDLE_POLL_MAX_SECONDS) x this.
    rounds = tx - idle_tx
    if rounds > 0:
        per_round = (cpu["operator"][0] - idle["operator"][0]) * 10.0 / rounds  # % of a core -> ms per s
        report.add(section, stats.Row(f"{label}: operator CPU per idle round {when}", [per_round], unit="ms"))


def run(
    report: stats.Report,
    *,
    quick: bool,
    reps: int,
    parked: str | None = None,
    active: str | None = None,
    waiting: str | None = None,
) -> None:
    section = "P4 scale: parked and concurrent runs with a real operator"
    report.section(section)
    window = 5.0 if quick else 30.0
    # Measured once more when the parked runs cost only what waiting costs: the operator's idle poll of a
    # quiet waiting run has doubled from 30 s towards its longest (AGENTRUN_IDLE_POLL_MAX_SECONDS), and
    # the finished Pods its parking left are gone (kept for their logs: until then their deletions, and the
    # wake-ups they bring, are what the operator mostly does).
    reconcile_defaults = operator_settings.ReconcileSettings
    settle = 0.0 if quick else 60.0 + reconcile_defaults.finished_pod_retention_seconds
    for n in _counts(parked, [3] if quick else [50, 200, 1000]):
        parked_case(report, section, n, window, settle)
    for n in _counts(active, [2] if quick else [10, 25, 50, 100]):
        active_case(report, section, n, 10)
    # A waiting run's idle poll doubles up to its longest, which it reaches less than twice that after its
    # last change (30 + 60 + ... + 480 < 2 x 600 s); its CPU is then read over one whole poll period.
    longest = reconcile_defaults.idle_poll_max_seconds
    waiting_settle, waiting_window = (0.0, window) if quick else (2.0 * longest, longest)
    for n in _counts(waiting, [3] if quick else []):
        waiting_case(report, section, n, waiting_window, waiting_settle, window)
