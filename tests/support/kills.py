"""One repetition of a chaos test: a fresh run killed once at one fault point, then driven to its end.

Every chaos module draws a repetition alike: a durability mode in which the point can fire, one of the point's
hit numbers, then worker processes (``worker_harness.drive``) until one finishes the run.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tests.support import worker_harness


def durability_for(rng: random.Random, point: str) -> str:
    # exit saves nothing mid-run: no task writes are saved for after_task_writes to fire on
    return rng.choice(["sync", "async"] if point == "after_task_writes" else ["sync", "async", "exit"])


@dataclasses.dataclass(frozen=True)
class Plan:
    """How a chaos module kills its runs: the hit numbers each fault point may fire at, the worker processes
    one run may take at most, whether a replacement often reuses a dead Pod's name (three in four take
    ``<run>-p0``), whether one that fenced itself is followed by another, whether parked runs are approved."""

    hits: Mapping[str, Sequence[int]]
    processes: int
    reuse_pods: bool
    fenced_ok: bool = True
    approve: bool = False

    def kill_once(
        self,
        worker: worker_harness.Worker,
        rng: random.Random,
        run_id: str,
        point: str,
        graph: str,
        jitter: Callable[[], str],
        **input_: Any,
    ) -> dict[str, Any]:
        """Admit ``run_id`` (``graph`` with ``input_``) in a durability mode drawn for ``point``, drive it
        with the fault ``point@<hit>`` (each process sleeping ``jitter()`` ms in places): what happened, as
        ``worker_harness.finished_runs`` reads it."""
        mode = durability_for(rng, point)
        fault = f"{point}@{rng.choice(self.hits[point])}"
        worker_harness.admit(worker.dsn, run_id, graph=graph, durability=mode, **input_)

        def pod(attempt: int) -> str:
            return f"{run_id}-p{attempt if not self.reuse_pods or rng.random() < 0.25 else 0}"

        done = worker_harness.drive(
            worker,
            run_id,
            fault,
            processes=self.processes,
            pod=pod,
            env=lambda killed: {"AGENTRUN_TEST_JITTER_MS": jitter()},
            fenced_ok=self.fenced_ok,
            approve=self.approve,
            what=f"{run_id} ({fault}, {mode})",
        )
        return {
            "run_id": run_id,
            "fault": fault,
            "mode": mode,
            "killed": done.killed,
            "processes": done.processes,
        }
