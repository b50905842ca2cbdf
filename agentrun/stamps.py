"""Who did it: the ``*-by`` annotations a steering request carries, set to the caller's own identity.

Where the cluster serves MutatingAdmissionPolicy (Kubernetes 1.36 and newer, ``deploy/admission``) the API
server writes these stamps itself from ``request.userInfo``, over whatever the request carried. Where it
does not (1.34 and 1.35, ``deploy/admission-vap-only``) nothing writes them: the ValidatingAdmissionPolicies
refuse every creation, decision, resolve and retry whose stamp is not exactly the requester's
``request.userInfo``. So the CLI always sends them, learnt from a SelfSubjectReview (the identity the API
server authenticated, what ``kubectl auth whoami`` prints): the guarantee is the same in both modes, since a
stamp that is not the requester's own is refused either way; sending it only makes a correct request pass.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from agentrun_core.api import meta


@dataclasses.dataclass(frozen=True)
class Identity:
    username: str
    groups: tuple[str, ...]


def of_review(review: Mapping[str, Any]) -> Identity | None:
    """The identity in a SelfSubjectReview's answer (None: it names nobody). Pure."""
    info = (review.get("status") or {}).get("userInfo") or {}
    name = str(info.get("username") or "")
    return Identity(name, tuple(str(g) for g in info.get("groups") or ())) if name else None


def annotation_patch(patch: Mapping[str, str | None], who: Identity | None) -> dict[str, str | None]:
    """``patch`` (an annotation merge patch) with the stamps that its decision or resolve needs. Pure."""
    out = dict(patch)
    if who is None:
        return out
    if any(out.get(k) is not None for k in meta.DECISION_VERBS):
        out[meta.DECIDED_BY] = who.username
        out[meta.DECIDED_BY_GROUPS] = ",".join(who.groups)
    if out.get(meta.RESOLVE) is not None:
        out[meta.RESOLVED_BY] = who.username
    return out


def run_patch(body: Mapping[str, Any], who: Identity | None) -> dict[str, Any]:
    """A merge patch of an AgentRun with the retry stamp when it changes ``spec.retryGeneration``. Pure."""
    out = dict(body)
    if who is None or "retryGeneration" not in (out.get("spec") or {}):
        return out
    metadata = dict(out.get("metadata") or {})
    metadata["annotations"] = {**(metadata.get("annotations") or {}), meta.RETRIED_BY: who.username}
    out["metadata"] = metadata
    return out


def created(body: Mapping[str, Any], who: Identity | None) -> dict[str, Any]:
    """A new AgentRun's body with the creator's stamp. Pure."""
    out = dict(body)
    if who is None:
        return out
    metadata = dict(out.get("metadata") or {})
    metadata["annotations"] = {**(metadata.get("annotations") or {}), meta.CREATED_BY: who.username}
    out["metadata"] = metadata
    return out


def needs_identity(patch: Mapping[str, str | None]) -> bool:
    """Whether an annotation patch decides or resolves (and so needs the caller's stamps). Pure."""
    return any(patch.get(k) is not None for k in (*meta.DECISION_VERBS, meta.RESOLVE))
