"""Token and cost budgets of a run (``spec.budget``): limits, prices, what was spent, and the decision at a
limit. Pure; shared by the worker (counting, the check before each model call) and the operator (status).

Rules:

* Money is integers of micro-units of the spec's currency (``cost: "2.50"`` is 2,500,000), never floats:
  prices and limits are decimal strings with at most 6 decimals. A call's cost is rounded UP to the micro-unit
  (a budget never under-counts).
* A limit is *reached* when what was spent is ``>=`` it. The check runs before each model call: a call in
  flight when a limit is crossed completes and is counted; the next one asks first.
* An approval raises limits, never lowers them: the run continues with ``max(current, raised)`` per limit,
  so replaying an approval (at a worker's start, and again when the parked node re-runs) is a no-op.
  A plain approval grants another budget of the spec's size for each reached limit; an approval with
  edits (``--set totalTokens=20000``) sets those limits.
"""

from __future__ import annotations

import dataclasses
import decimal
from collections.abc import Mapping
from typing import Any

from agentrun_core.api import status as api_status

MICRO = 1_000_000
TOKEN_FIELDS = ("inputTokens", "outputTokens", "totalTokens")
FIELDS = (*TOKEN_FIELDS, "cost")
PROMPT_KIND = "budget"
PROMPT_ACTION = "raise_budget"


class BudgetError(ValueError):
    """A budget value that cannot be read; the message says which and why."""


class BudgetExceeded(Exception):
    """A limit was reached and the approver rejected raising it (or nobody decided in time): the run fails
    with this reason."""


def parse_money(text: Any, what: str) -> int:
    """A decimal amount (``"0.003"``) as micro-units; at most 6 decimals, not negative."""
    try:
        value = decimal.Decimal(str(text).strip())
    except decimal.InvalidOperation:
        raise BudgetError(f"{what} must be a decimal number such as 2.50, not {text!r}") from None
    if not value.is_finite() or value < 0:
        raise BudgetError(f"{what} must be a finite, non-negative amount, not {text!r}")
    micro = value * MICRO
    if micro != micro.to_integral_value():
        raise BudgetError(f"{what} has more than 6 decimals: {text!r}")
    return int(micro)


def format_money(micro: int) -> str:
    """Micro-units as a decimal string without trailing zeros (``2500000`` -> ``"2.5"``)."""
    whole, frac = divmod(micro, MICRO)
    return f"{whole}.{frac:06d}".rstrip("0").rstrip(".") if frac else str(whole)


def parse_tokens(text: Any, what: str) -> int:
    try:
        value = int(str(text).strip())
    except ValueError:
        raise BudgetError(f"{what} must be a whole number of tokens, not {text!r}") from None
    if value < 0:
        raise BudgetError(f"{what} must not be negative, not {text!r}")
    return value


@dataclasses.dataclass(frozen=True)
class Price:
    """Micro-units per 1,000 tokens."""

    input_per_1k: int = 0
    output_per_1k: int = 0

    @classmethod
    def from_json(cls, doc: Any, what: str) -> Price:
        if not isinstance(doc, Mapping):
            raise BudgetError(f"{what} must be an object with inputPer1k and outputPer1k")
        return cls(
            input_per_1k=parse_money(doc.get("inputPer1k", "0"), f"{what}.inputPer1k"),
            output_per_1k=parse_money(doc.get("outputPer1k", "0"), f"{what}.outputPer1k"),
        )


@dataclasses.dataclass(frozen=True)
class Usage:
    """What one model call (or a sum of them) spent."""

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cost_micro: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.total_tokens + other.total_tokens,
            self.cost_micro + other.cost_micro,
        )

    def value(self, field: str) -> int:
        return {
            "inputTokens": self.input_tokens,
            "outputTokens": self.output_tokens,
            "totalTokens": self.total_tokens,
            "cost": self.cost_micro,
        }[field]

    def to_json(self, currency: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "inputTokens": self.input_tokens,
            "outputTokens": self.output_tokens,
            "totalTokens": self.total_tokens,
            "cost": format_money(self.cost_micro),
        }
        if currency:
            out["currency"] = currency
        return out


@dataclasses.dataclass(frozen=True)
class Budget:
    """``spec.budget`` as read: limits (tokens; cost in micro-units), prices, the currency's label."""

    limits: Mapping[str, int] = dataclasses.field(default_factory=dict)
    price: Price | None = None
    models: Mapping[str, Price] = dataclasses.field(default_factory=dict)
    currency: str | None = None

    @classmethod
    def from_json(cls, doc: Any) -> Budget:
        if doc is None:
            return cls()
        if not isinstance(doc, Mapping):
            raise BudgetError("spec.budget must be an object")
        limits: dict[str, int] = {}
        for field in TOKEN_FIELDS:
            if doc.get(field) is not None:
                limits[field] = parse_tokens(doc[field], f"spec.budget.{field}")
        if doc.get("cost") is not None:
            limits["cost"] = parse_money(doc["cost"], "spec.budget.cost")
        models = doc.get("models") or {}
        if not isinstance(models, Mapping):
            raise BudgetError("spec.budget.models must map model names to prices")
        return cls(
            limits=limits,
            price=Price.from_json(doc["price"], "spec.budget.price") if doc.get("price") else None,
            models={str(k): Price.from_json(v, f"spec.budget.models.{k}") for k, v in models.items()},
            currency=str(doc["currency"]) if doc.get("currency") else None,
        )

    @property
    def active(self) -> bool:
        return bool(self.limits or self.price or self.models)

    def price_of(self, model: str | None) -> Price | None:
        if model is not None and model in self.models:
            return self.models[model]
        return self.price


