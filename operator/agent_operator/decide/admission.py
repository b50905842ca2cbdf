"""Whether the admission objects that make steering trustworthy are installed *as shipped*.

Every steering verb (approve/reject and their payload, fork, retry, resolve, cancel, suspend) is judged by
the API server: the policies check the requester's RBAC verb and stamp who did it. The operator applies
none of them while any of those objects is absent or not as shipped (``STEERING_OBJECTS``), since an edited
policy protects nothing: a validation edited away, ``failurePolicy: Ignore``, ``matchConstraints`` narrowed
to CREATE, a binding without ``Deny`` or narrowed by ``matchResources`` or pointing at another policy.

Each object is compared with what ``deploy/admission`` ships by a fingerprint of its WHOLE spec
(``fingerprint``): match constraints, match conditions, variables, validations, mutations, failure and
reinvocation policy, a binding's policy name, actions and match resources. Left out only what cannot
change a verdict — a validation's message, messageExpression and reason — and what the API server fills in
with the same meaning as absent (``matchPolicy: Equivalent``, a rule's ``scope: "*"``, an empty selector).
CEL text is compared with whitespace outside string literals collapsed (``cel_text``): CEL does not read
it, and YAML tools do not keep it — ``kubectl apply -k`` (kustomize) re-folds the manifests' ``>`` block
scalars with an extra blank line, which must not lock steering out.

The operator image does not carry ``deploy/``, so the fingerprints are constants here; a unit test
(tests/unit/test_admission_fingerprints.py) recomputes them from the manifests, so an edited policy that
was not re-fingerprinted fails CI rather than locking steering out in production.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

# (plural, name) -> fingerprint of the shipped spec. Two installs are shipped, and the operator accepts
# exactly one of them whole (``mode``):
#   "mutating"         deploy/admission: the ValidatingAdmissionPolicies below, and MutatingAdmissionPolicies
#                      (v1, served from Kubernetes 1.36) that stamp created-by / decided-by / resolved-by /
#                      retried-by (and a schedule's schedule-author) from request.userInfo;
#   "validating-only"  deploy/admission-vap-only (Kubernetes 1.34 and 1.35): the same validating objects and
#                      no mutating ones. Nothing stamps; the validating policies refuse any creation,
#                      decision, resolve or retry whose stamp is not the requester's own request.userInfo
#                      (the CLI sets them), so the guarantee is the same.
VALIDATING_OBJECTS = {
    ("validatingadmissionpolicies", "agentrun-approvals"): "d4eea9a2033426bd",
    ("validatingadmissionpolicybindings", "agentrun-approvals"): "49212e3b71a72a27",
    ("validatingadmissionpolicies", "agentrun-decision-payload"): "1eba351142573bbe",
    ("validatingadmissionpolicybindings", "agentrun-decision-payload"): "f1e133899ecee087",
    ("validatingadmissionpolicies", "agentrun-steering"): "6d9b054cd09eb8bb",
    ("validatingadmissionpolicybindings", "agentrun-steering"): "4fdc5adc5102df7e",
    ("validatingadmissionpolicies", "agentrun-fork"): "3832efe684262687",
    ("validatingadmissionpolicybindings", "agentrun-fork"): "595235bd7d932162",
    ("validatingadmissionpolicies", "agentrun-schedule-author"): "b307d510908653d8",
    ("validatingadmissionpolicybindings", "agentrun-schedule-author"): "c38df0c88d25c3af",
}
MUTATING_OBJECTS = {
    ("mutatingadmissionpolicies", "agentrun-stamp-created-by"): "0afa56ba06462f5d",
    ("mutatingadmissionpolicybindings", "agentrun-stamp-created-by"): "1e33c3d492fc2b52",
    ("mutatingadmissionpolicies", "agentrun-stamp-decided-by"): "1073369a2400f85e",
    ("mutatingadmissionpolicybindings", "agentrun-stamp-decided-by"): "998cc57fab782d31",
    ("mutatingadmissionpolicies", "agentrun-stamp-resolved-by"): "38b605c3e1fad333",
    ("mutatingadmissionpolicybindings", "agentrun-stamp-resolved-by"): "91c61f344a0c0bdd",
    ("mutatingadmissionpolicies", "agentrun-stamp-retried-by"): "37515d70f901afa5",
    ("mutatingadmissionpolicybindings", "agentrun-stamp-retried-by"): "7a7609e1c00cf04d",
    ("mutatingadmissionpolicies", "agentrun-stamp-schedule-author"): "b89edcc492755b71",
    ("mutatingadmissionpolicybindings", "agentrun-stamp-schedule-author"): "83a9fdbc4b6c5440",
}
# Every object either install may hold: all of them are looked at, whichever mode the cluster is in.
STEERING_OBJECTS = {**VALIDATING_OBJECTS, **MUTATING_OBJECTS}
MUTATING, VALIDATING_ONLY = "mutating", "validating-only"
MODES = (MUTATING, VALIDATING_ONLY)
ABSENT = "absent"
DIFFERS = "its spec (CEL, matchConstraints, matchConditions) differs from the shipped one (deploy/admission)"
BINDING_PLURALS = ("validatingadmissionpolicybindings", "mutatingadmissionpolicybindings")
# Fields the API server fills in that mean the same as leaving them out.
_DEFAULTS = {"matchPolicy": "Equivalent", "scope": "*", "failurePolicy": "Fail"}
# What a validation says when it refuses, not whether it refuses.
_WORDING = frozenset({"message", "messageExpression", "reason"})


def cel_text(expression: str) -> str:
    """``expression`` with each run of whitespace outside string literals made one space, and none at
    either end. Inside a literal (``'…'`` or ``"…"``, backslash escapes kept) every character counts: there
    whitespace is meaning (an annotation name, a message), and a changed literal is a changed policy."""
    out: list[str] = []
    quote: str | None = None
    escaped = pending_space = False
    for ch in expression:
        if quote is not None:
            out.append(ch)
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = None
            continue
        if ch.isspace():
            pending_space = bool(out)
            continue
        if pending_space:
            out.append(" ")
            pending_space = False
        out.append(ch)
        if ch in "'\"":
            quote = ch
    return "".join(out)


def canonical(value: Any) -> Any:
    """``value`` (a spec or part of one) without wording, API-server defaults and empty values, CEL text
    through ``cel_text``: two specs with the same canonical form admit and refuse the same requests."""
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if key in _WORDING or _DEFAULTS.get(key) == item:
                continue
            item = cel_text(item) if key == "expression" and isinstance(item, str) else canonical(item)
            if item in ({}, [], None, ""):
                continue
            out[str(key)] = item
        return out
    if isinstance(value, list):
        return [canonical(item) for item in value]
    return value


def fingerprint(spec: Mapping[str, Any]) -> str:
    """The whole spec (``canonical``) as a short digest."""
    text = json.dumps(canonical(spec), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _narrowed(match: Mapping[str, Any] | None) -> bool:
    """A binding's matchResources that selects less than every object (an empty selector selects all)."""
    return bool(canonical(match or {}))


