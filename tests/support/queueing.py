"""Runs held in the operator's start queue: started together, one of them seen queued, all finished once.

The operator restarted with ``IDLE_POLL``: a queued run looks again only at the idle poll unless a freed slot
wakes it, and a poll this long makes a test fail if the wake-up does not work.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes

from tests.support.kube import create_run, run_status
from tests.support.operator_proc import OperatorHandle
from tests.support.specs import STEPS
from tests.support.waiting import wait_for, wait_phase

IDLE_POLL = {"AGENTRUN_IDLE_POLL_SECONDS": "600"}


def start_steps(
    api: kubernetes.client.ApiClient, ns: str, out: Path, names: list[str], pause: float, **fields: Any
) -> None:
    """A ``steps`` run per name, appending to ``out/<name>``, pausing ``pause`` s in ``prepare``."""
    for name in names:
        input_ = {"path": str(out / name), "pause": {"prepare": pause}}
        create_run(api, ns, name, {"graph": STEPS, "input": input_, **fields})


def wait_queued(
    api: kubernetes.client.ApiClient, operator: OperatorHandle, names: list[str], says: str, what: str
) -> None:
    """Until one of the runs' status message says ``says`` (what holds it)."""

    def one_says() -> bool:
        return any(says in (run_status(api, operator.namespace, n).get("message") or "") for n in names)

    wait_for(one_says, 60, what, on_timeout=operator.logs)


def all_succeed_once(
    api: kubernetes.client.ApiClient, operator: OperatorHandle, out: Path, names: list[str]
) -> None:
    """Every run Succeeded, its effect performed once (one line in ``out/<name>``): none ran twice for the
    queue."""
    for name in names:
        wait_phase(api, operator.namespace, name, "Succeeded", 300, operator)
    for name in names:
        assert len((out / name).read_text().splitlines()) == 1, name
