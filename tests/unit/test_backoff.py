"""agentrun_core.backoff: the one capped exponential formula, and its callers agree with it."""

from __future__ import annotations

import random

import pytest

from agent_operator import settings
from agent_operator.act import notifier
from agent_operator.decide import model
from agent_operator.decide import retry as operator_retry
from agent_worker import retry as worker_retry
from agentrun_core import backoff
from agentrun_dev.podruntime import restarts


def test_doubles_from_initial_and_stops_at_the_cap() -> None:
    delays = [backoff.capped(n, initial=1.0, cap=10.0) for n in range(1, 7)]
    assert delays == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert backoff.capped(3, initial=0.5, cap=100.0, multiplier=3.0) == 4.5


def test_below_one_counts_as_the_first_failure() -> None:
    assert backoff.capped(0, initial=2.0, cap=60.0) == backoff.capped(-5, initial=2.0, cap=60.0) == 2.0


def test_long_streaks_do_not_overflow() -> None:
    assert backoff.capped(100_000, initial=0.5, cap=30.0) == 30.0
    assert backoff.capped(100_000, initial=0.0, cap=30.0) == 0.0
    assert isinstance(backoff.capped(2, initial=1, cap=60), float)


@pytest.mark.parametrize("n", [1, 2, 3, 8, 40])
def test_callers_use_the_formula(n: int) -> None:
    policy = model.RetryPolicy(max_attempts=5, backoff_seconds=2.0, max_backoff_seconds=60.0)
    assert operator_retry.backoff_seconds(policy, n) == backoff.capped(n, initial=2.0, cap=60.0)
    limits = settings.NotifySettings(backoff_seconds=1.0, max_backoff_seconds=60.0)
    assert notifier.retry_delay(limits, n) == backoff.capped(n, initial=1.0, cap=60.0)
    assert restarts.delay(n, restarts.Backoff(initial_s=1.0, max_s=10.0)) == backoff.capped(
        n, initial=1.0, cap=10.0
    )
    tool = worker_retry.RetryPolicy(initial_backoff=0.5, max_backoff=30.0, jitter=0.0)
    assert worker_retry.backoff(tool, n, random.Random(0)) == backoff.capped(n, initial=0.5, cap=30.0)


def test_the_operator_waits_nothing_before_any_loss() -> None:
    policy = model.RetryPolicy(max_attempts=5, backoff_seconds=2.0, max_backoff_seconds=60.0)
    assert operator_retry.backoff_seconds(policy, 0) == 0.0
