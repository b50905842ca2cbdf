"""When the operator looks at a run again: idle runs (parked, finished) after the idle poll, not every 2 s.

Before, ``Plan.soon`` could only lower the requeue from its start value (the active poll), so every parked
and finished run was reconciled every ~2 s: at 1,000 parked runs the operator used ~90 % of a core.
"""

from __future__ import annotations

import dataclasses
import datetime

import pytest

from agent_operator import settings
from agent_operator.decide import actions, cleanup, model, reconcile
from agentrun_core import store
from agentrun_core.api import protocol
from tests.support import rowmaker
from tests.unit.reconcile_world import NOW, parked, pod, world

ACTIVE, IDLE = 2.0, 30.0
POLLS = settings.ReconcileSettings(poll_seconds=ACTIVE, idle_poll_seconds=IDLE, idle_poll_max_seconds=300.0)


def pending(seconds: float) -> store.Approval:
    return rowmaker.approval(
        approval_id="a-111111111111",
        status="pending",
        prompt={"q": "send?"},
        deadline=NOW + datetime.timedelta(seconds=seconds),
    )


def test_the_first_ask_replaces_the_default_and_later_asks_only_lower_it() -> None:
    plan = actions.Plan(requeue_after=ACTIVE)
    assert plan.requeue_after == ACTIVE  # nothing asked: the default
    plan.soon(IDLE)
    assert plan.requeue_after == IDLE
    plan.soon(10.0)
    assert plan.requeue_after == 10.0
    plan.soon(20.0)
    assert plan.requeue_after == 10.0
    plan.soon(-1.0)
    assert plan.requeue_after == 0.0


def _parked(status: dict[str, object], deadline: float = 86400) -> model.World:
    return parked(
        pending(deadline), status=status, pods=[pod(phase="Failed", exit_code=protocol.EXIT_PARKED)]
    )


WAITING = {"attempts": 1, "phase": "WaitingApproval"}


def _finished(status: dict[str, object], spec: dict[str, object] | None = None) -> model.World:
    return world(db="succeeded", status=status, pods=[pod(phase="Succeeded")], spec=spec)


@pytest.mark.parametrize(
    ("w", "phase"),
    [(_parked(WAITING), "WaitingApproval"), (_finished({"attempts": 1, "phase": "Running"}), "Succeeded")],
    ids=["parked", "finished"],
)
def test_an_idle_run_is_looked_at_after_the_idle_poll(w: model.World, phase: str) -> None:
    plan = reconcile.decide(w, POLLS)
    assert plan.status is not None and plan.status["phase"] == phase
    assert plan.requeue_after == IDLE


@pytest.mark.parametrize(
    ("w", "due"),
    [
        (_parked(WAITING, deadline=7), 7.0),  # the approval's near deadline
        (  # the ttl after it finished
            _finished(
                {"attempts": 1, "phase": "Succeeded", "completionTime": "2026-01-01T11:59:55Z"},
                spec={"ttlSecondsAfterFinished": 10},
            ),
            5.0,
        ),
    ],
    ids=["parked-near-deadline", "finished-with-ttl"],
)
def test_an_idle_run_with_a_time_of_its_own_is_looked_at_then(w: model.World, due: float) -> None:
    assert reconcile.decide(w, POLLS).requeue_after == due


def test_a_running_run_keeps_the_active_poll() -> None:
    w = world(db="running", status={"attempts": 1}, pods=[pod(phase="Running")])
    assert reconcile.decide(w, POLLS).requeue_after == ACTIVE


# --- a waiting run that stays quiet is looked at less and less often ----------------------------------------

CAP = 300.0  # AGENTRUN_IDLE_POLL_MAX_SECONDS as these tests set it


def _settled(w: model.World, rounds: int) -> tuple[actions.Plan, int]:
    """One reconcile as the runner ends it: count the quiet round, stretch the idle look."""
    plan = reconcile.decide(w, POLLS)
    rounds = rounds + 1 if reconcile.quiet(w, plan) else 0
    plan.stretch_idle(rounds, CAP)
    return plan, rounds


def test_a_parked_run_that_stays_quiet_is_looked_at_after_doubling_idle_polls_up_to_the_cap() -> None:
    first, rounds = _settled(_parked({"attempts": 1, "phase": "Running"}), 0)
    assert rounds == 0 and first.requeue_after == IDLE  # the round that parked it changed its status
    assert first.status is not None
    waiting = _parked(first.status)  # the next rounds see the status it wrote
    looks = []
    for _ in range(6):
        plan, rounds = _settled(waiting, rounds)
        looks.append(plan.requeue_after)
    assert looks == [60.0, 120.0, 240.0, CAP, CAP, CAP]


def test_a_deadline_of_its_own_still_wins_over_the_stretched_look() -> None:
    first = reconcile.decide(_parked({"attempts": 1, "phase": "Running"}, deadline=100), POLLS)
    assert first.status is not None
    plan, rounds = _settled(_parked(first.status, deadline=100), 5)
    assert rounds == 6 and plan.requeue_after == 100.0  # the approval deadline, not 300 s


def test_a_round_that_changes_something_starts_over_at_the_idle_poll() -> None:
    first = reconcile.decide(_parked({"attempts": 1, "phase": "Running"}), POLLS)
    assert first.status is not None
    changed = {**first.status, "message": "an older message"}  # e.g. a status another writer changed
    plan, rounds = _settled(_parked(changed), 7)
    assert rounds == 0 and plan.requeue_after == IDLE


def test_deleting_a_waiting_runs_pod_after_the_retention_does_not_start_over() -> None:
    """Housekeeping, not a change: the run waits as before (its Pod's deletion wakes it anyway)."""
    first = reconcile.decide(_parked({"attempts": 1, "phase": "Running"}), POLLS)
    assert first.status is not None
    due = dataclasses.replace(_parked(first.status), pods_terminated_for={1: 600.0})
    plan = reconcile.decide(due, POLLS)
    cleanup.finished_pods(due, plan, 600)
    assert [type(a) for a in plan.actions] == [actions.CleanupPod]
    assert reconcile.quiet(due, plan)
    plan.actions.append(actions.DeletePod("r-1", "another action"))
    assert not reconcile.quiet(due, plan)


def test_an_active_run_is_never_stretched() -> None:
    w = world(db="running", status={"attempts": 1}, pods=[pod(phase="Running")])
    plan = reconcile.decide(w, POLLS)
    assert not reconcile.quiet(w, plan)
    plan.stretch_idle(10, CAP)
    assert plan.requeue_after == ACTIVE


def test_stretching_never_shortens_an_idle_poll_set_above_the_cap() -> None:
    plan = actions.Plan(requeue_after=ACTIVE)
    plan.idle(600.0)
    plan.stretch_idle(3, CAP)
    assert plan.requeue_after == 600.0


def test_a_run_refusing_decisions_for_want_of_the_admission_policies_keeps_the_plain_idle_poll() -> None:
    """Their return is no event of the run: only a look sees it (test_approval_safety: the condition goes
    back to False within the idle poll)."""
    first = reconcile.decide(_parked({"attempts": 1, "phase": "Running"}), POLLS)
    assert first.status is not None
    no_policies = dataclasses.replace(_parked(first.status), admission_ok=False)
    missing = reconcile.decide(no_policies, POLLS)
    assert missing.status is not None
    plan, rounds = _settled(dataclasses.replace(_parked(missing.status), admission_ok=False), 4)
    assert rounds == 0 and plan.requeue_after == IDLE
