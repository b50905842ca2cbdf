"""P3's eviction case on the dev cluster's local pod runtime, timed from Postgres: the worker Pod deleted
mid-run, then when attempt 1 recorded its end, attempt 2's Pod was created and its first step started (the
database's clock for all three, so no clock skew between processes)."""

from __future__ import annotations

import time

import psycopg

from bench import cluster, db, stats


def attempt_times(dsn: str, run_id: str) -> dict[str, float]:
    """Unix times: attempt 1 ended, attempt 2 row written (Pod created), attempt 2's first step started."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT (SELECT extract(epoch FROM ended_at) FROM agentrun_attempts"
            "   WHERE run_id = %(r)s AND attempt = 1),"
            " (SELECT extract(epoch FROM started_at) FROM agentrun_attempts"
            "   WHERE run_id = %(r)s AND attempt = 2),"
            " (SELECT extract(epoch FROM min(started_at)) FROM agentrun_step_events"
            "   WHERE run_id = %(r)s AND attempt = 2)",
            {"r": run_id},
        ).fetchone()
    assert row is not None
    return {
        k: float(v) for k, v in zip(("ended", "created", "first_step"), row, strict=True) if v is not None
    }


def resume_case(report: stats.Report, section: str, reps: int, force: bool) -> None:
    """Delete the worker Pod mid-run (gracefully: it drains and releases; force: SIGKILL, the Lease stays)
    and time the next attempt's phases from Postgres (same machine, same clock)."""
    kind = "killed (grace 0)" if force else "evicted (graceful)"
    with db.fresh_database("p3r") as dsn, cluster.Cluster("kill" if force else "evict") as c:
        c.start_operator(dsn)
        phases: dict[str, list[float]] = {"ended": [], "created": [], "first_step": []}
        for rep in range(reps):
            name = f"r{rep:04d}"
            spec = {"graph": "bench.graphs:slow_40", "input": {}, "retry": {"backoffSeconds": 0}}
            run_id = c.create_run(name, spec)
            _wait_step(dsn, run_id, attempt=1, timeout=180)
            t0 = time.time()
            c.core.delete_namespaced_pod(f"{name}-1", c.namespace, grace_period_seconds=0 if force else None)
            deadline = time.monotonic() + 180
            while "first_step" not in (times := attempt_times(dsn, run_id)):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"attempt 2 of {name} never ran a step; log: {c.log}")
                time.sleep(0.2)
            phases["ended"].append(times.get("ended", t0) - t0)
            phases["created"].append(times["created"] - t0)
            phases["first_step"].append(times["first_step"] - t0)
    report.add(section, stats.Row(f"Pod {kind} → attempt 1 recorded its end", phases["ended"], unit="s"))
    report.add(
        section, stats.Row(f"Pod {kind} → operator created attempt 2's Pod", phases["created"], unit="s")
    )
    report.add(section, stats.Row(f"Pod {kind} → attempt 2's first step", phases["first_step"], unit="s"))


def _wait_step(dsn: str, run_id: str, attempt: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT count(*) FROM agentrun_step_events WHERE run_id = %s AND attempt = %s",
                (run_id, attempt),
            ).fetchone()
            if row and row[0] >= 2:
                return
            time.sleep(0.2)
    raise TimeoutError(f"run {run_id} attempt {attempt} ran no step within {timeout:.0f}s")
