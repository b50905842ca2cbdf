"""Deciding a pending approval: ``agentrun approve`` / ``reject`` / ``respond`` and ``agentrun.client``.

Rule: which approval id is annotated (``choose``: the one the human saw) and the merge patch that sets the
decision (``patch_for``) are one piece, shared by every way of deciding; the command modules add what rides
on their decision (edits, a response, a tool-call batch's decisions). So ``respond_cli`` (a reject that
carries text, and the home of the edits an approval carries) needs nothing of ``approve_cli``: the import
runs one way (a contract in pyproject.toml).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from agentrun import batch_cli, cluster
from agentrun_core.api import meta

ANN = {"approve": meta.APPROVE, "reject": meta.REJECT}


def patch_for(decision: str, approval_id: str, comment: str | None) -> dict[str, str | None]:
    """The merge patch: set this decision, remove the opposite one (the API server refuses both at once)."""
    other = "reject" if decision == "approve" else "approve"
    patch: dict[str, str | None] = {ANN[decision]: approval_id, ANN[other]: None}
    if comment is not None:
        patch[meta.COMMENT] = comment
    return patch


def choose(
    status: dict[str, Any],
    where: str,
    wanted: str | None,
    interactive: bool,
    ask: Callable[[str], str] | None = None,
    decision: str = "approve",
) -> str:
    """The approval id to annotate, or ``CliError`` (pure apart from ``ask``, the interactive prompt)."""
    pending = status.get("pendingApproval") or {}
    pending_id = str(pending.get("id") or "")
    if not pending_id:
        raise cluster.CliError(
            f"AgentRun {where} has no pending approval (phase {status.get('phase') or 'unknown'})"
        )
    if wanted:
        if wanted != pending_id:
            raise cluster.CliError(
                f"{wanted} is not the pending approval of AgentRun {where} (pending: {pending_id}); "
                "nothing annotated"
            )
        return wanted
    if interactive and ask is not None:
        # A middleware batch reads as its tool calls; any other prompt as its JSON.
        prompt = batch_cli.describe(pending) or json.dumps(pending.get("prompt"), indent=2, default=str)
        deadline = f"\ndeadline: {pending['deadline']}" if pending.get("deadline") else ""
        shown = f"AgentRun {where} asks (approval {pending_id}):\n{prompt}{deadline}\n"
        answer = ask(shown + f"{decision} {pending_id}? [y/N] ")
        if answer.strip().lower() not in {"y", "yes"}:
            raise cluster.CliError("nothing decided")
        return pending_id
    asked = len(status.get("approvals") or ()) + 1
    if asked > 1:
        raise cluster.CliError(
            f"AgentRun {where} has asked {asked} approvals: say which one you decide with --id "
            f"(pending now: {pending_id}; see `agentrun get` / `kubectl get ar -o yaml`)"
        )
    return pending_id
