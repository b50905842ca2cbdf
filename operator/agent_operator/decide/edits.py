"""What a human's decision carries to the graph besides yes/no: edits (with an approval) or a response (with
a rejection), in LangGraph's human-in-the-loop shape (``agentrun_core.store.rows.resume_payload``). Pure.

Annotations (``kubectl agentrun approve NAME --id ID --set body=TEXT`` / ``respond NAME --id ID --message
TEXT``):

* ``edit.agentrun.dev/<field>: <text>`` — one per edited field, set in the same request as
  ``agentrun.dev/approve``; ``<field>`` must be listed in the pending approval's prompt under ``editable``;
* ``agentrun.dev/response: <text>`` — set in the same request as ``agentrun.dev/reject``;
* ``agentrun.dev/decisions: <JSON list>`` — a LangChain ``HumanInTheLoopMiddleware`` batch decided per action
  (``agentrun_core.hitl``), set in the same request as ``agentrun.dev/approve`` or ``agentrun.dev/reject``.

The API server refuses all else (deploy/admission/edits-policy.yaml: shape, size, only with the decision,
fields judged against the prompt of the approval pending BEFORE the request). This module is the operator's
own line: it repeats those checks against the prompt Postgres recorded, so a decision whose payload does not
fit is refused (Warning event) and the approval stays pending: nothing is lost, the human decides again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentrun_core import hitl
from agentrun_core.api import limits, meta

# The admission policy (deploy/admission/edits-policy.yaml) enforces the same numbers, rendered from these.


def from_annotations(annotations: Mapping[str, str]) -> tuple[dict[str, str], str | None]:
    """(edits by field, response) as annotated."""
    edits = {k[len(meta.EDIT_PREFIX) :]: v for k, v in annotations.items() if k.startswith(meta.EDIT_PREFIX)}
    response = annotations.get(meta.RESPONSE)
    return edits, response


def payload_annotations(annotations: Mapping[str, str]) -> tuple[str, ...]:
    """The payload annotations present (removed with the decision's once it is applied)."""
    return tuple(
        k for k in annotations if k.startswith(meta.EDIT_PREFIX) or k in (meta.RESPONSE, meta.DECISIONS)
    )


def editable(prompt: Any) -> tuple[str, ...]:
    """The fields a prompt lets the approver edit (``{"editable": ["subject", "body"], ...}``)."""
    fields = prompt.get("editable") if isinstance(prompt, Mapping) else None
    return tuple(str(f) for f in fields) if isinstance(fields, list) else ()


def action(prompt: Any) -> str | None:
    """The action the prompt asks about (``{"action": "send_email", ...}``), for the edit's ``args``."""
    name = prompt.get("action") if isinstance(prompt, Mapping) else None
    return str(name) if name else None


def problem(decision: str, edits: Mapping[str, str], response: str | None, prompt: Any) -> str | None:
    """Why this payload cannot go with this decision on this approval; None when it can."""
    if edits and decision != "approved":
        return f"edits ({meta.EDIT_PREFIX}*) go with an approval only ({meta.APPROVE})"
    if response is not None and decision != "rejected":
        return f"{meta.RESPONSE} goes with {meta.REJECT} only (kubectl agentrun respond)"
    if response is not None and not (0 < len(response) <= limits.RESPONSE_MAX_CHARS):
        return f"{meta.RESPONSE} must be 1 to {limits.RESPONSE_MAX_CHARS} characters"
    if not edits:
        return None
    allowed = editable(prompt)
    unknown = sorted(set(edits) - set(allowed))
    if unknown:
        return (
            f"cannot edit {', '.join(unknown)}: the approval's prompt lets you edit "
            f"{', '.join(allowed) if allowed else 'nothing'}"
        )
    if len(edits) > limits.EDIT_MAX_FIELDS:
        return f"at most {limits.EDIT_MAX_FIELDS} edited fields"
    long = sorted(k for k, v in edits.items() if len(v) > limits.EDIT_MAX_CHARS)
    if long:
        return f"edited {', '.join(long)} longer than {limits.EDIT_MAX_CHARS} characters"
    return None


def batch_decisions(
    decision: str, edits: Mapping[str, str], response: str | None, decisions: str | None, prompt: Any
) -> tuple[list[dict[str, Any]] | None, str | None]:
    """(decisions, refusal) answering a HumanInTheLoopMiddleware batch in its own shape, checked against the
    prompt Postgres recorded; (None, None) when the prompt is not a batch and no decisions were annotated."""
    if hitl.actions(prompt) is None and decisions is None:
        return None, None
    if edits:
        return None, (
            f"{meta.EDIT_PREFIX}* annotations do not apply to a HumanInTheLoopMiddleware batch: edit an "
            "action in its decision (kubectl agentrun approve NAME --id ID --set N.FIELD=TEXT)"
        )
    try:
        return hitl.decide(prompt, decision, decisions=decisions, response=response), None
    except hitl.DecisionRefused as exc:
        return None, f"{meta.DECISIONS if decisions is not None else 'the decision'}: {exc}"


def status_fields(payload: Any) -> dict[str, Any]:
    """What ``status.approvals[]`` shows of a payload: its type, the edited fields, the response. Nothing
    for a plain accept or ignore (``decision`` already says approved / rejected / expired)."""
    if not isinstance(payload, Mapping) or payload.get("type") not in ("edit", "response"):
        return {}
    out: dict[str, Any] = {"type": payload["type"]}
    args = payload.get("args")
    if payload["type"] == "edit" and isinstance(args, Mapping):
        out["edited"] = sorted((args.get("args") or {}).keys())
    if payload["type"] == "response" and isinstance(args, str):
        out["response"] = args
    return out
