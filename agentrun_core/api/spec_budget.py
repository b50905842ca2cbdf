"""``spec.budget``: limits on a run's model tokens and cost (``agentrun_core.budget``), as a schema the field
table (``agentrun_core.api.spec_schema``) places. Pure data.

Amounts are decimal strings (at most 6 decimals), never floats: Postgres keeps micro-units as integers.
"""

from __future__ import annotations

from agentrun_core.api import openapi

_MONEY = "^[0-9]{1,12}([.][0-9]{1,6})?$"


def _money(description: str) -> openapi.Schema:
    return openapi.string(description, max_length=19, pattern=_MONEY)


def _price(description: str) -> openapi.Schema:
    return openapi.obj(
        {
            "inputPer1k": _money(
                "Price of 1,000 input (prompt) tokens, in spec.budget.currency (e.g. 0.003)."
            ),
            "outputPer1k": _money("Price of 1,000 output (completion) tokens, in spec.budget.currency."),
        },
        description,
    )


def _tokens(description: str) -> openapi.Schema:
    return openapi.integer(description, minimum=1, maximum=1_000_000_000_000)


BUDGET: openapi.Schema = openapi.obj(
    {
        "inputTokens": _tokens("Limit on input tokens, summed over the run's model calls."),
        "outputTokens": _tokens("Limit on output tokens, summed over the run's model calls."),
        "totalTokens": _tokens("Limit on total tokens (as each model reports total_tokens)."),
        "cost": _money(
            "Limit on the cost of the run's model calls, in spec.budget.currency (a decimal such as 2.50), "
            "computed from price / models."
        ),
        "currency": openapi.string("The unit of prices and cost (a label, e.g. USD).", max_length=16),
        "price": _price("Price of tokens of any model not listed in models."),
        "models": openapi.obj(
            description="Prices per model name (as the model reports it, e.g. gpt-4o-mini).",
            max_properties=64,
            additional=_price("Price of this model's tokens."),
        ),
    },
    (
        "Limits on the model tokens and cost the run spends, counted by the worker from each chat model's "
        "usage_metadata. At a limit the run waits on an approval that shows what was spent: approve to "
        "continue (kubectl agentrun approve NAME --id ID [--set totalTokens=N]), reject to end it Failed "
        "with reason BudgetExceeded. Spent tokens and cost are in status.usage."
    ),
    rules=[
        openapi.rule(
            "!has(self.cost) || has(self.price) || has(self.models)",
            "spec.budget.cost needs prices: spec.budget.price and/or spec.budget.models",
        )
    ],
)
