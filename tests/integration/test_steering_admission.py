"""Every steering verb authorised like an approval (issue 35.3-35.5): the API server's own answers, as real
identities (client certificates and a ServiceAccount token), with the shipped policies of deploy/admission.

The matrix: the five identities of tests/integration/test_approval_admission.py — the creator (editor +
approver), the approver (approver, and here also resolver and retrier), the editor (editor only), a
stranger (no role), a ServiceAccount (editor + approver) — times the steering verbs: fork (plain, with an
edit, approving what it carries), retry, resolve, cancel, suspend and resume. A verb "takes effect" when the
object carries it afterwards (the fork exists, the field or annotation is set). No operator here: the
end-to-end refusals (a fork past a rejected approval, the operator without the policies) are in
tests/integration/test_steering_guard.py.

Then a namespace that requires four eyes (labels the run author cannot edit): a creator who sets
``allowSelfApproval: true`` is refused, at creation and when approving a run created before the label.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from test_approval_admission import CUSTOM, Arena, _run_body, arena_fixture

from agentrun_core.api import limits, meta
from tests.support.waiting import wait_for

ACTORS = ("creator", "approver", "editor", "stranger", "serviceaccount")
VERBS = ("fork", "fork-with-set", "fork-approve", "retry", "resolve", "cancel", "suspend", "resume")
# Who may: fork needs create + get on the source (creator, editor, ServiceAccount: editors); a fork that
# carries edits or decided approvals also needs approve on the source; retry and resolve need their verbs
# (only the approver holds them here); cancel, suspend and resume need the verbs of agentrun-editor, which
# the approver's `patch` is not.
ALLOWED = {
    "fork": {"creator", "editor", "serviceaccount"},
    "fork-with-set": {"creator", "serviceaccount"},
    "fork-approve": {"creator", "serviceaccount"},
    "retry": {"approver"},
    "resolve": {"approver"},
    "cancel": {"creator", "editor", "serviceaccount"},
    "suspend": {"creator", "editor", "serviceaccount"},
    "resume": {"creator", "editor", "serviceaccount"},
}
RESULTS: collections.Counter[str] = collections.Counter()
RESOLVE = "agentrun.dev/resolve"


class SteerArena(Arena):
    """The approval arena plus runs to steer: ``live`` (running), ``parked`` (suspended), ``stopped``
    (Failed), each created by the admin."""

    def setup(self) -> None:
        super().setup()
        self._bind("manager", "User", "agentrun-retrier")
        self._bind("manager", "User", "agentrun-resolver")
        live = _run_body("live", {})
        live["spec"]["suspend"] = False
        self._create("admin", live)
        self._create("admin", _run_body("parked", {}))
        self._create("admin", _run_body("stopped", {}))
        status = {"status": {"phase": "Failed"}}
        self.custom.patch_namespaced_custom_object_status(*CUSTOM, self.ns, "agentruns", "stopped", status)

    def spec(self, run: str) -> dict[str, Any]:
        return dict(self.get(run)["spec"])

    def admin_patch(self, run: str, patch: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(*CUSTOM, self.ns, "agentruns", run, patch)

    def fork_exists(self) -> bool:
        try:
            self.get("fork")
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def steer_reset(self) -> None:
        """Undo whatever took effect (as the admin, who holds every verb)."""
        if self.fork_exists():
            self.custom.delete_namespaced_custom_object(*CUSTOM, self.ns, "agentruns", "fork")
        if RESOLVE in self.annotations("stopped"):
            self.admin_patch("stopped", {"metadata": {"annotations": {RESOLVE: None}}})
        if self.spec("live").get("cancel") or self.spec("live").get("suspend"):
            self.admin_patch("live", {"spec": {"cancel": False, "suspend": False}})
        if not self.spec("parked").get("suspend"):
            self.admin_patch("parked", {"spec": {"suspend": True}})


arena = arena_fixture(SteerArena, "steer-arena")


def _fork_body(**fork_of: Any) -> dict[str, Any]:
    body = _run_body("fork", {})
    body["spec"]["forkOf"] = {"run": "gate", "step": "review", **fork_of}
    return body


def _attempt(a: SteerArena, actor: str, verb: str) -> tuple[bool, str]:
    """``actor`` tries ``verb``: (took effect, the API server's answer)."""

    def patch(run: str, body: dict[str, Any]) -> str:
        proc = a.kubectl(actor, "patch", "ar", run, "--type", "merge", "-p", json.dumps(body))
        return proc.stderr if proc.returncode else ""

    def create(body: dict[str, Any]) -> str:
        proc = a.kubectl(actor, "create", "-f", "-", stdin=json.dumps(body))
        return proc.stderr if proc.returncode else ""

    if verb == "fork":
        return (answer := create(_fork_body())) == "" and a.fork_exists(), answer
    if verb == "fork-with-set":
        edited = _fork_body(setJson={"decision": '{"approved": true}'}, set={"draft.body": "unapproved"})
        return (answer := create(edited)) == "" and a.fork_exists(), answer
    if verb == "fork-approve":
        return (answer := create(_fork_body(approve=True))) == "" and a.fork_exists(), answer
    if verb == "retry":  # retryGeneration only grows (the CRD): a retry that took effect raised it
        before = int(a.spec("stopped").get("retryGeneration") or 0)
        answer = patch("stopped", {"spec": {"retryGeneration": before + 1}})
        return int(a.spec("stopped").get("retryGeneration") or 0) > before, answer
    if verb == "resolve":
        answer = patch("stopped", {"metadata": {"annotations": {RESOLVE: "e-0123456789ab=not-sent"}}})
        return RESOLVE in a.annotations("stopped"), answer
    if verb == "cancel":
        answer = patch("live", {"spec": {"cancel": True}})
        return bool(a.spec("live").get("cancel")), answer
    if verb == "suspend":
        answer = patch("live", {"spec": {"suspend": True}})
        return bool(a.spec("live").get("suspend")), answer
    if verb == "resume":
        answer = patch("parked", {"spec": {"suspend": False}})
        return not a.spec("parked").get("suspend"), answer
    raise AssertionError(verb)


@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize("actor", ACTORS)
def test_steering_verb_by_identity(arena: SteerArena, actor: str, verb: str) -> None:
    a = arena
    a.steer_reset()
    took, answer = _attempt(a, actor, verb)
    RESULTS["applied" if took else "refused"] += 1
    RESULTS[f"{actor}:{'applied' if took else 'refused'}"] += 1
    try:
        if actor in ALLOWED[verb]:
            assert took, f"{actor} {verb} refused: {answer}"
        else:
            assert not took, f"{actor} {verb} took effect"
            assert answer, f"{actor} {verb}: the API server accepted a request that must be refused"
            if actor != "stranger":  # the stranger is refused by RBAC itself, before admission
                assert "RBAC verb" in answer or "forbidden" in answer, answer
    finally:
        a.steer_reset()


def test_refusals_say_which_verb_is_missing(arena: SteerArena) -> None:
    a = arena
    a.steer_reset()
    _, answer = _attempt(a, "editor", "fork-with-set")
    assert "may not fork AgentRun" in answer and 'needs the RBAC verb "approve"' in answer, answer
    _, answer = _attempt(a, "approver", "cancel")
    assert "may not change spec.cancel" in answer and '"cancel"' in answer, answer
    _, answer = _attempt(a, "approver", "resume")
    assert "may not resume AgentRun" in answer and '"suspend"' in answer, answer
    a.steer_reset()


def test_a_resolve_result_is_bounded_in_bytes_as_the_operator_counts_them(arena: SteerArena) -> None:
    """The policy counts the result's UTF-8 bytes, as the CLI and the operator do: a result within the
    limit in characters but over it in bytes is refused by the API server, not admitted and then refused
    by the operator later."""
    a = arena
    a.steer_reset()
    limit = limits.RESOLVE_RESULT_MAX_BYTES
    over = json.dumps({"note": "\u20ac" * (limit // 3)}, ensure_ascii=False)  # 3 bytes per character
    fits = json.dumps({"note": "\u20ac" * (limit // 3 - 10)}, ensure_ascii=False)
    assert len(over) < limit < len(over.encode()) and len(fits.encode()) <= limit

    def resolve(result: str) -> str:
        stamps = {RESOLVE: "e-0123456789ab=sent", meta.RESOLVE_RESULT: result}
        body = {"metadata": {"annotations": stamps}}
        proc = a.kubectl("approver", "patch", "ar", "stopped", "--type", "merge", "-p", json.dumps(body))
        return proc.stderr if proc.returncode else ""

    try:
        answer = resolve(over)
        assert f"at most {limit} bytes" in answer, answer
        assert meta.RESOLVE_RESULT not in a.annotations("stopped")
        assert resolve(fits) == ""
        assert a.annotations("stopped")[meta.RESOLVE_RESULT] == fits
    finally:
        a.admin_patch("stopped", {"metadata": {"annotations": {meta.RESOLVE_RESULT: None}}})
        a.steer_reset()


def test_zz_steering_matrix_counts(arena: SteerArena) -> None:
    """The matrix in numbers (printed with -s; asserted when the whole matrix ran in this session)."""
    total = len(ACTORS) * len(VERBS)
    allowed = sum(len(v) for v in ALLOWED.values())
    per_actor = ", ".join(f"{x} {RESULTS[x + ':applied']}/{len(VERBS)}" for x in ACTORS)
    print(
        f"\nsteering matrix: {total} requests, {RESULTS['applied']} took effect, {RESULTS['refused']} "
        f"refused; took effect per identity: {per_actor}"
    )
    if RESULTS["applied"] + RESULTS["refused"] == total:
        assert RESULTS["applied"] == allowed
        assert RESULTS["stranger:applied"] == 0


# --- issue 35.5: a namespace that requires four eyes ------------------------------------------------------

FOUR_EYES = "agentrun.dev/require-four-eyes"
APPROVER_GROUPS = "agentrun.dev/approver-groups"


@pytest.fixture(scope="module")
def four_eyes(
    kube: kubernetes.client.ApiClient,
    admin_kubeconfig: Path,
    dev_cluster: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Arena]:
    """The approval arena, plus ``selfish``: created by carol with allowSelfApproval: true and waiting for
    an approval, BEFORE the namespace owner requires four eyes and names the approver group managers."""
    a = Arena(kube, admin_kubeconfig, dev_cluster.settings, tmp_path_factory.mktemp("four-eyes"))
    a.setup()
    try:
        selfish = _run_body("selfish", {"allowSelfApproval": True})
        proc = a.kubectl("creator", "create", "-f", "-", stdin=json.dumps(selfish))
        assert proc.returncode == 0, proc.stderr
        status = {"status": {"phase": "WaitingApproval", "pendingApproval": {"id": "a-cccccccccccc"}}}
        a.custom.patch_namespaced_custom_object_status(*CUSTOM, a.ns, "agentruns", "selfish", status)
        meta = {"metadata": {"labels": {FOUR_EYES: "true"}, "annotations": {APPROVER_GROUPS: "managers"}}}
        kubernetes.client.CoreV1Api(kube).patch_namespace(a.ns, meta)
        yield a
    finally:
        a.close()


def _until_refused(a: Arena, actor: str, *args: str, stdin: str | None = None) -> str:
    """The API server's refusal once it sees the namespace's labels (its namespace cache may lag a moment);
    the request must not take effect meanwhile, so each try is one the test would refuse anyway."""
    found: list[str] = []

    def refused() -> bool:
        proc = a.kubectl(actor, *args, stdin=stdin)
        if proc.returncode == 0:
            return False
        found.append(proc.stderr)
        return "four eyes" in proc.stderr or "approver groups" in proc.stderr or "only members" in proc.stderr

    wait_for(refused, 60, f"{actor} {' '.join(args)} refused by the namespace's policy", interval=0.5)
    return found[-1]


def test_four_eyes_namespace_refuses_a_creator_who_allowed_self_approval(four_eyes: Arena) -> None:
    a = four_eyes
    # A run created before the label asked for allowSelfApproval: true; its creator still cannot approve.
    answer = _until_refused(
        a, "creator", "annotate", "--overwrite", "ar/selfish", "agentrun.dev/approve=a-cccccccccccc"
    )
    assert "self-approval refused" in answer and "requires four eyes" in answer, answer
    assert "agentrun.dev/approve" not in a.annotations("selfish")
    # A new run cannot even ask for it there.
    body = json.dumps(_run_body("selfish-2", {"allowSelfApproval": True}))
    answer = _until_refused(a, "creator", "create", "-f", "-", stdin=body)
    assert "allowSelfApproval cannot be true" in answer, answer
    # Nor name approver groups the namespace does not.
    body = json.dumps(_run_body("widened", {"approvers": {"groups": ["devs"]}}))
    answer = a.kubectl("creator", "create", "-f", "-", stdin=body).stderr
    assert "may name only the approver groups" in answer and "managers" in answer, answer
    # Someone outside the approver groups cannot decide, even with the approve verb (the ServiceAccount).
    proc = a.kubectl(
        "serviceaccount", "annotate", "--overwrite", "ar/selfish", "agentrun.dev/approve=a-cccccccccccc"
    )
    assert proc.returncode != 0 and "only members of managers" in proc.stderr, proc.stderr
    # A fork with edits would be approved by its own creator: refused in this namespace.
    fork = _run_body("fork", {})
    fork["spec"]["forkOf"] = {"run": "gate", "step": "review", "set": {"draft.body": "x"}}
    proc = a.kubectl("creator", "create", "-f", "-", stdin=json.dumps(fork))
    assert proc.returncode != 0 and "requires four eyes" in proc.stderr, proc.stderr
    # The manager (group managers) decides, stamped with their own name.
    proc = a.kubectl(
        "approver", "annotate", "--overwrite", "ar/selfish", "agentrun.dev/approve=a-cccccccccccc"
    )
    assert proc.returncode == 0, proc.stderr
    assert a.annotations("selfish")["agentrun.dev/decided-by"] == "manager"