def problem(plural: str, name: str, body: Mapping[str, Any]) -> str | None:
    """Why the live object ``plural/name`` does not guard steering as shipped (None: it does)."""
    spec: Mapping[str, Any] = body.get("spec") or {}
    if spec.get("failurePolicy", "Fail") != "Fail":
        return f"failurePolicy {spec.get('failurePolicy')} (must be Fail)"
    if plural in BINDING_PLURALS:
        if spec.get("policyName") != name:
            return f"binds {spec.get('policyName')!r}, not {name!r}"
        if plural == "validatingadmissionpolicybindings" and "Deny" not in (
            spec.get("validationActions") or ()
        ):
            return "validationActions without Deny"
        if _narrowed(spec.get("matchResources")):
            return "matchResources narrows what it applies to"
    if fingerprint(spec) != STEERING_OBJECTS.get((plural, name)):
        return DIFFERS
    return None


def mode(found: Mapping[tuple[str, str], str | None]) -> tuple[str | None, list[str]]:
    """Which shipped install the cluster holds, from what a look found of each of ``STEERING_OBJECTS``
    (``found[key]``: None when it is there as shipped, ``ABSENT`` when it is not there, else why it differs).
    ``(mode, [])`` for exactly one of the shipped sets; ``(None, problems)`` for anything else: a validating
    object absent or edited, or mutating objects partly installed or edited (a half-installed or edited
    stamping policy is no longer the shipped one, whatever the validating ones say). Pure."""
    validating = {k: found.get(k, ABSENT) for k in VALIDATING_OBJECTS}
    problems = [_named(k, v) for k, v in validating.items() if v is not None]
    mutating = {k: found.get(k, ABSENT) for k in MUTATING_OBJECTS}
    if all(v is None for v in mutating.values()):
        installed = MUTATING
    elif all(v == ABSENT for v in mutating.values()):
        installed = VALIDATING_ONLY
    else:
        installed = None
        # Some stamping objects there, some not (or edited): name each that is absent or differs.
        problems += [_named(k, v) for k, v in mutating.items() if v is not None]
    return (installed, []) if not problems else (None, problems)


def _named(key: tuple[str, str], why: str | None) -> str:
    return f"{key[0]}/{key[1]}" if why == ABSENT else f"{key[0]}/{key[1]} ({why})"
