"""Humans steering a stopped run: retry (``spec.retryGeneration``) and resolve (annotation). Pure.

Postgres decides: ``store.reopen_run`` and ``store.resolve_effect`` are one conditional statement each
(only forward, only a stopped run, only an effect of unknown outcome), so a repeated or racing request changes
nothing twice.
This module decides what to ask for, and how a reopened run looks until its next attempt starts.

* Retry applies to a stopped run (Failed, Cancelled, needs-human). Raised while the run still runs, it waits
  and applies if the run then stops; a Succeeded run is never reopened (Warning, once per generation).
* Resolve applies to an effect of unknown outcome of a stopped run (``pending``, or ``failed`` without proof
  that nothing was performed); a needs-human run then continues by itself.
* A retry re-keys only the failed effects proven not performed; the others go back to ``pending`` under
  their key (``store.reopen_run``), and the Retried Event / ``status.interventions`` say which is which.
* Who: the ``retried-by`` / ``resolved-by`` stamps the API server writes from ``request.userInfo``
  (deploy/admission/steer-*.yaml). Without a stamp nothing is applied; nor while any steering policy is
  absent or not as shipped (``world.admission_ok``): a stamp is then just an annotation anyone who can
  patch the run can write. A retry refused so stays refused (raise it again once the policies are back).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agent_operator.decide import actions, approvals, model
from agentrun_core import store
from agentrun_core.api import limits, meta

# agentrun_interventions.kind -> the start reason of the attempt that follows the reopening
REOPEN_REASONS = {"retry": "retry", "resolve_sent": "resolved", "resolve_not_sent": "resolved"}


def parse_resolve(annotations: Mapping[str, str]) -> tuple[actions.ResolveEffect | None, str | None]:
    """(the resolve to apply, refusal) from the resolve annotations; both None when there is none."""
    value = annotations.get(meta.RESOLVE, "").strip()
    if not value:
        return None, None
    key, sep, outcome = value.rpartition("=")
    if not sep or not key or outcome not in ("sent", "not-sent"):
        return None, f"{meta.RESOLVE} must be <effect key>=sent or <effect key>=not-sent, not {value!r}"
    by = annotations.get(meta.RESOLVED_BY, "").strip()
    if not by:
        return None, approvals.unstamped(meta.RESOLVE, meta.RESOLVED_BY, "agentrun steering")
    text = annotations.get(meta.RESOLVE_RESULT)
    result = None
    if text:
        if outcome != "sent":
            return None, f"{meta.RESOLVE_RESULT} is only meaningful with =sent"
        if len(text.encode()) > limits.RESOLVE_RESULT_MAX_BYTES:
            return None, f"{meta.RESOLVE_RESULT} is larger than {limits.RESOLVE_RESULT_MAX_BYTES} bytes"
        try:
            result = json.loads(text)
        except ValueError as exc:
            return None, f"{meta.RESOLVE_RESULT} is not JSON: {exc}"
    return actions.ResolveEffect(key.strip(), outcome.replace("-", "_"), by, result), None


def resolve(world: model.World, plan: actions.Plan) -> bool:
    """Plan a resolve from the annotations; True when a ResolveEffect action was planned."""
    if world.annotations_handled or world.db is None:
        return False
    request, refusal = parse_resolve(world.run.annotations)
    if request is None and refusal is None:
        return False
    if world.admission_ok is None:
        plan.soon(5.0)  # could not tell whether the policies are installed: apply nothing, look again
        return False
    plan.actions.append(actions.RemoveResolveAnnotations())
    if not world.admission_ok:
        value = world.run.annotations.get(meta.RESOLVE, "")
        plan.warn("SteeringPolicyMissing", f"resolve {value} ignored: " + approvals.policy_missing(world))
        return False
    if refusal is not None:
        plan.warn("ResolveRefused", refusal)
        return False
    assert request is not None
    plan.actions.append(request)
    return True


def retry(world: model.World, plan: actions.Plan, stopped: bool) -> bool:
    """Plan a retry when spec.retryGeneration was raised past the applied one; True when planned."""
    db = world.db
    wanted = world.spec.retry_generation
    if db is None or wanted <= db.retry_generation or not stopped:
        return False
    if int(world.status.get("observedRetryGeneration") or 0) >= wanted:
        return False  # acted on already (refused, or the run succeeded): tell once, not every reconcile
    if db.status == "succeeded":
        plan.warn("RetryRefused", f"retry generation {wanted} ignored: the run succeeded (nothing to retry)")
        return False
    if world.admission_ok is None:
        plan.soon(5.0)
        return False
    if not world.admission_ok:
        plan.warn(
            "SteeringPolicyMissing", f"retry generation {wanted} ignored: " + approvals.policy_missing(world)
        )
        return False
    by = world.run.annotations.get(meta.RETRIED_BY, "").strip()
    if not by:
        plan.warn(
            "RetryRefused",
            approvals.unstamped(f"retry generation {wanted}", meta.RETRIED_BY, "agentrun steering"),
        )
        return False
    plan.actions.append(actions.ReopenRun(generation=wanted, by=by))
    return True


def latest(world: model.World) -> store.Intervention | None:
    return world.interventions[-1] if world.interventions else None


def retried_since_expiry(world: model.World) -> bool:
    """A retry came after every expired approval's decision: their onTimeout follow-ups (cancel) are spent,
    so the retried run is not cancelled again at once (it resumes with the expiry as its resume payload)."""
    last = latest(world)
    if last is None or last.kind != "retry" or last.at is None:
        return False
    expired = [a.decided_at for a in world.approvals if a.status == "expired"]
    return bool(expired) and all(at is not None and at <= last.at for at in expired)


def reopen_reason(world: model.World) -> tuple[str, str]:
    """(attempt start reason, message) for a run a human just reopened."""
    last = latest(world)
    if last is None:
        return "retry", "reopened"
    reason = REOPEN_REASONS.get(last.kind, "retry")
    if last.kind == "retry":
        return (
            reason,
            f"retried (generation {last.generation}) by {last.by}; resuming from the last checkpoint",
        )
    outcome = "sent" if last.kind == "resolve_sent" else "not sent"
    return (
        reason,
        f"effect {last.effect_key} resolved as {outcome} by {last.by}; resuming from the checkpoint",
    )


def status_entries(world: model.World, limit: int = 20) -> list[dict[str, Any]]:
    """``status.interventions``: the latest ``limit`` retries and resolves, oldest first."""
    out: list[dict[str, Any]] = []
    for item in world.interventions[-limit:]:
        entry: dict[str, Any] = {"kind": item.kind, "by": item.by}
        if item.at is not None:
            entry["at"] = item.at
        if item.effect_key:
            entry["key"] = item.effect_key
        if item.generation is not None:
            entry["generation"] = int(item.generation)
        detail = item.detail if isinstance(item.detail, dict) else {}
        if item.kind == "retry" and ("rekeyed" in detail or "kept" in detail):
            # which failed effects the retry re-keyed, and which it kept under their key (store.reopen_run)
            entry["rekeyed"] = [str(e.get("key")) for e in detail.get("rekeyed") or ()]
            entry["kept"] = [str(e.get("key")) for e in detail.get("kept") or ()]
        out.append(entry)
    return out


SUMMARY_KEYS = 8  # effects named per list in the Retried Event (all of them are in status and Postgres)


def _named(effects: list[dict[str, Any]]) -> str:
    shown = ", ".join(f"{e.get('key')} ({e.get('tool')})" for e in effects[:SUMMARY_KEYS])
    more = len(effects) - SUMMARY_KEYS
    return shown + (f" and {more} more" if more > 0 else "")


def retry_summary(generation: int, by: str, rekeyed: list[dict[str, Any]], kept: list[dict[str, Any]]) -> str:
    """The Retried Event's message: which failed effects the retry re-keyed and which it kept, and why."""
    head = f"retry generation {generation} by {by}: "
    if not rekeyed and not kept:
        return head + "no failed effect to re-key"
    parts = []
    if rekeyed:
        parts.append(
            f"re-keyed {len(rekeyed)} failed effect{'s' if len(rekeyed) > 1 else ''} proven not performed: "
            f"{_named(rekeyed)}"
        )
    if kept:
        parts.append(
            f"kept {len(kept)} under its key (may have been performed; back to pending: the tool's lookup "
            f"or a provider that dedupes by key settles it, else `agentrun resolve`): {_named(kept)}"
        )
    return head + "; ".join(parts)
