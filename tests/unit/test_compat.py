"""The worker/schema compatibility rule (agentrun_core.compat, docs/upgrading.md) and how the operator reads
a worker's refusal (exit 15)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from agent_operator.decide import actions, model, pods, reconcile, retry
from agentrun_core import compat
from agentrun_core.api import protocol
from tests.support import rowmaker
from tests.unit.reconcile_world import NOW, effective, pod, world


@pytest.mark.parametrize(
    ("level", "problem"),
    [
        (None, "worker_too_new"),  # a schema from before migration 35
        (0, "worker_too_new"),
        (1, ""),
        (2, ""),
        (3, ""),
        (4, "worker_too_old"),
    ],
)
def test_the_rule_is_the_range(level: int | None, problem: str) -> None:
    verdict = compat.judge(level, compat.Levels(1, 3))
    assert verdict.problem == problem
    assert verdict.compatible == (problem == "")


def test_messages_say_what_to_do() -> None:
    assert "agentrun migrate" in compat.judge(None).message
    assert "not migrated" in compat.judge(None).message
    old = compat.judge(compat.SCHEMA_LEVEL + 1)
    assert "--image" in old.message and "older than the schema" in old.message


def test_this_code_runs_against_the_level_its_migrations_write() -> None:
    assert compat.judge(compat.SCHEMA_LEVEL).compatible
    assert compat.WORKER_LEVELS.high == compat.SCHEMA_LEVEL


def test_migration_35_writes_the_level_of_this_code() -> None:
    from agentrun_core.store import schema

    sql = next(m.sql for m in schema.load_migrations() if m.version == 35)
    assert f"VALUES (1, {compat.SCHEMA_LEVEL})" in sql


def test_exit_15_is_its_own_end_reason() -> None:
    pod = model.PodInfo(name="r-1", attempt=1, phase="Failed", exit_code=protocol.EXIT_INCOMPATIBLE)
    reason, message = pods.end_reason(pod)
    assert reason == pods.INCOMPATIBLE
    assert "schema" in message and "exit code 15" in message


def test_waiting_for_a_compatible_worker_never_exhausts_and_backs_off() -> None:
    policy = model.RetryPolicy(max_attempts=2, backoff_seconds=1.0, max_backoff_seconds=8.0)
    now = datetime.datetime(2026, 12, 6, tzinfo=datetime.UTC)
    delays = []
    for waits in range(1, 8):
        loss = retry.on_incompatible(policy, 0, now, waits)
        assert not loss.exhausted and loss.restarts == 0
        assert loss.next_attempt_at is not None
        delays.append((loss.next_attempt_at - now).total_seconds())
    assert delays == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0, 8.0]


def _condition(plan: actions.Plan, type_: str) -> dict[str, Any]:
    assert plan.status is not None
    return next(c for c in plan.status["conditions"] if c["type"] == type_)


def test_a_refusing_worker_makes_the_run_wait_not_fail() -> None:
    """maxAttempts 1: an ordinary loss would fail the run; exit 15 keeps it waiting, with the condition and
    its Event, and the next attempt after the backoff."""
    refused = pod(phase="Failed", exit_code=protocol.EXIT_INCOMPATIBLE)
    spec = {"retry": {"maxAttempts": 1, "backoffSeconds": 2, "maxBackoffSeconds": 8}}
    plan = reconcile.decide(
        world(db="admitted", status={"attempts": 1, "phase": "Running"}, pods=[refused], spec=spec)
    )
    assert plan.status is not None and plan.status["phase"] == "Running"
    assert plan.status["restarts"] == 0 and plan.status["lastAttemptEnd"]["incompatibleWaits"] == 1
    assert _condition(plan, "WorkerIncompatible")["status"] == "True"
    assert "WorkerIncompatible" in {e.reason for e in plan.events}
    assert not [a for a in effective(plan) if isinstance(a, actions.CreatePod)]  # after the backoff, not now
    # the second refusal in a row waits twice as long
    again = reconcile.decide(
        world(
            db="admitted",
            status={**plan.status, "attempts": 2},
            pods=[pod(2, phase="Failed", exit_code=protocol.EXIT_INCOMPATIBLE)],
            spec=spec,
        )
    )
    assert again.status is not None and again.status["lastAttemptEnd"]["incompatibleWaits"] == 2
    due = datetime.datetime.fromisoformat(again.status["nextAttemptAt"].replace("Z", "+00:00"))
    assert (due - NOW).total_seconds() == 4.0


def test_the_condition_clears_once_a_worker_holds_the_run() -> None:
    waiting = {
        "attempts": 2,
        "phase": "Running",
        "lastAttemptEnd": {"attempt": 1, "reason": pods.INCOMPATIBLE, "message": "m", "incompatibleWaits": 1},
        "conditions": [{"type": "WorkerIncompatible", "status": "True", "reason": "WorkerIncompatible"}],
    }
    starting = reconcile.decide(
        world(db=rowmaker.run(status="admitted"), status=waiting, pods=[pod(2, phase="Pending")])
    )
    assert _condition(starting, "WorkerIncompatible")["status"] == "True"  # not claimed yet
    held = rowmaker.run(status="running", holder="r-2")
    running = reconcile.decide(world(db=held, status=waiting, pods=[pod(2, phase="Running")]))
    assert _condition(running, "WorkerIncompatible")["status"] == "False"
