"""Whether the admission objects that make decision annotations trustworthy are installed *as shipped*.

Rule: existence is not enough. A ValidatingAdmissionPolicy of the right name whose validations were edited
away or whose ``failurePolicy`` is ``Ignore``, or a binding narrowed by ``matchResources`` or pointing at
another policy, protects nothing, and the operator must then refuse decisions exactly as if it were
missing. Each object is compared with what ``deploy/admission`` ships:

* a policy: ``failurePolicy: Fail`` and a fingerprint of its CEL — every variable, match condition,
  validation and mutation, by name and expression text, in order (messages may be reworded freely). The
  text is compared with whitespace outside string literals collapsed (``cel_text``): CEL does not read it,
  and YAML tools do not keep it — ``kubectl apply -k`` (kustomize) re-folds the manifests' ``>`` block
  scalars with an extra blank line, which must not lock decisions out;
* a binding: the expected ``policyName``, ``Deny`` among its ``validationActions`` (validating bindings),
  and no ``matchResources`` that selects less than everything.

The operator image does not carry ``deploy/``, so the fingerprints are constants here; a unit test
(tests/unit/test_admission_fingerprints.py) recomputes them from the manifests, so an edited policy that
was not re-fingerprinted fails CI rather than locking decisions out in production.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

# plural -> name -> fingerprint (policies) or expected policyName (bindings).
POLICY_FINGERPRINTS = {
    ("validatingadmissionpolicies", "agentrun-approvals"): "baef81f580b7ae7e",
    ("mutatingadmissionpolicies", "agentrun-stamp-decided-by"): "c8d6278719394d77",
}
BINDING_POLICIES = {
    ("validatingadmissionpolicybindings", "agentrun-approvals"): "agentrun-approvals",
    ("mutatingadmissionpolicybindings", "agentrun-stamp-decided-by"): "agentrun-stamp-decided-by",
}
_CEL_LISTS = ("variables", "matchConditions", "validations", "mutations")


def _expression(item: Mapping[str, Any]) -> str:
    for holder in (item, item.get("applyConfiguration") or {}, item.get("jsonPatch") or {}):
        if isinstance(holder.get("expression"), str):
            return str(holder["expression"])
    return ""


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


def fingerprint(spec: Mapping[str, Any]) -> str:
    """What a policy's CEL says, as a short digest: names and expressions (``cel_text``) of its CEL lists,
    in order."""
    parts = [
        [key, str(item.get("name") or ""), cel_text(_expression(item))]
        for key in _CEL_LISTS
        for item in spec.get(key) or []
    ]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def _narrowed(match: Mapping[str, Any] | None) -> bool:
    """A binding's matchResources that selects less than every object (an empty selector selects all)."""
    if not match:
        return False
    if match.get("resourceRules") or match.get("excludeResourceRules"):
        return True
    return any(
        (match.get(sel) or {}).get("matchLabels") or (match.get(sel) or {}).get("matchExpressions")
        for sel in ("namespaceSelector", "objectSelector")
    )


def problem(plural: str, name: str, body: Mapping[str, Any]) -> str | None:
    """Why the live object ``plural/name`` does not protect decisions as shipped (None: it does)."""
    spec: Mapping[str, Any] = body.get("spec") or {}
    if (plural, name) in POLICY_FINGERPRINTS:
        if spec.get("failurePolicy", "Fail") != "Fail":
            return f"failurePolicy {spec.get('failurePolicy')} (must be Fail)"
        if fingerprint(spec) != POLICY_FINGERPRINTS[(plural, name)]:
            return "its CEL differs from the shipped policy (deploy/admission)"
        return None
    expected = BINDING_POLICIES.get((plural, name))
    if expected is not None and spec.get("policyName") != expected:
        return f"binds {spec.get('policyName')!r}, not {expected!r}"
    if plural == "validatingadmissionpolicybindings" and "Deny" not in (spec.get("validationActions") or ()):
        return "validationActions without Deny"
    if _narrowed(spec.get("matchResources")):
        return "matchResources narrows what it applies to"
    return None
