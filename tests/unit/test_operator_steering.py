"""The pure side of steering: Finished, retry (spec.retryGeneration), resolve (annotation), reopening, and the
CLI's requests (wait's verdict, retry's patch, resolve's annotations)."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

import pytest

from agent_operator.decide import actions, model, phases, reconcile, steering
from agentrun import cluster, steer_cli
from agentrun_core import store
from agentrun_core.api import meta
from agentrun_core.api import status as api_status
from tests.support import rowmaker
from tests.unit import reconcile_world
from tests.unit.reconcile_world import NOW


def world(*, db: store.Run | None, effects: dict[str, int] | None = None, **kw: Any) -> model.World:
    """The reconcile tests' world at the spec's third generation, with the run row as given."""
    return reconcile_world.world(db=db, generation=3, effects=effects or {}, **kw)


def conds(status: dict[str, Any] | None) -> dict[str, tuple[str, str]]:
    assert status is not None
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


FAILED = {
    "phase": "Failed",
    "attempts": 1,
    "conditions": [{"type": "Failed", "status": "True", "reason": "GraphFailed"}],
}
DONE_POD = model.PodInfo(name="r-1", attempt=1, phase="Failed", exit_code=1)


def retry_asked(
    db: str,
    status: dict[str, Any],
    pod: model.PodInfo = DONE_POD,
    *,
    generation: int = 1,
    stamped: bool = True,
) -> model.World:
    """A run (row status ``db``) whose spec.retryGeneration asks for a retry, stamped with who asked (by the
    admission policy) unless ``stamped`` is False."""
    return world(
        db=rowmaker.run(status=db),
        status=status,
        pods=[pod],
        spec={"retryGeneration": generation},
        annotations={meta.RETRIED_BY: "oncall"} if stamped else {},
    )


def reopened(
    done: store.Intervention, status: dict[str, Any], pod: model.PodInfo = DONE_POD, **kw: Any
) -> model.World:
    """The world once a steering verb (``done``, its intervention row) has reopened the run: the row counts
    one reopening and one intervention, and a retry's generation; ``kw``: other world fields."""
    generation = {"retry_generation": done.generation} if done.kind == "retry" else {}
    row = rowmaker.run(status="admitted", reopened=1, interventions=1, **generation)
    return world(db=row, status=status, pods=[pod], interventions=(done,), **kw)


@pytest.mark.parametrize(
    ("db", "phase", "reason"),
    [
        ("succeeded", "Succeeded", "Succeeded"),
        ("failed", "Failed", "Failed"),
        ("cancelled", "Cancelled", "Cancelled"),
        ("needs_human", "Failed", "Failed"),
    ],
)
def test_finished_is_true_for_every_outcome_with_the_outcome_as_reason(
    db: str, phase: str, reason: str
) -> None:
    plan = reconcile.decide(world(db=rowmaker.run(status=db), status={"attempts": 1}, pods=[DONE_POD]))
    assert plan.status is not None and plan.status["phase"] == phase
    assert conds(plan.status)["Finished"] == ("True", reason)


def test_finished_is_false_while_running() -> None:
    running = model.PodInfo(name="r-1", attempt=1, phase="Running")
    plan = reconcile.decide(world(db=rowmaker.run(status="running"), status={"attempts": 1}, pods=[running]))
    assert conds(plan.status)["Finished"] == ("False", "NotFinished")


def test_retry_of_a_failed_run_reopens_it_once_and_leaves_status_alone() -> None:
    w = retry_asked("failed", FAILED)
    plan = reconcile.decide(w)
    assert [a for a in plan.actions if isinstance(a, actions.ReopenRun)] == [actions.ReopenRun(1, "oncall")]
    assert plan.status is None and plan.requeue_after == 0  # no stale Finished for the new generation


