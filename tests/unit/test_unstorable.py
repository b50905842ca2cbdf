"""A spec Postgres refuses to store (issue 35, item 7): never admitted, Failed with reason Unstorable, and a
Warning, decided once; a later reconcile keeps it so without trying again. Pure (reconcile.decide and the
runner's handling of a refused admission)."""

from __future__ import annotations

from agent_operator.decide import actions, reconcile
from agent_operator.serve import runner
from agentrun_core.api import status as api_status
from tests.unit.reconcile_world import world


def _failed(status: dict[str, object]) -> dict[str, object]:
    return next(c for c in status["conditions"] if c["type"] == "Failed")  # type: ignore[attr-defined]


def test_an_unstorable_spec_is_refused_before_admission_once() -> None:
    why = "spec.approval cannot be stored in Postgres: unsupported Unicode escape sequence"
    plan = reconcile.decide(world(db=None, unstorable=why))
    assert not [a for a in plan.actions if isinstance(a, actions.Admit)]
    assert plan.status is not None and plan.status["phase"] == "Failed"
    assert _failed(plan.status)["reason"] == api_status.UNSTORABLE and plan.status["message"] == why
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", api_status.UNSTORABLE)]
    again = reconcile.decide(world(db=None, unstorable=why, status=plan.status))
    assert not [a for a in again.actions if isinstance(a, actions.Admit)] and not again.events
    assert again.status is None or _failed(again.status)["reason"] == api_status.UNSTORABLE


def test_a_refused_admission_fails_the_run_instead_of_the_reconcile() -> None:
    """What the runner does when the Admit action raises ``execute.Unstorable`` (Postgres refused the row);
    the next reconcile finds it Failed and does not admit it again."""
    w = world(db=None)
    plan = reconcile.decide(w)
    assert any(isinstance(a, actions.Admit) for a in plan.actions)
    runner._failed_unstorable(w, plan, "the spec cannot be stored in Postgres: ...")
    assert plan.actions == [] and [e.reason for e in plan.events] == [api_status.UNSTORABLE]
    assert plan.status is not None and _failed(plan.status)["reason"] == api_status.UNSTORABLE
    later = reconcile.decide(world(db=None, status=plan.status))
    assert not [a for a in later.actions if isinstance(a, actions.Admit)]
    assert later.status is None or later.status["phase"] == "Failed"