def cost_micro(price: Price | None, input_tokens: int, output_tokens: int) -> int:
    """The cost of a call in micro-units, rounded up (0 without a price)."""
    if price is None:
        return 0
    scaled = input_tokens * price.input_per_1k + output_tokens * price.output_per_1k
    return -(-scaled // 1000)


def usage_of(metadata: Any, price: Price | None) -> Usage | None:
    """A LangChain ``usage_metadata`` (``input_tokens``, ``output_tokens``, ``total_tokens``) as a Usage;
    None when the model reported none. A missing total is input + output."""
    if not isinstance(metadata, Mapping):
        return None
    inp = int(metadata.get("input_tokens") or 0)
    out = int(metadata.get("output_tokens") or 0)
    total = metadata.get("total_tokens")
    total_n = int(total) if total is not None else inp + out
    return Usage(inp, out, total_n, cost_micro(price, inp, out))


def reached(limits: Mapping[str, int], spent: Usage) -> list[str]:
    """The limits that spent has reached (``>=``), in FIELDS order."""
    return [f for f in FIELDS if f in limits and spent.value(f) >= limits[f]]


def _show(field: str, value: int) -> str:
    return format_money(value) if field == "cost" else str(value)


def show_limits(limits: Mapping[str, int]) -> dict[str, str]:
    """Limits as shown to people (cost as a decimal), in FIELDS order."""
    return {f: _show(f, limits[f]) for f in FIELDS if f in limits}


def prompt(
    budget: Budget, limits: Mapping[str, int], spent: Usage, note: str | None = None
) -> dict[str, Any]:
    """The approval's prompt at a reached limit: what was spent, the limits, what a plain approval grants,
    and the fields an approval may set (``kubectl agentrun approve NAME --id ID --set totalTokens=N``)."""
    hit = reached(limits, spent)
    grant = {f: limits[f] + max(budget.limits.get(f, limits[f]), 1) for f in hit}
    unit = f" {budget.currency}" if budget.currency else ""
    spent_text = ", ".join(
        f"{_show(f, spent.value(f))}{unit if f == 'cost' else ''} of {_show(f, limits[f])} {f}" for f in hit
    )
    grant_text = ", ".join(f"{f}={_show(f, v)}" for f, v in grant.items())
    message = (
        f"Budget reached: {spent_text} spent. Approve to continue with {grant_text} (or set new limits: "
        f"--set {hit[0] if hit else 'totalTokens'}=N); reject to end the run ({api_status.BUDGET_EXCEEDED})."
    )
    if note:
        message = f"{note} {message}"
    return {
        "kind": PROMPT_KIND,
        "action": PROMPT_ACTION,
        "message": message,
        "spent": spent.to_json(budget.currency),
        "limits": show_limits(limits),
        "reached": hit,
        "approveGrants": {f: _show(f, v) for f, v in grant.items()},
        "editable": list(FIELDS),
    }


def is_budget_prompt(value: Any) -> bool:
    return (
        isinstance(value, Mapping)
        and value.get("kind") == PROMPT_KIND
        and value.get("action") == PROMPT_ACTION
    )


def _parse_limit(field: str, text: Any) -> int:
    if field == "cost":
        return parse_money(text, f"the edited {field}")
    return parse_tokens(text, f"the edited {field}")


def decide(
    limits: Mapping[str, int], asked: Mapping[str, Any], payload: Any
) -> tuple[dict[str, int], str | None]:
    """The limits after a decision on a budget approval whose prompt was ``asked``: (limits, note).

    Raises BudgetExceeded when it was not approved. ``note`` says what of the decision could not be used
    (an edit that is not a number): the limits then stay as they were for it, and the run asks again."""
    if not isinstance(payload, Mapping) or not payload.get("approved"):
        by = payload.get("by") if isinstance(payload, Mapping) else None
        expired = isinstance(payload, Mapping) and payload.get("expired")
        why = "nobody decided before the approval's deadline" if expired else f"rejected by {by or 'unknown'}"
        raise BudgetExceeded(f"the budget was reached and raising it was {why}: {asked.get('message', '')}")
    out = dict(limits)
    args = payload.get("args")
    edits = args.get("args") if payload.get("type") == "edit" and isinstance(args, Mapping) else None
    if isinstance(edits, Mapping) and edits:
        bad: list[str] = []
        for field, text in edits.items():
            if field not in FIELDS:
                bad.append(f"{field} is not a budget limit")
                continue
            try:
                out[field] = max(out.get(field, 0), _parse_limit(field, text))
            except BudgetError as exc:
                bad.append(str(exc))
        return out, ("The approval's edits were not used: " + "; ".join(bad) + ".") if bad else None
    grants = asked.get("approveGrants")
    if isinstance(grants, Mapping):
        for field, text in grants.items():
            if field in FIELDS:
                out[field] = max(out.get(field, 0), _parse_limit(field, text))
    return out, None


def replay(budget: Budget, approvals: list[tuple[Any, str, Any]]) -> dict[str, int]:
    """The limits in force after the decided approvals (prompt, status, payload) of a run: the spec's, raised
    by every approved budget approval (raises only, so their order does not matter)."""
    limits = dict(budget.limits)
    for asked, status, payload in approvals:
        if status != "approved" or not is_budget_prompt(asked):
            continue
        try:
            limits, _ = decide(limits, asked, payload)
        except (BudgetExceeded, BudgetError):
            continue
    return limits
