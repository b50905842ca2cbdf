"""The operator's admission check knows the shipped policies: its fingerprints are the manifests', and an
edited, weakened or narrowed object is reported (then decisions are refused, as if it were missing)."""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from agent_operator import kube
from agent_operator.decide import admission

ADMISSION_DIR = Path(__file__).resolve().parents[2] / "deploy" / "admission"
PLURAL = {
    "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
    "MutatingAdmissionPolicy": "mutatingadmissionpolicies",
    "MutatingAdmissionPolicyBinding": "mutatingadmissionpolicybindings",
}


def _shipped() -> dict[tuple[str, str], dict[str, Any]]:
    found = {}
    for path in sorted(ADMISSION_DIR.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") in PLURAL:
                found[(PLURAL[doc["kind"]], doc["metadata"]["name"])] = doc
    return found


def test_fingerprints_are_the_shipped_manifests() -> None:
    shipped = _shipped()
    for key in kube.ADMISSION_OBJECTS:
        assert key in shipped, key
        digest = admission.fingerprint(shipped[key]["spec"])
        assert admission.problem(*key, shipped[key]) is None, (key, digest)


def test_weakened_objects_are_reported() -> None:
    shipped = _shipped()
    vap = ("validatingadmissionpolicies", "agentrun-approvals")
    binding = ("validatingadmissionpolicybindings", "agentrun-approvals")
    mbinding = ("mutatingadmissionpolicybindings", "agentrun-stamp-decided-by")

    edited = copy.deepcopy(shipped[vap])
    edited["spec"]["validations"] = edited["spec"]["validations"][1:]  # a check removed
    assert admission.problem(*vap, edited) == admission.DIFFERS
    ignored = copy.deepcopy(shipped[vap])
    ignored["spec"]["failurePolicy"] = "Ignore"
    assert "failurePolicy Ignore" in (admission.problem(*vap, ignored) or "")
    reworded = copy.deepcopy(shipped[vap])
    reworded["spec"]["validations"][0]["message"] = "other words"
    assert admission.problem(*vap, reworded) is None

    audit = copy.deepcopy(shipped[binding])
    audit["spec"]["validationActions"] = ["Audit"]
    assert admission.problem(*binding, audit) == "validationActions without Deny"
    narrowed = copy.deepcopy(shipped[mbinding])
    narrowed["spec"]["matchResources"] = {"namespaceSelector": {"matchLabels": {"x": "y"}}}
    assert admission.problem(*mbinding, narrowed) == "matchResources narrows what it applies to"
    everything = copy.deepcopy(shipped[mbinding])
    everything["spec"]["matchResources"] = {
        "namespaceSelector": {},
        "objectSelector": {},
        "matchPolicy": "Equivalent",
    }
    assert admission.problem(*mbinding, everything) is None
    other = copy.deepcopy(shipped[mbinding])
    other["spec"]["policyName"] = "agentrun-stamp-created-by"
    assert "binds 'agentrun-stamp-created-by'" in (admission.problem(*mbinding, other) or "")


def test_cel_text_ignores_layout_but_not_literals() -> None:
    assert admission.cel_text("a ||\n\n  b.c( 'x' )\n") == "a || b.c( 'x' )"
    assert admission.cel_text("  a\n  .name(x)") == "a .name(x)"
    # Inside a literal every character counts, escapes included.
    assert admission.cel_text("f('a  b')") != admission.cel_text("f('a b')")
    assert admission.cel_text(r"f('it\'s  x',   y)") == r"f('it\'s  x', y)"
    assert admission.cel_text('f("a\\"  b")  ||  z') == 'f("a\\"  b") || z'


def test_policies_applied_with_kustomize_are_the_shipped_ones() -> None:
    """What ``kubectl apply -k deploy/base`` sends (the README's way to install): kustomize re-folds the
    ``>`` block scalars of the CEL (an extra blank line), and the operator must still know the policies;
    otherwise it refuses every decision on a cluster installed as documented."""
    rendered = subprocess.run(
        [shutil.which("kubectl") or "kubectl", "kustomize", str(ADMISSION_DIR.parent / "base")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = {
        (PLURAL[doc["kind"]], doc["metadata"]["name"]): doc
        for doc in yaml.safe_load_all(rendered)
        if doc and doc.get("kind") in PLURAL
    }
    shipped = _shipped()
    vap = ("validatingadmissionpolicies", "agentrun-approvals")
    assert found[vap]["spec"]["validations"] != shipped[vap]["spec"]["validations"]  # the premise: re-folded
    for key in kube.ADMISSION_OBJECTS:
        assert admission.problem(*key, found[key]) is None, key


DIFFERS = admission.DIFFERS


def test_every_steering_policy_is_guarded() -> None:
    """Issue 35.4: the operator knows the policies of EVERY steering verb, not only the approval ones."""
    guarded = {name for _, name in kube.ADMISSION_OBJECTS}
    for name in (
        "agentrun-approvals",
        "agentrun-decision-payload",
        "agentrun-stamp-created-by",
        "agentrun-stamp-decided-by",
        "agentrun-steering",
        "agentrun-stamp-resolved-by",
        "agentrun-stamp-retried-by",
        "agentrun-fork",
    ):
        assert name in guarded, name
    shipped = _shipped()
    for plural in ("validatingadmissionpolicies", "validatingadmissionpolicybindings"):
        assert (plural, "agentrun-steering") in kube.ADMISSION_OBJECTS
        edited = copy.deepcopy(shipped[(plural, "agentrun-steering")])
        if plural.endswith("bindings"):
            edited["spec"]["validationActions"] = ["Warn"]
            assert admission.problem(plural, "agentrun-steering", edited) == "validationActions without Deny"
        else:
            edited["spec"]["validations"] = edited["spec"]["validations"][2:]  # the resolve verb check gone
            assert admission.problem(plural, "agentrun-steering", edited) == DIFFERS


def test_match_constraints_and_conditions_count() -> None:
    """A policy narrowed to CREATE (or to another resource, or with a matchCondition that skips requests)
    guards nothing the verbs do on UPDATE: reported, while what the API server fills in is not."""
    shipped = _shipped()
    vap = ("validatingadmissionpolicies", "agentrun-steering")
    narrowed = copy.deepcopy(shipped[vap])
    narrowed["spec"]["matchConstraints"]["resourceRules"][0]["operations"] = ["CREATE"]
    assert admission.problem(*vap, narrowed) == DIFFERS
    skipped = copy.deepcopy(shipped[vap])
    skipped["spec"]["matchConditions"] = [{"name": "never", "expression": "false"}]
    assert admission.problem(*vap, skipped) == DIFFERS
    excluded = copy.deepcopy(shipped[vap])
    excluded["spec"]["matchConstraints"]["objectSelector"] = {"matchLabels": {"guarded": "yes"}}
    assert admission.problem(*vap, excluded) == DIFFERS
    mutating = ("mutatingadmissionpolicies", "agentrun-stamp-retried-by")
    other = copy.deepcopy(shipped[mutating])
    other["spec"]["matchConstraints"]["resourceRules"][0]["resources"] = ["agentruns/status"]
    assert admission.problem(*mutating, other) == DIFFERS
    # What a live object looks like after the API server's defaulting: still the shipped policy.
    live = copy.deepcopy(shipped[vap])
    match = live["spec"]["matchConstraints"]
    match.update({"matchPolicy": "Equivalent", "namespaceSelector": {}, "objectSelector": {}})
    for rule in match["resourceRules"]:
        rule["scope"] = "*"
    assert admission.problem(*vap, live) is None


def test_the_operator_may_read_every_steering_object() -> None:
    """The operator's ClusterRole names each object it checks: a 403 would read as "unknown" and apply no
    steering at all on a cluster installed as documented."""
    docs = yaml.safe_load_all((ADMISSION_DIR.parent / "base" / "rbac-operator.yaml").read_text())
    readable = {
        (resource, name)
        for doc in docs
        if doc and doc.get("kind") == "ClusterRole"
        for rule in doc.get("rules") or ()
        if "get" in rule.get("verbs", ()) and "admissionregistration.k8s.io" in rule.get("apiGroups", ())
        for resource in rule.get("resources") or ()
        for name in rule.get("resourceNames") or ()
    }
    for key in kube.ADMISSION_OBJECTS:
        assert key in readable, key


def _rendered(*where: str) -> dict[tuple[str, str], dict[str, Any]]:
    rendered = subprocess.run(
        [shutil.which("kubectl") or "kubectl", "kustomize", str(ADMISSION_DIR.parent.joinpath(*where))],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {
        (PLURAL[doc["kind"]], doc["metadata"]["name"]): doc
        for doc in yaml.safe_load_all(rendered)
        if doc and doc.get("kind") in PLURAL
    }


def _look(objects: dict[tuple[str, str], dict[str, Any]]) -> dict[tuple[str, str], str | None]:
    """What the operator's look finds of each guarded object on a cluster holding ``objects``."""
    return {
        key: admission.problem(*key, objects[key]) if key in objects else admission.ABSENT
        for key in kube.ADMISSION_OBJECTS
    }


def test_each_shipped_install_is_one_mode() -> None:
    """Kubernetes 1.34+: deploy/admission (and deploy/base) is mode "mutating"; deploy/admission-vap-only
    (and deploy/overlays/k8s-1.34) holds no MutatingAdmissionPolicy and is mode "validating-only"."""
    assert admission.mode(_look(_rendered("admission"))) == (admission.MUTATING, [])
    assert admission.mode(_look(_rendered("base"))) == (admission.MUTATING, [])
    for where in (("admission-vap-only",), ("overlays", "k8s-1.34")):
        objects = _rendered(*where)
        assert not any(plural.startswith("mutating") for plural, _ in objects), where
        # lists.flatten() is not in 1.34's CEL: the operator's own input bound stands in (not steering).
        assert ("validatingadmissionpolicies", "agentrun-input-limits") not in objects, where
        assert set(objects) >= set(admission.VALIDATING_OBJECTS), where
        assert admission.mode(_look(objects)) == (admission.VALIDATING_ONLY, []), where


def test_anything_between_the_two_installs_is_refused() -> None:
    """Exactly one shipped set: a stamping policy missing from a full install, one stamping policy added to
    a VAP-only install, an edited one, or a validating one missing from either, is no mode at all."""
    full = _rendered("admission")
    half = dict(full)
    del half[("mutatingadmissionpolicies", "agentrun-stamp-decided-by")]
    installed, problems = admission.mode(_look(half))
    assert installed is None and problems == ["mutatingadmissionpolicies/agentrun-stamp-decided-by"]

    vap_only = _rendered("admission-vap-only")
    one_more = dict(vap_only)
    key = ("mutatingadmissionpolicies", "agentrun-stamp-retried-by")
    one_more[key] = full[key]
    installed, problems = admission.mode(_look(one_more))
    # the other stamping objects absent
    assert installed is None and len(problems) == len(admission.MUTATING_OBJECTS) - 1, problems

    edited = copy.deepcopy(full)
    edited[key]["spec"]["mutations"][0]["applyConfiguration"]["expression"] = "Object{}"
    assert admission.mode(_look(edited)) == (None, [f"{key[0]}/{key[1]} ({admission.DIFFERS})"])

    for install in (full, vap_only):
        gone = dict(install)
        del gone[("validatingadmissionpolicybindings", "agentrun-steering")]
        assert admission.mode(_look(gone)) == (
            None,
            ["validatingadmissionpolicybindings/agentrun-steering"],
        )
    assert admission.mode(_look({}))[0] is None


def test_validating_policies_require_every_stamp() -> None:
    """In VAP-only mode nothing stamps: each stamp must be required to be the requester's by a validation
    (not merely "unchanged or the requester's"), or a request without it would pass."""
    shipped = _shipped()
    steer = shipped[("validatingadmissionpolicies", "agentrun-steering")]["spec"]["validations"]
    text = [admission.cel_text(v["expression"]) for v in steer]
    for stamp, verb in (("resolved-by", "resolving"), ("retried-by", "retrying")):
        want = f"!variables.{verb} || variables.ann[?'agentrun.dev/{stamp}'].orValue('') == variables.user"
        assert want in text, stamp
    approvals = shipped[("validatingadmissionpolicies", "agentrun-approvals")]["spec"]["validations"]
    joined = " ".join(admission.cel_text(v["expression"]) for v in approvals)
    assert "variables.ann[?'agentrun.dev/created-by'].orValue('') == variables.user" in joined
    assert "variables.ann[?'agentrun.dev/decided-by'].orValue('') == variables.user" in joined
    author = shipped[("validatingadmissionpolicies", "agentrun-schedule-author")]["spec"]["validations"]
    joined = " ".join(admission.cel_text(v["expression"]) for v in author)
    assert "variables.templateWritten ? variables.author == variables.user" in joined


def test_the_mode_found_is_exported() -> None:
    """Where the operator's status lives for the cluster as a whole: its metrics (per run, the condition
    ApprovalPolicyMissing). Exactly one mode series is 1."""
    from agent_operator.observe import metrics

    def value(mode: str) -> float | None:
        return metrics.REGISTRY.get_sample_value("agentrun_operator_admission_mode", {"mode": mode})

    metrics.admission_mode(admission.VALIDATING_ONLY)
    assert [value(m) for m in ("mutating", "validating-only", "none", "unknown")] == [0, 1, 0, 0]
    metrics.admission_mode(None)
    assert [value(m) for m in ("mutating", "validating-only", "none", "unknown")] == [0, 0, 1, 0]
    assert "agentrun_operator_admission_mode" in metrics.exported_names(metrics.REGISTRY)