def test_retry_waits_while_the_run_runs_and_needs_the_stamp() -> None:
    running = model.PodInfo(name="r-1", attempt=1, phase="Running")
    w = retry_asked("running", {"attempts": 1}, running)
    assert not any(isinstance(a, actions.ReopenRun) for a in reconcile.decide(w).actions)
    unstamped = retry_asked("failed", FAILED, stamped=False)
    plan = reconcile.decide(unstamped)
    assert not any(isinstance(a, actions.ReopenRun) for a in plan.actions)
    assert [e.reason for e in plan.events] == ["RetryRefused"]
    assert plan.status is not None and plan.status["observedRetryGeneration"] == 1
    again = retry_asked("failed", plan.status, stamped=False)
    assert [e.reason for e in reconcile.decide(again).events] == []  # told once


def test_retry_of_a_succeeded_run_is_refused() -> None:
    w = retry_asked("succeeded", {"attempts": 1}, generation=2)
    plan = reconcile.decide(w)
    assert not any(isinstance(a, actions.ReopenRun) for a in plan.actions)
    assert "RetryRefused" in [e.reason for e in plan.events]


def test_reopened_run_starts_the_next_attempt_with_a_fresh_budget() -> None:
    retried = rowmaker.intervention(kind="retry", by="oncall", at=NOW, generation=1)
    status = {**FAILED, "restarts": 4, "completionTime": "2026-01-01T11:00:00Z"}
    w = reopened(retried, status, spec={"retryGeneration": 1})
    plan = reconcile.decide(w)
    assert actions.CreatePod(2, "retry", image="agentrun:dev") in plan.actions
    assert plan.status is not None
    assert (
        plan.status["phase"] == "Running"
        and plan.status["restarts"] == 0
        and "completionTime" not in plan.status
    )
    assert plan.status["reopened"] == 1 and plan.status["retryGeneration"] == 1
    assert plan.status["interventions"] == [
        {"kind": "retry", "by": "oncall", "at": "2026-01-01T12:00:00Z", "generation": 1}
    ]
    assert conds(plan.status)["Finished"] == ("False", "NotFinished")
    assert "Reopened" in [e.reason for e in plan.events]


def test_reopened_run_waits_for_the_stopped_attempts_worker() -> None:
    exiting = model.PodInfo(name="r-1", attempt=1, phase="Running")
    resolved = rowmaker.intervention(kind="resolve_not_sent", by="oncall", effect_key="ak-1")
    w = reopened(resolved, FAILED, exiting)
    plan = reconcile.decide(w)
    assert not any(isinstance(a, actions.CreatePod) for a in plan.actions)
    assert plan.status is not None and plan.status["lastAttemptEnd"]["reason"] == "resolved"
    later = reopened(resolved, plan.status)
    assert actions.CreatePod(2, "resolved", image="agentrun:dev") in reconcile.decide(later).actions


def test_cancelled_run_surfaces_its_pending_effects() -> None:
    plan = reconcile.decide(
        world(
            db=rowmaker.run(status="cancelled"),
            status={"attempts": 1},
            pods=[DONE_POD],
            effects={"pending": 1, "sent": 0},
        )
    )
    assert plan.status is not None and "1 effect(s) left pending" in plan.status["message"]


def test_the_first_cancelled_status_already_surfaces_pending_effects() -> None:
    """The operator decides Cancelled itself once the worker is gone (Postgres says so a reconcile later):
    a reader who sees the final phase must see the pending effects in that same status."""
    plan = reconcile.decide(
        world(
            db=rowmaker.run(status="admitted"),
            status={"attempts": 1, "phase": "Pending"},
            spec={"cancel": True},
            pods=[DONE_POD],
            effects={"pending": 1},
        )
    )
    assert actions.CancelRun("cancelled (spec.cancel)") in plan.actions
    assert plan.status is not None and plan.status["phase"] == "Cancelled"
    assert "1 effect(s) left pending" in plan.status["message"]


