"""spec.budget's pure rules (agentrun_core.budget): money in micro-units, when a limit is reached, what an
approval raises, and that replaying decisions never raises a limit twice."""

from __future__ import annotations

import pytest

from agentrun_core import budget

SPEC = budget.Budget.from_json(
    {
        "totalTokens": 400,
        "cost": "0.01",
        "currency": "USD",
        "price": {"inputPer1k": "0.003", "outputPer1k": "0.015"},
        "models": {"big": {"inputPer1k": "0.03", "outputPer1k": "0.06"}},
    }
)


def test_money_is_integer_micro_units_rounded_up_per_call() -> None:
    assert budget.parse_money("2.50", "x") == 2_500_000
    assert budget.format_money(2_500_000) == "2.5" and budget.format_money(3) == "0.000003"
    assert SPEC.limits == {"totalTokens": 400, "cost": 10_000}
    # 100 in at 0.003/1k = 300 micro, 50 out at 0.015/1k = 750 micro
    assert budget.usage_of(
        {"input_tokens": 100, "output_tokens": 50, "total_tokens": 150}, SPEC.price_of(None)
    ) == (budget.Usage(100, 50, 150, 1050))
    assert budget.usage_of({"input_tokens": 1, "output_tokens": 0}, SPEC.price_of("unknown")) == budget.Usage(
        1,
        0,
        1,
        3,  # a model without its own price: spec.budget.price
    )
    assert budget.cost_micro(budget.Price(1_500, 0), 1, 0) == 2  # 1.5 micro rounds up: never under-counts
    assert SPEC.price_of("big") == budget.Price(30_000, 60_000)
    assert budget.usage_of(None, None) is None
    for bad in ("1.0000001", "-1", "abc", "NaN"):
        with pytest.raises(budget.BudgetError):
            budget.parse_money(bad, "spec.budget.cost")


def test_a_limit_is_reached_at_equality_and_only_checked_limits_count() -> None:
    assert budget.reached(SPEC.limits, budget.Usage(0, 0, 399, 9_999)) == []
    assert budget.reached(SPEC.limits, budget.Usage(0, 0, 400, 0)) == ["totalTokens"]
    assert budget.reached(SPEC.limits, budget.Usage(0, 0, 450, 10_000)) == ["totalTokens", "cost"]
    assert budget.reached({}, budget.Usage(10**9, 10**9, 10**9, 10**9)) == []


def test_prompt_shows_spent_and_a_plain_approval_grants_another_spec_sized_budget() -> None:
    spent = budget.Usage(300, 150, 450, 1_650)
    asked = budget.prompt(SPEC, SPEC.limits, spent)
    assert budget.is_budget_prompt(asked) and asked["reached"] == ["totalTokens"]
    assert asked["spent"] == {
        "inputTokens": 300,
        "outputTokens": 150,
        "totalTokens": 450,
        "cost": "0.00165",
        "currency": "USD",
    }
    assert "450 of 400 totalTokens" in asked["message"] and "BudgetExceeded" in asked["message"]
    assert asked["approveGrants"] == {"totalTokens": "800"}
    limits, note = budget.decide(SPEC.limits, asked, {"approved": True, "type": "accept", "args": None})
    assert limits == {"totalTokens": 800, "cost": 10_000} and note is None


def test_an_edit_sets_limits_and_never_lowers_one_and_a_bad_edit_is_said_not_used() -> None:
    asked = budget.prompt(SPEC, SPEC.limits, budget.Usage(0, 0, 400, 0))
    edit = {
        "approved": True,
        "type": "edit",
        "args": {"action": "raise_budget", "args": {"totalTokens": "2000"}},
    }
    assert budget.decide(SPEC.limits, asked, edit)[0]["totalTokens"] == 2000
    lower = {**edit, "args": {"action": "raise_budget", "args": {"totalTokens": "10", "cost": "0.5"}}}
    assert budget.decide(SPEC.limits, asked, lower)[0] == {"totalTokens": 400, "cost": 500_000}
    bad = {**edit, "args": {"action": "raise_budget", "args": {"totalTokens": "lots"}}}
    limits, note = budget.decide(SPEC.limits, asked, bad)
    assert limits == SPEC.limits and note is not None and "'lots'" in note


