"""A run whose status shows it was admitted is never admitted again (issue 34, item 4): with its rows gone
from Postgres it gets the LedgerMissing condition and one Event, and nothing else is planned."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from agent_operator.act import retention
from agent_operator.decide import actions, reconcile, walk
from tests.unit.reconcile_world import NOW, pod, world


def _succeeded() -> dict[str, Any]:
    done = reconcile.decide(world(db="succeeded", status={"attempts": 1}, pods=[pod(phase="Succeeded")]))
    assert done.status is not None and done.status["phase"] == "Succeeded"
    return done.status


@pytest.mark.parametrize(
    "status",
    [
        {"attempts": 1},
        {"phase": "Succeeded"},
        {"phase": "Cancelled"},
        {"phase": "Running"},
        {"phase": "Pending", "conditions": [{"type": "Admitted", "status": "True"}]},
    ],
)
def test_any_field_that_proves_admission_counts(status: dict[str, Any]) -> None:
    assert walk.shows_admission(status)


@pytest.mark.parametrize(
    "status",
    [
        {},
        {"phase": "Pending", "conditions": [{"type": "Admitted", "status": "False"}]},
        {"phase": "Failed", "attempts": 0},  # a spec refused before admission
    ],
)
def test_a_run_never_admitted_is_admitted(status: dict[str, Any]) -> None:
    assert not walk.shows_admission(status)
    plan = reconcile.decide(world(db=None, status=status))
    assert any(isinstance(a, actions.Admit) for a in plan.actions) or (status.get("phase") == "Failed")


def test_a_succeeded_run_without_rows_is_not_admitted_again() -> None:
    status = _succeeded()
    plan = reconcile.decide(world(db=None, status=status, pods=[pod(phase="Succeeded")]))
    assert not [a for a in plan.actions if isinstance(a, actions.Admit | actions.CreatePod)], plan.actions
    assert plan.status is not None and plan.status["phase"] == "Succeeded"
    conditions = {c["type"]: c for c in plan.status["conditions"]}
    assert conditions["LedgerMissing"]["status"] == "True"
    assert conditions["Admitted"]["status"] == "True"  # the proof stays: the next pass decides the same
    assert [e.reason for e in plan.events] == ["LedgerMissing"]

    # The next pass: the same status, no second Event, still nothing planned.
    again = reconcile.decide(world(db=None, status=plan.status, pods=[pod(phase="Succeeded")]))
    assert not [a for a in again.actions if isinstance(a, actions.Admit | actions.CreatePod)]
    assert again.events == [] and again.status == plan.status


def test_a_running_run_without_rows_starts_nothing() -> None:
    plan = reconcile.decide(world(db=None, status={"phase": "Running", "attempts": 2}))
    assert not [a for a in plan.actions if isinstance(a, actions.Admit | actions.CreatePod)]
    assert plan.status is not None and plan.status["phase"] == "Running"


def test_deleting_an_admitted_run_without_rows_lets_it_go() -> None:
    plan = reconcile.decide(world(db=None, status=_succeeded(), deleting=True))
    assert plan.done and not [a for a in plan.actions if isinstance(a, actions.Admit)]


def test_purge_delay_ttl_at_once_any_other_delete_after_retention() -> None:
    ttl = {"spec": {"ttlSecondsAfterFinished": 60}, "status": {"phase": "Running"}}  # status not written yet
    later = NOW + datetime.timedelta(seconds=120)
    assert retention.purge_delay(ttl, NOW, later, 3600) == (0.0, "ttl")  # Postgres' finished_at and now()
    # The same run deleted by hand long before its TTL passed.
    assert retention.purge_delay(ttl, NOW, NOW + datetime.timedelta(seconds=1), 3600) == (3600, "deleted")
    assert retention.purge_delay({"spec": {}}, NOW, later, 3600) == (3600, "deleted")  # no TTL
    assert retention.purge_delay(ttl, None, later, 3600) == (3600, "deleted")  # never finished
    # A finish only the operator recorded (attempts exhausted): its completionTime.
    decided = {
        "spec": {"ttlSecondsAfterFinished": 0},
        "status": {"phase": "Failed", "completionTime": "2026-01-01T12:00:00Z"},
    }
    assert retention.purge_delay(decided, None, later, 3600) == (0.0, "ttl")
