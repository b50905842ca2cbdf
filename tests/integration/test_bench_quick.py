"""CI runs the benchmark suite in ``--quick`` mode so the scripts never rot: it asserts they run and print
every figure with its baseline, never their numbers (a loaded CI machine makes numbers meaningless)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentrun_dev import postgres
from agentrun_dev import settings as dev_settings

REPO = Path(__file__).resolve().parents[2]

# serial: the benchmarks load the machine (P4 starts runs by the dozen) and read every part's CPU: beside
# other tests they would slow those past their deadlines (scripts/test runs it alone, after the rest).
pytestmark = pytest.mark.serial


def _bench(tmp_path: Path, *which: str) -> tuple[str, list[dict[str, Any]]]:
    out = tmp_path / "figures.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "agentrun.cli", "bench", *which, "--quick", "--reps", "1", "--json", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-8000:]
    return proc.stdout, [json.loads(line) for line in out.read_text().splitlines()]


@pytest.mark.slow
def test_quick_p1_p2_p3_p5_p7_print_every_figure_with_its_baseline(
    dev_postgres: Any, tmp_path: Path
) -> None:
    stdout, rows = _bench(tmp_path, "p1", "p2", "p3", "p5", "p7")
    for section in ("== P1", "== P2", "== P3", "== P5", "== P7"):
        assert section in stdout, stdout
    sections = {r["section"][:2] for r in rows}
    assert sections == {"P1", "P2", "P3", "P5", "P7"}, sections
    # P7: a create_agent turn through the worker against the same agent on bare LangGraph, and against the
    # ledger's floor (bare + a raw INSERT/UPDATE pair per tool call), measured in the same run.
    p7 = [r for r in rows if r["section"].startswith("P7")]
    assert len(p7) == 4 and all(r["baseline_median"] is not None and r["ratio"] is not None for r in p7), p7
    p1 = [r for r in rows if r["section"].startswith("P1")]
    # Every P1 figure has its bare-PostgresSaver baseline and a ratio, measured in the same run.
    assert p1 and all(r["baseline_median"] is not None and r["ratio"] is not None for r in p1), p1
    # The steps with an effect against the ledger's floor (bare steps each making a raw INSERT + UPDATE
    # pair), on both servers, and that floor against bare.
    floor = [r["figure"] for r in p1 if "bare + raw pair" in r["figure"]]
    assert any("durable server" in f for f in floor) and any("pair vs bare" in f for f in floor), floor
    # P5's DeltaChannel chat (bench/p5_delta.py): bytes per turn and resume, the long chat against the short
    # one, and against bare PostgresSaver's add_messages chat, in the same run.
    delta = [r for r in rows if r["section"].startswith("P5 DeltaChannel")]
    assert len(delta) == 7 and all(r["baseline_median"] is not None for r in delta), delta
    trips = next(r for r in rows if r["figure"].startswith("round trips per new effect"))
    assert trips["median"] > 0
    # The worker's own work per effect (the ledger's statements answered in process) against the whole effect:
    # without the round trips it is less.
    own = next(r for r in rows if "the worker's own work" in r["figure"])
    assert 0 < own["median"] < own["baseline_median"], own
    # P1 and P2 are measured once more on the durable server (every commit flushed; ensure_durable checks the
    # server's settings), with their baselines on it; the benchmark stops that server when done.
    for section in ("P1", "P2"):
        durable = [r for r in rows if r["section"].startswith(section) and "durable server" in r["figure"]]
        assert durable and all(r["baseline_median"] is not None for r in durable), (section, durable)
    assert not postgres.healthy(postgres.durable(dev_settings.from_env()))
    # Retention leaves nothing of a finished run in any table with a run id: a behaviour, not a number.
    purged = next(r for r in rows if "rows left after retention" in r["figure"])
    assert purged["median"] == 0, purged


@pytest.mark.slow
def test_quick_p4_runs_an_operator_with_parked_and_active_runs(dev_cluster: Any, tmp_path: Path) -> None:
    stdout, rows = _bench(tmp_path, "p4")
    assert "== P4" in stdout, stdout
    figures = " | ".join(r["figure"] for r in rows)
    assert "parked on approval: operator CPU" in figures and "throughput" in figures, figures
    held = next(r for r in rows if "Pods holding a process" in r["figure"] and "parked" in r["figure"])
    assert held["median"] == 0, held  # parked runs hold no Pod: a behaviour, not a number
    # The load on every part is measured, and what a run cost reaches the parts that did the work: the
    # workers' processes (children of the pod runtime) and the API server used CPU, the database ran
    # transactions.
    for part in ("API server CPU", "Postgres CPU", "worker Pods CPU", "Postgres transactions/s"):
        for case in ("parked on approval", "concurrent runs"):
            assert any(case in r["figure"] and part in r["figure"] for r in rows), (case, part, figures)
    for cost in (r for r in rows if "CPU-seconds per run" in r["figure"]):
        parts = dict(item.rsplit(" ", 1) for item in cost["note"].split(";")[0].split(", "))
        assert float(parts["pods"]) > 0 and float(parts["api server"]) > 0, cost
        assert float(cost["note"].split("; ")[1].split()[0]) > 0, cost  # transactions per run
    for writes in (r for r in rows if "API writes per run" in r["figure"]):
        assert writes["median"] >= 2, writes  # at least the AgentRun created and its worker Pod
    # What the cluster stores per parked run is counted in the run's namespace: its AgentRun and its Lease
    # (its finished Pod too, in quick mode: kept for its logs until the retention).
    kept = next(r for r in rows if "API objects stored per run" in r["figure"])
    assert "agentruns 1.00" in kept["note"] and "leases 1.00" in kept["note"], kept
    size = next(r for r in rows if "bytes stored per run, as JSON" in r["figure"])
    assert size["median"] > 0 and "agentruns" in size["note"], size
    # The parked runs, approved through the API server as a person would, all resumed and succeeded (the
    # bench waits for every one, else fails): the approvals' rate and the resumes' cost are reported.
    approvals = next(r for r in rows if "approvals through the API server" in r["figure"])
    assert approvals["median"] > 0, approvals
    resumed = next(r for r in rows if "approved to succeeded, CPU-seconds per run" in r["figure"])
    assert "pods" in resumed["note"], resumed  # a new attempt's worker Pod did the resuming