def test_an_operator_decided_outcome_notes_its_pending_effects_once_with_todays_count() -> None:
    note = "effect(s) left pending"
    decided = {
        "attempts": 1,
        "phase": "Failed",
        "reason": api_status.ATTEMPTS_EXHAUSTED,
        "message": "gave up",
    }
    first = reconcile.decide(
        world(db=rowmaker.run(status="admitted"), status=decided, pods=[DONE_POD], effects={"pending": 2})
    )
    assert first.status is not None and first.status["message"].count(note) == 1
    assert "2 effect(s)" in first.status["message"]
    again = reconcile.decide(
        world(
            db=rowmaker.run(status="admitted"), status=first.status, pods=[DONE_POD], effects={"pending": 1}
        )
    )
    assert again.status is not None and again.status["message"].count(note) == 1
    assert again.status["message"].startswith("gave up; 1 effect(s)")
    settled = reconcile.decide(
        world(
            db=rowmaker.run(status="admitted"),
            status=again.status,
            pods=[DONE_POD],
            effects={"pending": 0, "sent": 2},
        )
    )
    assert settled.status is not None and settled.status["message"] == "gave up"


@pytest.mark.parametrize(
    ("annotations", "refusal"),
    [
        ({meta.RESOLVE: "ak-1=maybe", meta.RESOLVED_BY: "x"}, "must be <effect key>=sent"),
        ({meta.RESOLVE: "ak-1=sent"}, "carries no agentrun.dev/resolved-by stamp"),
        (
            {meta.RESOLVE: "ak-1=sent", meta.RESOLVED_BY: "x", meta.RESOLVE_RESULT: "{"},
            "not JSON",
        ),
        (
            {meta.RESOLVE: "ak-1=not-sent", meta.RESOLVED_BY: "x", meta.RESOLVE_RESULT: "1"},
            "only",
        ),
    ],
)
def test_resolve_refusals(annotations: dict[str, str], refusal: str) -> None:
    request, why = steering.parse_resolve(annotations)
    assert request is None and why is not None and refusal in why


def test_resolve_plans_the_effect_and_removes_the_annotations() -> None:
    ann = {
        meta.RESOLVE: "ak-1=sent",
        meta.RESOLVED_BY: "oncall",
        meta.RESOLVE_RESULT: '{"id": 7}',
    }
    plan = reconcile.decide(
        world(db=rowmaker.run(status="needs_human"), status=FAILED, pods=[DONE_POD], annotations=ann)
    )
    assert actions.ResolveEffect("ak-1", "sent", "oncall", {"id": 7}) in plan.actions
    assert actions.RemoveResolveAnnotations() in plan.actions


def test_desired_conditions_lists_finished_always() -> None:
    assert "Finished" in api_status.CORE_CONDITIONS
    desired = phases.desired_conditions(
        "Cancelled", "Cancelled", "x", admitted=True, escalated=False, read_only=False
    )
    assert desired["Finished"] == (True, "Cancelled", "x")


# --- the CLI's pure parts ---------------------------------------------------------------------------------


def _obj(phase: str, reason: str, *, generation: int = 1, observed: int = 1, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "r", "generation": generation},
        "spec": spec,
        "status": {
            "phase": phase,
            "conditions": [
                {
                    "type": "Finished",
                    "status": "True" if phase in api_status.FINAL_PHASES else "False",
                    "reason": reason,
                    "observedGeneration": observed,
                },
            ],
        },
    }


def test_wait_verdicts_and_exit_codes() -> None:
    assert steer_cli.finished(_obj("Running", "NotFinished")) is None
    assert steer_cli.finished(_obj("Failed", "Failed", generation=2, observed=1)) is None  # retry just asked
    assert steer_cli.finished(_obj("Failed", "Failed")) is not None
    assert [steer_cli.wait_exit_code(r) for r in ("Succeeded", "Failed", "Cancelled")] == [0, 1, 3]


def test_retry_patch() -> None:
    assert steer_cli.retry_patch(_obj("Failed", "Failed", retryGeneration=2)) == {
        "spec": {"retryGeneration": 3}
    }
    assert steer_cli.retry_patch(_obj("Cancelled", "Cancelled", cancel=True)) == {
        "spec": {"retryGeneration": 1, "cancel": False}
    }
    with pytest.raises(cluster.CliError, match="is Running: only a Failed"):
        steer_cli.retry_patch(_obj("Running", "NotFinished"))


