"""LangChain 1.x ``HumanInTheLoopMiddleware`` batches: reading the request, checking the human's decisions.
Pure; shared by the CLI (checks before anything is sent), the operator (the authoritative check, against the
prompt Postgres recorded) and the store (the resume payload).

The middleware (``create_agent(..., middleware=[HumanInTheLoopMiddleware(...)])``, default ``batched``
mode) interrupts once per model turn with ``{"action_requests": [{"name", "args", "description"}],
"review_configs": [{"action_name", "allowed_decisions"}]}`` and resumes only with ``{"decisions": [...]}``:
one decision per action request, in order, each of a type that action allows:

* ``{"type": "approve"}``; ``{"type": "edit", "edited_action": {"name", "args"}}``: the tool runs;
* ``{"type": "reject", "message"?}``; ``{"type": "respond", "message"}``: it does not; the model gets the
  text.

Rules here, beyond the middleware's own: decisions that let a tool run go with an approval only (so the
self-approval and approver rules of an approval hold for each of them), a rejection carries only reject /
respond; an edit changes arguments, never the tool (the middleware would run another tool unreviewed), and
its arguments are merged over the model's (``--set 1.body=...`` changes one field); a malformed list is
refused whole with the reason (:class:`DecisionRefused`), never applied in part.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from agentrun_core.api import limits, meta

DECISION_TYPES = ("approve", "edit", "reject", "respond")
GOES_AHEAD = ("approve", "edit")  # the tool runs
MESSAGE_LIMIT = (
    limits.RESPONSE_MAX_CHARS
)  # characters of a reject / respond message (as agentrun.dev/response)
EXPIRED_MESSAGE = "Nobody decided before the approval's deadline; the tool was not executed."


class DecisionRefused(ValueError):
    """The decisions do not fit the pending batch; the message says why (shown to the human)."""


@dataclasses.dataclass(frozen=True)
class Action:
    """One action request of a batch and the decisions it allows."""

    index: int
    name: str
    args: Mapping[str, Any]
    allowed: tuple[str, ...]
    description: str | None = None

    @property
    def label(self) -> str:
        return f"action {self.index} ({self.name})"


def actions(prompt: Any) -> tuple[Action, ...] | None:
    """The batch's actions, or None when ``prompt`` is not a HumanInTheLoopMiddleware request."""
    if not isinstance(prompt, Mapping):
        return None
    requests, configs = prompt.get("action_requests"), prompt.get("review_configs")
    if not isinstance(requests, list) or not isinstance(configs, list) or not requests:
        return None
    by_name = {str(c.get("action_name")): c for c in configs if isinstance(c, Mapping)}
    out = []
    for i, request in enumerate(requests):
        if not isinstance(request, Mapping):
            return None
        name = str(request.get("name") or "")
        # The middleware lists one review config per action request, in order; match by name as well, so a
        # batch whose configs are listed once per tool reads the same.
        config = configs[i] if len(configs) == len(requests) else by_name.get(name)
        if not isinstance(config, Mapping) or str(config.get("action_name")) != name:
            config = by_name.get(name) or {}
        allowed = config.get("allowed_decisions")
        args = request.get("args", request.get("arguments"))  # ("arguments": langchain 1.0's name)
        description = request.get("description", config.get("description"))
        out.append(
            Action(
                index=i,
                name=name,
                args=dict(args) if isinstance(args, Mapping) else {},
                allowed=tuple(str(a) for a in allowed) if isinstance(allowed, list) else (),
                description=str(description) if description is not None else None,
            )
        )
    return tuple(out)


def parse(text: str) -> Any:
    """The ``agentrun.dev/decisions`` annotation's JSON."""
    if len(text) > limits.DECISIONS_MAX_CHARS:
        raise DecisionRefused(f"the decisions are longer than {limits.DECISIONS_MAX_CHARS} characters")
    try:
        return json.loads(text)
    except ValueError as exc:
        raise DecisionRefused(f"the decisions are not JSON: {exc}") from None


