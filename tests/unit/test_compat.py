"""The worker/schema compatibility rule (agentrun_core.compat, docs/upgrading.md) and how the operator reads
a worker's refusal (exit 15)."""

from __future__ import annotations

import datetime

import pytest

from agent_operator import model, pods, retry
from agentrun_core import compat, protocol


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
        loss = retry.on_incompatible(policy, waits, pods.INCOMPATIBLE, "m", 0, now, waits)
        assert not loss.exhausted and loss.restarts == 0
        assert loss.next_attempt_at is not None
        delays.append((loss.next_attempt_at - now).total_seconds())
    assert delays == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0, 8.0]
