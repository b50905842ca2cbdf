"""Conditions per the API conventions, status merge patches, result summaries, retry backoff."""

from __future__ import annotations

import datetime

from agent_operator.decide import model, phases, retry
from agentrun_core.api import status as api_status

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
T1 = T0 + datetime.timedelta(minutes=5)


def test_last_transition_time_changes_only_with_status() -> None:
    first = phases.conditions(None, {"Running": (True, "AttemptRunning", "a")}, 1, T0)
    same = phases.conditions(first, {"Running": (True, "AttemptRunning", "b")}, 2, T1)
    assert same[0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert same[0]["message"] == "b" and same[0]["observedGeneration"] == 2
    flipped = phases.conditions(same, {"Running": (False, "Succeeded", "")}, 2, T1)
    assert flipped[0]["lastTransitionTime"] == "2026-01-01T00:05:00Z" and flipped[0]["status"] == "False"


def test_core_conditions_always_present() -> None:
    desired = phases.desired_conditions(
        "Running", "AttemptRunning", "", admitted=True, escalated=False, read_only=False
    )
    assert list(desired) == list(api_status.CORE_CONDITIONS)
    cancelled = phases.desired_conditions(
        "Cancelled", "Cancelled", "x", admitted=True, escalated=False, read_only=True
    )
    assert cancelled["Cancelled"][0] and cancelled["ReadOnly"][0]


def test_status_patch_sets_changed_and_nulls_removed_keys() -> None:
    old = {"phase": "WaitingApproval", "pendingApproval": {"id": "a-1"}, "attempts": 1}
    new = {"phase": "Running", "attempts": 1}
    assert phases.status_patch(old, new) == {"phase": "Running", "pendingApproval": None}
    assert phases.status_patch(new, dict(new)) is None


def test_invalid_spec_markers() -> None:
    assert phases.is_invalid_spec("invalid_spec", None)
    assert phases.is_invalid_spec(None, "GraphLoadError: No module named 'x'")
    assert not phases.is_invalid_spec("graph_failed", "ValueError: boom")


def test_backoff_doubles_and_caps() -> None:
    policy = model.RetryPolicy(max_attempts=10, backoff_seconds=2, max_backoff_seconds=10)
    assert [retry.backoff_seconds(policy, n) for n in range(0, 6)] == [0, 2, 4, 8, 10, 10]


def test_attempt_limit() -> None:
    policy = model.RetryPolicy(max_attempts=2, backoff_seconds=1, max_backoff_seconds=5)
    first = retry.on_loss(policy, 0, T0)
    assert not first.exhausted and first.next_attempt_at == T0 + datetime.timedelta(seconds=1)
    second = retry.on_loss(policy, first.restarts, T0)
    assert second.exhausted and second.restarts == 2


def test_input_problem_bounds_depth_size_and_integers() -> None:
    assert phases.input_problem({"a": [1, {"b": "c"}], "n": 2**63 - 1, "m": -(2**63)}) is None
    deep: dict[str, object] = {}
    node = deep
    for _ in range(10_000):  # far deeper than the recursion limit: the check must not recurse
        node["a"] = {}
        node = node["a"]  # type: ignore[assignment]
    assert "deeper" in (phases.input_problem(deep) or "")
    assert "larger" in (phases.input_problem({"blob": "x" * (1024 * 1024)}) or "")
    assert "64-bit" in (phases.input_problem({"n": [2**64]}) or "")
    assert "64-bit" in (phases.input_problem({"n": -(2**63) - 1}) or "")


def test_input_problem_refuses_a_nul_postgres_cannot_store() -> None:
    """U+0000 anywhere (a value, a key, nested): refused before admission, never stored and retried."""
    for bad in ({"s": "a\x00b"}, {"k\x00": 1}, {"l": [{"m": ["ok", "\x00"]}]}):
        assert phases.input_problem(bad) == phases.NUL_IN_INPUT, bad
    assert phases.input_problem({"s": "a\\u0000b", "t": "\u2400"}) is None  # an escape as text, a symbol