def decide(
    prompt: Any,
    decision: str,
    *,
    decisions: Any = None,
    response: str | None = None,
) -> list[dict[str, Any]]:
    """The middleware's decision list for this approval: ``decisions`` (per action, a list or its JSON) as
    checked, or, without them, the one decision of ``decision`` for every action (approved -> approve,
    rejected -> reject with ``response`` as its message, expired -> reject). Raises DecisionRefused."""
    batch = actions(prompt)
    if batch is None:
        raise DecisionRefused(
            "the pending approval is not a HumanInTheLoopMiddleware batch (no action_requests in its "
            "prompt): decide it with approve / reject / respond, without per-action decisions"
        )
    if decisions is None:
        return [_uniform(action, decision, response) for action in batch]
    if decision == "expired":
        raise DecisionRefused("an expiry carries no per-action decisions")
    if response is not None:
        raise DecisionRefused(
            f"{meta.RESPONSE} and per-action decisions cannot go together: give each rejected action "
            "its own message in its decision"
        )
    if isinstance(decisions, str):
        decisions = parse(decisions)
    if not isinstance(decisions, list):
        raise DecisionRefused(
            "the decisions must be a JSON list, one decision per action of the batch, in order "
            f'(e.g. [{{"type": "approve"}}, {{"type": "reject", "message": "why"}}]); got a '
            f"{type(decisions).__name__}"
        )
    if len(decisions) != len(batch):
        raise DecisionRefused(
            f"the batch has {len(batch)} actions, {len(decisions)} decisions were given: one decision per "
            "action, in order"
        )
    out = [_checked(action, d) for action, d in zip(batch, decisions, strict=True)]
    ahead = [a.label for a, d in zip(batch, out, strict=True) if d["type"] in GOES_AHEAD]
    if decision == "approved" and not ahead:
        raise DecisionRefused(
            "no action is approved or edited: use reject (kubectl agentrun reject NAME --id ID --decisions "
            "...), so the decision is recorded as a rejection"
        )
    if decision == "rejected" and ahead:
        raise DecisionRefused(
            f"{', '.join(ahead)} would run: decisions that let a tool run go with an approval "
            f"({meta.APPROVE}, kubectl agentrun approve), never with a rejection"
        )
    return out


def _uniform(action: Action, decision: str, response: str | None) -> dict[str, Any]:
    if decision == "expired":  # nobody said yes: nothing runs, whatever the tool allows
        return {"type": "reject", "message": EXPIRED_MESSAGE}
    want: dict[str, Any] = {"type": "approve"} if decision == "approved" else {"type": "reject"}
    if response is not None and decision == "rejected":
        want["message"] = _message(action, response, required=True)
    if want["type"] not in action.allowed:
        raise DecisionRefused(
            f"{action.label} allows {', '.join(action.allowed) or 'no decision'}, not {want['type']}: "
            "decide each action with --decisions"
        )
    return want


def _checked(action: Action, decision: Any) -> dict[str, Any]:
    if not isinstance(decision, Mapping):
        raise DecisionRefused(f'{action.label}: a decision is a JSON object such as {{"type": "approve"}}')
    kind = decision.get("type")
    if kind not in DECISION_TYPES:
        raise DecisionRefused(
            f"{action.label}: unknown decision type {kind!r} (one of {', '.join(DECISION_TYPES)})"
        )
    if kind not in action.allowed:
        raise DecisionRefused(
            f"{action.label} allows {', '.join(action.allowed) or 'no decision'}, not {kind}"
        )
    if kind == "approve":
        return {"type": "approve"}
    if kind == "edit":
        edited = decision.get("edited_action")
        if not isinstance(edited, Mapping) or not isinstance(edited.get("args"), Mapping):
            raise DecisionRefused(
                f'{action.label}: an edit is {{"type": "edit", "edited_action": {{"args": {{...}}}}}}'
            )
        name = edited.get("name", action.name)
        if name != action.name:
            raise DecisionRefused(
                f"{action.label}: an edit changes the arguments, never the tool ({name!r} would run "
                "unreviewed)"
            )
        return {
            "type": "edit",
            "edited_action": {"name": action.name, "args": {**action.args, **edited["args"]}},
        }
    out: dict[str, Any] = {"type": kind}
    if "message" in decision or kind == "respond":
        out["message"] = _message(action, decision.get("message"), required=kind == "respond")
    return out


def _message(action: Action, message: Any, *, required: bool) -> str:
    if not isinstance(message, str) or not (0 < len(message) <= MESSAGE_LIMIT):
        need = "needs" if required else "takes"
        raise DecisionRefused(
            f"{action.label}: the decision {need} a message of 1 to {MESSAGE_LIMIT} characters"
        )
    return message


def pending_actions(prompt: Any) -> list[dict[str, Any]] | None:
    """``status.pendingApproval.actions``: what the batch asks, per action (None: not a batch)."""
    batch = actions(prompt)
    if batch is None:
        return None
    return [{"tool": a.name, "args": dict(a.args), "allowedDecisions": list(a.allowed)} for a in batch]


def decided_actions(prompt: Any, payload: Any) -> list[dict[str, Any]] | None:
    """``status.approvals[].actions``: each action's decision, the arguments an edit changed, the message."""
    batch = actions(prompt)
    decisions = payload.get("decisions") if isinstance(payload, Mapping) else None
    if batch is None or not isinstance(decisions, Sequence) or len(decisions) != len(batch):
        return None
    out = []
    for action, d in zip(batch, decisions, strict=True):
        entry: dict[str, Any] = {"tool": action.name, "decision": d.get("type")}
        if d.get("type") == "edit":
            args = d.get("edited_action", {}).get("args", {})
            entry["edited"] = sorted(k for k, v in args.items() if action.args.get(k, object()) != v)
        if d.get("message"):
            entry["message"] = d["message"]
        out.append(entry)
    return out
