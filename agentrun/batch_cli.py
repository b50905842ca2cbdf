"""Deciding a LangChain ``HumanInTheLoopMiddleware`` batch per action from ``kubectl agentrun approve`` /
``reject``: one decision per tool call the middleware asks about (``agentrun_core.hitl``).

``approve NAME --id ID`` approves every action; per action, everything not named is approved and:
``--set N.FIELD=TEXT`` edits argument FIELD of action N, ``--reject N[=MESSAGE]`` rejects action N (the
model is told why), ``--respond N=TEXT`` answers for action N's tool (it does not run), or ``--decisions
JSON|@FILE`` gives the whole list in the middleware's own shape. ``reject NAME --id ID`` rejects every action
(``--decisions`` with only reject / respond). The checked list rides on the decision, in the same request, as
``agentrun.dev/decisions``: every rule of deciding holds for it (see ``agentrun.deciding``), and the
operator checks it again against the prompt Postgres recorded. Pure but for reading ``@FILE``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentrun import cluster
from agentrun_core import hitl


def batch(status: dict[str, Any]) -> tuple[hitl.Action, ...] | None:
    return hitl.actions((status.get("pendingApproval") or {}).get("prompt"))


def describe(pending: dict[str, Any]) -> str | None:
    """The batch as a human reads it before deciding (None: the prompt is not a batch)."""
    actions = hitl.actions(pending.get("prompt"))
    if actions is None:
        return None
    lines = [f"{len(actions)} tool call{'s' if len(actions) != 1 else ''} to review:"]
    for a in actions:
        lines.append(f"  [{a.index}] {a.name}  (allows {', '.join(a.allowed) or 'nothing'})")
        for key, value in a.args.items():
            shown = value if isinstance(value, str) else json.dumps(value, default=str)
            lines.append(f"        {key}: {shown}")
    return "\n".join(lines)


def _index(text: str, actions: tuple[hitl.Action, ...], flag: str) -> int:
    if not text.strip().isdigit() or int(text) >= len(actions):
        raise cluster.CliError(
            f"{flag}: there is no action {text!r}: the batch has {len(actions)} action"
            f"{'s' if len(actions) != 1 else ''} (0-{len(actions) - 1}); nothing annotated"
        )
    return int(text)


def _load(spec: str) -> Any:
    if spec.startswith("@"):
        try:
            spec = Path(spec[1:]).read_text(encoding="utf-8")
        except OSError as exc:
            raise cluster.CliError(f"--decisions {spec}: cannot read it: {exc}") from exc
    try:
        return hitl.parse(spec)
    except hitl.DecisionRefused as exc:
        raise cluster.CliError(f"--decisions: {exc}; nothing annotated") from None


def decisions(
    status: dict[str, Any],
    decision: str,
    *,
    given: str | None = None,
    edits: dict[str, str] | None = None,
    rejects: list[str] | None = None,
    responds: list[str] | None = None,
    response: str | None = None,
) -> str | None:
    """The ``agentrun.dev/decisions`` value (None: the decision alone says it), checked against the pending
    batch; ``CliError`` with the reason otherwise. ``decision``: approved | rejected."""
    actions = batch(status)
    per_action = bool(edits or rejects or responds)
    if actions is None:
        if given is not None or rejects or responds:
            raise cluster.CliError(
                "the pending approval is not a HumanInTheLoopMiddleware batch: --decisions, --reject and "
                "--respond decide its actions one by one; nothing annotated"
            )
        return None
    if given is not None and per_action:
        raise cluster.CliError(
            "--decisions gives every action's decision: not with --set, --reject, --respond"
        )
    raw: Any = None
    if given is not None:
        raw = _load(given)
    elif per_action:
        raw = _per_action(actions, edits or {}, rejects or [], responds or [])
    try:
        checked = hitl.decide(
            (status.get("pendingApproval") or {}).get("prompt"), decision, decisions=raw, response=response
        )
    except hitl.DecisionRefused as exc:
        raise cluster.CliError(f"{exc}; nothing annotated") from None
    return None if raw is None else json.dumps(checked, separators=(",", ":"))


def _per_action(
    actions: tuple[hitl.Action, ...], edits: dict[str, str], rejects: list[str], responds: list[str]
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"type": "approve"} for _ in actions]
    named: dict[int, str] = {}

    def claim(i: int, flag: str) -> None:
        if named.setdefault(i, flag) != flag:
            raise cluster.CliError(f"action {i} is given both {named[i]} and {flag}: one decision per action")

    for key, text in edits.items():
        where, sep, field = key.partition(".")
        if not sep:  # a one-action batch needs no index
            if len(actions) != 1:
                raise cluster.CliError(
                    f"--set {key}=...: say which action it edits "
                    f"(--set N.{key}=TEXT, N in 0-{len(actions) - 1})"
                )
            where, field = "0", key
        i = _index(where, actions, f"--set {key}")
        claim(i, "--set")
        edited = out[i].setdefault("edited_action", {"name": actions[i].name, "args": {}})
        edited["args"][field] = text
        out[i]["type"] = "edit"
    for item in rejects:
        where, sep, message = item.partition("=")
        i = _index(where, actions, f"--reject {item}")
        claim(i, "--reject")
        out[i] = {"type": "reject", **({"message": message} if sep else {})}
    for item in responds:
        where, sep, message = item.partition("=")
        if not sep:
            raise cluster.CliError(
                f"--respond {item}: expected N=TEXT (the answer the model gets for action N)"
            )
        i = _index(where, actions, f"--respond {item}")
        claim(i, "--respond")
        out[i] = {"type": "respond", "message": message}
    return out
