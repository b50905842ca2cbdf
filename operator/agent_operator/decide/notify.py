"""What to notify, and the message. Pure: no I/O (``agent_operator.act.notifier`` sends).

Rule: a notification is owed once per (run, occasion, event), and its ledger key is a pure function of those
three — ``keys.derive(run uid, "notify/<occasion>", event, 0)`` — so every operator process, before or after
a crash, derives the same key for the same notification and the ledger lets it go out once. Occasions:

* an approval (its id): ``requested`` while it is pending, ``escalated`` once it is past its deadline under
  ``onTimeout: escalate``, ``expired`` once Postgres expired it (``cancel`` / ``readOnly``);
* a needs-human stop: one occasion per effect flagged for a human (``needs_human``), named by the effect's key
  and the number of times the run was reopened before (retry, resolve): each stop is notified once.

A ``requested`` notification is owed only while the approval is pending (a decision that came first makes
it moot); a row reserved before the decision is still carried to its end by the notifier.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from agent_operator.decide import model
from agentrun_core import canonical, keys, store
from agentrun_core.api import spec_schema

EVENTS = ("requested", "escalated", "expired", "needs_human")


@dataclasses.dataclass(frozen=True)
class NotifySpec:
    """``spec.approval.notify`` (the CRD's schema and CEL rules already refused malformed values)."""

    url: str
    format: str = spec_schema.default("approval.notify.format")  # one of spec_schema.NOTIFY_FORMATS
    secret_name: str | None = None  # a Secret in the run's own namespace (no namespace field exists)
    secret_key: str = spec_schema.default("approval.notify.tokenSecretRef.key")
    # The receiver dedupes by the Idempotency-Key header, so an unknown outcome may be sent again with the
    # same key. Default: True for the generic JSON format (its documented contract), False for Slack.
    dedupes: bool = True

    @classmethod
    def from_spec(cls, doc: Mapping[str, Any] | None) -> NotifySpec | None:
        """From ``spec.approval.notify`` (None when absent)."""
        if not isinstance(doc, Mapping) or not doc.get("url"):
            return None
        fmt = str(doc.get("format") or cls.format)
        secret = doc.get("tokenSecretRef") or {}
        dedupes = doc.get("receiverDedupes")
        return cls(
            url=str(doc["url"]),
            format=fmt,
            secret_name=str(secret["name"]) if secret.get("name") else None,
            secret_key=str(secret.get("key") or cls.secret_key),
            dedupes=bool(dedupes) if dedupes is not None else fmt == "json",
        )


@dataclasses.dataclass(frozen=True)
class Due:
    """One notification owed now: its ledger key, position and content."""

    key: str
    step: str  # "notify/<occasion>": the ledger row's step column
    event: str
    content: Mapping[str, Any]  # what the message says (stored as the row's args)

    @property
    def args_hash(self) -> str:
        return canonical.digest(dict(self.content))


def key_for(run_uid: str, occasion: str, event: str) -> tuple[str, str]:
    """(key, step) of the notification of ``event`` for ``occasion`` (an approval id or an effect key)."""
    step = f"notify/{occasion}"
    # Pinned to format 2: a notification already sent must keep its key whatever format new runs' effects get.
    return keys.derive(run_uid, step, event, 0, version=2), step


def due(world: model.World, needs_human: Sequence[Mapping[str, Any]] = ()) -> list[Due]:
    """The notifications owed by what ``world`` shows (``needs_human``: the run's flagged effects)."""
    run = world.run
    owed: list[Due] = []
    for approval in world.approvals:
        events: list[str] = []
        if approval.status == "pending":
            events.append("requested")
            policy = (
                model.ApprovalPolicy.from_json(approval.policy) if approval.policy else world.spec.approval
            )
            past = approval.deadline is not None and approval.deadline <= world.now
            if past and policy.on_timeout == "escalate":
                events.append("escalated")
        elif approval.status == "expired":
            events.append("expired")
        for event in events:
            key, step = key_for(run.uid, approval.approval_id, event)
            owed.append(Due(key, step, event, approval_content(world, approval, event)))
    if world.db is not None and world.db.status == "needs_human":
        for effect in needs_human:
            # The stop's occurrence: the flagged effect and how often the run was reopened before (a retry
            # that stops on the same effect again is a new stop, and notified again).
            occasion = f"{effect['idempotency_key']}/{world.db.reopened}"
            key, step = key_for(run.uid, occasion, "needs_human")
            owed.append(Due(key, step, "needs_human", needs_human_content(world, effect)))
    return owed


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def approval_content(world: model.World, approval: store.Approval, event: str) -> dict[str, Any]:
    run = world.run
    where = f"-n {run.namespace} {run.name}"
    return {
        "event": event,
        "run": {"namespace": run.namespace, "name": run.name, "uid": run.uid},
        "approval": {
            "id": approval.approval_id,
            "prompt": approval.prompt,
            "deadline": _iso(approval.deadline),
            "requestedAt": _iso(approval.requested_at),
            "status": approval.status,
        },
        "commands": {
            "approve": f"kubectl agentrun approve {where} --id {approval.approval_id}",
            "reject": f"kubectl agentrun reject {where} --id {approval.approval_id}",
        }
        if event != "expired"
        else {},
    }


def needs_human_content(world: model.World, effect: Mapping[str, Any]) -> dict[str, Any]:
    run = world.run
    key = str(effect["idempotency_key"])
    where = f"-n {run.namespace} {run.name}"
    return {
        "event": "needs_human",
        "run": {"namespace": run.namespace, "name": run.name, "uid": run.uid},
        "effect": {
            "key": key,
            "tool": effect.get("tool"),
            "step": effect.get("step"),
            "error": effect.get("error"),
        },
        "commands": {
            "sent": f"kubectl agentrun resolve {where} {key} --sent",
            "notSent": f"kubectl agentrun resolve {where} {key} --not-sent",
        },
    }


_TITLES = {
    "requested": "approval requested",
    "escalated": "approval past its deadline (escalated)",
    "expired": "approval expired",
    "needs_human": "run needs a human (effect of unknown outcome)",
}


def text(content: Mapping[str, Any]) -> str:
    """The human-readable message: what is asked, by when, and the exact commands to answer."""
    run = content["run"]
    event = str(content["event"])
    lines = [f"AgentRun {run['namespace']}/{run['name']}: {_TITLES.get(event, event)}"]
    approval = content.get("approval")
    if approval is not None:
        prompt = approval.get("prompt")
        shown = prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True, default=str)
        lines.append(f"approval {approval['id']}: {shown}")
        if approval.get("deadline"):
            lines.append(f"deadline: {approval['deadline']}")
    effect = content.get("effect")
    if effect is not None:
        lines.append(
            f"effect {effect['key']} ({effect.get('tool')}, step {effect.get('step')}): {effect.get('error')}"
        )
    for command in (content.get("commands") or {}).values():
        lines.append(f"  {command}")
    return "\n".join(lines)


def body(content: Mapping[str, Any], fmt: str, key: str) -> dict[str, Any]:
    """The request body: Slack's incoming-webhook shape (``text`` + ``blocks``) or the generic JSON one."""
    message = text(content)
    if fmt == "slack":
        return {
            "text": message,
            "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": message}}],
        }
    return {**dict(content), "text": message, "idempotencyKey": key}