def test_resolve_annotations() -> None:
    assert steer_cli.resolve_annotations("ak-12", True, '{"b": 1, "a": 2}') == {
        meta.RESOLVE: "ak-12=sent",
        meta.RESOLVE_RESULT: '{"a":2,"b":1}',
    }
    assert steer_cli.resolve_annotations("ak-12", False, None)[meta.RESOLVE] == "ak-12=not-sent"
    with pytest.raises(cluster.CliError, match="not JSON"):
        steer_cli.resolve_annotations("ak-12", True, "{")
    with pytest.raises(cluster.CliError, match="goes with --sent"):
        steer_cli.resolve_annotations("ak-12", False, "1")
    with pytest.raises(cluster.CliError, match="not an effect key"):
        steer_cli.resolve_annotations("AK 1", True, None)


def test_a_retry_is_not_cancelled_again_by_the_expiry_that_stopped_the_run() -> None:
    expired = rowmaker.approval(
        approval_id="a-1",
        status="expired",
        decided_at=NOW - datetime.timedelta(minutes=5),
        deadline_action="cancel",
    )
    retried = rowmaker.intervention(kind="retry", by="oncall", at=NOW, generation=1)
    w = reopened(retried, {"phase": "Cancelled", "attempts": 1})
    w = dataclasses.replace(w, approvals=(expired,))
    plan = reconcile.decide(w)
    assert not any(isinstance(a, actions.CancelRun) for a in plan.actions)
    assert actions.CreatePod(2, "retry", image="agentrun:dev") in plan.actions
    before = dataclasses.replace(w, interventions=())
    assert steering.retried_since_expiry(before) is False


REKEYED = [{"key": "ak-gift", "tool": "gift_card", "step": "bill"}]
KEPT = [{"key": "ak-charge", "tool": "charge", "step": "bill", "error": "Retryable: 503"}]


def test_status_says_which_failed_effects_a_retry_rekeyed_and_which_it_kept() -> None:
    retried = rowmaker.intervention(
        kind="retry", by="oncall", at=NOW, generation=1, detail={"rekeyed": REKEYED, "kept": KEPT}
    )
    w = reopened(retried, FAILED, spec={"retryGeneration": 1})
    plan = reconcile.decide(w)
    assert plan.status is not None
    assert plan.status["interventions"] == [
        {
            "kind": "retry",
            "by": "oncall",
            "at": "2026-01-01T12:00:00Z",
            "generation": 1,
            "rekeyed": ["ak-gift"],
            "kept": ["ak-charge"],
        }
    ]


def test_retry_summary_names_every_row_and_why() -> None:
    text = steering.retry_summary(2, "oncall", REKEYED, KEPT)
    assert text.startswith("retry generation 2 by oncall: ")
    assert "re-keyed 1 failed effect proven not performed: ak-gift (gift_card)" in text
    assert "kept 1 under its key (may have been performed" in text and "ak-charge (charge)" in text
    assert "agentrun resolve" in text
    assert steering.retry_summary(1, "x", [], []) == "retry generation 1 by x: no failed effect to re-key"
    many = [{"key": f"ak-{i:03d}", "tool": "t"} for i in range(200)]
    assert len(steering.retry_summary(1, "x", many, many)) <= 1000  # an Event's message stays readable


def test_retry_cli_reports_what_the_operator_applied() -> None:
    obj = {
        "status": {
            "interventions": [
                {"kind": "retry", "by": "oncall", "generation": 1, "rekeyed": [], "kept": []},
                {
                    "kind": "retry",
                    "by": "oncall",
                    "generation": 2,
                    "rekeyed": ["ak-gift"],
                    "kept": ["ak-charge"],
                },
            ]
        }
    }
    assert steer_cli.applied_retry(obj, 3) is None  # not applied yet
    lines = steer_cli.retry_report("r", steer_cli.applied_retry(obj, 2) or {})
    text = "\n".join(lines)
    assert "re-keyed (its failure proves nothing was performed" in text and "ak-gift" in text
    assert "kept under its key (it may have been performed" in text and "ak-charge" in text
    assert "agentrun resolve r ak-charge --sent|--not-sent" in text
    assert steer_cli.retry_report("r", {"generation": 1, "rekeyed": [], "kept": []}) == [
        "agentrun/r retry generation 1 applied: no failed effect (nothing re-keyed)"
    ]