def test_rejection_and_expiry_end_the_run_budget_exceeded() -> None:
    asked = budget.prompt(SPEC, SPEC.limits, budget.Usage(0, 0, 400, 0))
    with pytest.raises(budget.BudgetExceeded, match="rejected by manager"):
        budget.decide(SPEC.limits, asked, {"approved": False, "by": "manager", "type": "ignore"})
    with pytest.raises(budget.BudgetExceeded, match="deadline"):
        budget.decide(SPEC.limits, asked, {"approved": False, "expired": True})


def test_replaying_decisions_raises_once_whatever_the_order_or_repetition() -> None:
    first = budget.prompt(SPEC, SPEC.limits, budget.Usage(0, 0, 400, 0))
    accept = {"approved": True, "type": "accept", "args": None}
    raised = budget.decide(SPEC.limits, first, accept)[0]
    second = budget.prompt(SPEC, raised, budget.Usage(0, 0, 800, 0))
    decided = [(first, "approved", accept), (second, "approved", accept), ({"gate": 1}, "approved", accept)]
    want = {"totalTokens": 1200, "cost": 10_000}
    assert budget.replay(SPEC, decided) == want
    assert budget.replay(SPEC, decided[::-1] + decided) == want  # a decision seen twice raises nothing more
    assert budget.replay(SPEC, [(first, "rejected", {"approved": False})]) == SPEC.limits
    assert budget.replay(SPEC, [(first, "pending", None)]) == SPEC.limits


def test_spec_errors_name_the_field() -> None:
    with pytest.raises(budget.BudgetError, match=r"spec.budget.price.inputPer1k"):
        budget.Budget.from_json({"cost": "1", "price": {"inputPer1k": "x"}})
    with pytest.raises(budget.BudgetError, match=r"spec.budget.totalTokens"):
        budget.Budget.from_json({"totalTokens": "many"})
    assert not budget.Budget.from_json(None).active


def test_the_trace_shows_each_steps_model_usage_and_the_runs_total() -> None:
    from agentrun import trace

    usage = {
        (1, "think:1"): (budget.Usage(100, 50, 150, 1050), 1),
        (2, "think:3"): (budget.Usage(200, 100, 300, 2100), 2),
        (2, "other:3"): (budget.Usage(1, 1, 2, 0), 1),
        (2, "think:4"): (budget.Usage(100, 50, 150, 1050), 1),  # parked at the limit: no step event
    }
    assert trace.step_usage(usage, 1, "think:1")["modelUsage"]["totalTokens"] == 150
    assert trace.step_usage(usage, 2, "other,think:3")["modelUsage"] == {
        "calls": 3,
        "inputTokens": 201,
        "outputTokens": 101,
        "totalTokens": 302,
        "cost": "0.0021",
    }
    assert trace.step_usage(usage, 1, "think:3") == {}  # another attempt's calls are not this event's
    assert trace.total_usage(usage)["modelUsage"]["totalTokens"] == 602
    assert trace.total_usage({}) == {}


def test_model_usage_metrics_are_counters_per_namespace_and_kind() -> None:
    import prometheus_client

    from agent_operator.observe import metrics
    from agentrun_core.store import metrics_sql

    snap = metrics_sql.Snapshot(runs=[("ns-a", "running", 1)], model_usage=[("ns-a", 6, 600, 300, 6_300)])
    reg = prometheus_client.CollectorRegistry()
    reg.register(metrics.LedgerCollector(lambda: snap))
    assert reg.get_sample_value("agentrun_model_tokens_total", {"namespace": "ns-a", "kind": "input"}) == 600
    assert reg.get_sample_value("agentrun_model_tokens_total", {"namespace": "ns-a", "kind": "output"}) == 300
    assert reg.get_sample_value("agentrun_model_cost_total", {"namespace": "ns-a"}) == 0.0063
    assert reg.get_sample_value("agentrun_model_calls_total", {"namespace": "ns-a"}) == 6
    assert reg.get_sample_value("agentrun_model_calls_total", {"namespace": "ns-b"}) is None
