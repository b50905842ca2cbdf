"""Whether the admission objects that make decision annotations trustworthy are installed *as shipped*.

Rule: existence is not enough. A ValidatingAdmissionPolicy of the right name whose validations were edited
away or whose ``failurePolicy`` is ``Ignore``, or a binding narrowed by ``matchResources`` or pointing at
another policy, protects nothing, and the operator must then refuse decisions exactly as if it were
missing. Each object is compared with what ``deploy/admission`` ships:

* a policy: ``failurePolicy: Fail`` and a fingerprint of its CEL — every variable, match condition,
  validation and mutation, by name and expression text, in order (messages may be reworded freely);
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
    ("validatingadmissionpolicies", "agentrun-approvals"): "4f50079849974311",
    ("mutatingadmissionpolicies", "agentrun-stamp-decided-by"): "a9a5a0b4a504c603",
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


def fingerprint(spec: Mapping[str, Any]) -> str:
    """What a policy's CEL says, as a short digest: names and expressions of its CEL lists, in order."""
    parts = [
        [key, str(item.get("name") or ""), _expression(item)]
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
