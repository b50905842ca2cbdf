"""P3: a worker attempt's cold start and exit, broken into phases, and its import time.

Each repetition starts ``agentrun worker`` as a fresh process (as a Pod would) on a newly admitted one-step
run, with a real Lease on the dev cluster's API server when it is up (else ``AGENTRUN_LEASE_MODE=none``),
and timestamps: spawn → Lease acquired (interpreter, imports, admission read, Lease) → first step starts
(claim, attempt row, checkpoint read, compile) → last step ends → Lease released (finish, release) → process
gone (interpreter teardown). Import times are separate processes, alternated: ``python -c pass``, the
LangGraph floor (``langgraph.graph`` + ``PostgresSaver`` + ``psycopg_pool``: any LangGraph worker pays it),
and everything ``agentrun worker`` imports before its first step.

With the dev cluster up it also times the whole resume path: a run of 0.2 s steps, its Pod deleted mid-run
(gracefully: the worker drains at the step boundary and releases its Lease), phases read from Postgres:
attempt 1's end, attempt 2's row (the operator created its Pod), attempt 2's first step.
"""

from __future__ import annotations

import datetime
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg_pool

from agentrun_core import store
from bench import db, p3_real_node, stats

WORKER_IMPORTS = "import agent_worker.main, agent_worker.runner, agentrun_core.lease, bench.graphs"
_LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*lease \S+ (acquired|released) by")
REPO = Path(__file__).resolve().parents[1]


def _spawn_seconds(code: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    return time.perf_counter() - t0


def _kubeconfig() -> str | None:
    """The dev cluster's admin kubeconfig when its API server answers, else None (no Lease)."""
    try:
        from agentrun_dev import cluster

        handle = cluster.handle()
        import kubernetes

        api = db.kube_api(str(handle.kubeconfig))
        kubernetes.client.VersionApi(api).get_code(_request_timeout=3)
        api.close()
        return str(handle.kubeconfig)
    except Exception:
        return None


def _worker_command() -> list[str]:
    exe = shutil.which("agentrun", path=str(Path(sys.executable).parent)) or shutil.which("agentrun")
    return [exe, "worker"] if exe else [sys.executable, "-m", "agent_worker.main"]


def _log_time(text: str) -> float:
    local = datetime.datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f")
    return local.timestamp()


def attempt(dsn: str, kubeconfig: str | None) -> dict[str, float]:
    run_id = str(uuid.uuid4())
    name = f"bench-{run_id[:8]}"
    with psycopg_pool.ConnectionPool(dsn, min_size=1, max_size=1, kwargs={"autocommit": True}) as p:
        store.admit_run(
            p,
            run_id=run_id,
            namespace="default",
            name=name,
            graph="bench.graphs:noop_1",
            input={},
            spec_hash="bench",
        )
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "AGENTRUN_BENCH_MARKS": "1",
        "AGENTRUN_RUN_ID": run_id,
        "AGENTRUN_RUN_NAME": name,
        "AGENTRUN_NAMESPACE": "default",
        "AGENTRUN_POD_NAME": name,
        "AGENTRUN_DSN": dsn,
        "AGENTRUN_LEASE_OWNER": "false",
        "AGENTRUN_LEASE_MODE": "kube" if kubeconfig else "none",
    }
    if kubeconfig:
        env["KUBECONFIG"] = kubeconfig
    t0 = time.time()
    proc = subprocess.run(_worker_command(), env=env, capture_output=True, text=True, timeout=120)
    t_exit = time.time()
    if proc.returncode != 0:
        raise RuntimeError(f"worker exited {proc.returncode}: {proc.stderr[-2000:]}")
    marks: dict[str, float] = {}
    for line in proc.stderr.splitlines():
        if line.startswith("BENCH_MARK "):
            _, label, at = line.split()
            marks.setdefault(label, float(at))
            if label == "end":
                marks["end"] = float(at)
        else:
            m = _LOG_TIME.match(line)
            if m:
                marks[m.group(2)] = _log_time(m.group(1))
    start, end = marks["start"], marks["end"]
    acquired = marks.get("acquired", start)
    released = marks.get("released", end)
    if kubeconfig:
        _delete_lease(kubeconfig, f"agentrun-{name}")
    return {
        "to_lease": acquired - t0,
        "lease_to_first_step": start - acquired,
        "to_first_step": start - t0,
        "last_step_to_released": released - end,
        "released_to_exit": t_exit - released,
        "after_last_step": t_exit - end,
        "total": t_exit - t0,
    }


def _delete_lease(kubeconfig: str, name: str) -> None:
    import kubernetes

    api = db.kube_api(kubeconfig)
    try:
        kubernetes.client.CoordinationV1Api(api).delete_namespaced_lease(name, "default")
    except kubernetes.client.ApiException:
        pass
    finally:
        api.close()


def run(report: stats.Report, *, quick: bool, reps: int) -> None:
    section = "P3 worker cold start and exit (a fresh `agentrun worker` process, one-step run)"
    report.section(section)
    res: dict[str, list[Any]] = stats.alternate(
        {
            "pass": lambda: _spawn_seconds("pass"),
            "floor": lambda: _spawn_seconds(p3_real_node.FLOOR_IMPORTS),
            "worker": lambda: _spawn_seconds(WORKER_IMPORTS),
        },
        reps,
    )
    ms = {k: [1000 * v for v in vals] for k, vals in res.items()}
    report.add(
        section,
        stats.Row("process start + worker imports vs + LangGraph floor imports", ms["worker"], ms["floor"]),
    )
    report.add(
        section, stats.Row("process start + LangGraph floor vs `python -c pass`", ms["floor"], ms["pass"])
    )
    kubeconfig = _kubeconfig()
    report.note(
        "Lease: real, on the dev cluster's API server"
        if kubeconfig
        else "Lease: none (dev cluster not up; AGENTRUN_LEASE_MODE=none)"
    )
    with db.fresh_database("p3") as dsn:
        attempt(dsn, kubeconfig)  # warm
        runs = [attempt(dsn, kubeconfig) for _ in range(reps)]
    phases = [
        ("spawn → Lease acquired (interpreter, imports, admission read)", "to_lease"),
        ("Lease acquired → first step starts (claim, checkpoint read)", "lease_to_first_step"),
        ("spawn → first step starts", "to_first_step"),
        ("last step ends → Lease released (finish, release)", "last_step_to_released"),
        ("Lease released → process gone (teardown)", "released_to_exit"),
        ("last step ends → process gone", "after_last_step"),
        ("whole one-step attempt, spawn → exit", "total"),
    ]
    for label, key in phases:
        report.add(section, stats.Row(label, [1000 * r[key] for r in runs]))
    if kubeconfig:
        from bench import resume

        section = "P3 resume after Pod loss, through the operator and the pod runtime (seconds)"
        report.section(section)
        resume.resume_case(report, section, reps, force=False)
        # A SIGKILLed worker's successor also waits for the old Lease to expire (spec.lease.durationSeconds);
        # deleting a Pod with grace 0 does not show it here: the local pod runtime lets the process finish.
    else:
        report.note("resume after Pod loss: skipped (needs the dev cluster: agentrun dev up)")
    p3_real_node.run(report, quick=quick, reps=reps)  # skipped, saying why, without the real node
