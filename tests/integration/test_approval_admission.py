"""Approvals nobody can forge: the API server's own answers, as real identities (client certificates and a
ServiceAccount token), over every way of writing an AgentRun.

The matrix: five identities — the run's creator (editor + approver, but the run forbids self-approval), the
authorised approver (approver role, listed in spec.approval.approvers), a stranger (no role), an editor
(update and patch on agentruns, no ``approve``), a ServiceAccount (editor + approver, not among the
approvers) — times the ways to decide (kubectl annotate, merge patch, JSON patch, server-side apply, replace,
the status subresource) and the attacks (a forged decided-by, with and without a decision, a stale id,
another run's id, a run that is not waiting, approve+reject at once, the policy flipped in the same request,
the policy changed while pending). A decision "takes effect" when a run carries it afterwards; it must then
be stamped with the requester's own name. Only the approver's decision may take effect. No operator here:
the end-to-end part (exactly once, recorded with the approver's name in Postgres) is in
tests/integration/test_approval_flow.py.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self

import kubernetes
import pytest
import yaml

from agentrun_dev import identities
from tests.support.kube import kubectl

PENDING = "a-aaaaaaaaaaaa"
OTHER = "a-bbbbbbbbbbbb"
STALE = "a-000000000000"
APPROVE, REJECT = "agentrun.dev/approve", "agentrun.dev/reject"
DECIDED_BY, GROUPS = "agentrun.dev/decided-by", "agentrun.dev/decided-by-groups"
COMMENT = "agentrun.dev/comment"
DECISION_KEYS = (APPROVE, REJECT, DECIDED_BY, GROUPS, COMMENT)
ACTORS = ("creator", "approver", "stranger", "editor", "serviceaccount")
CASES = (
    "annotate",
    "merge-patch",
    "json-patch",
    "server-side-apply",
    "replace",
    "status-subresource",
    "forged-decided-by",
    "forged-decided-by-with-decision",
    "stale-id",
    "other-runs-id",
    "run-not-waiting",
    "approve-and-reject",
    "policy-flip-same-request",
    "policy-change-while-pending",
)
# What may take effect: the approver's decision by the ordinary ways that need only `patch` (kubectl
# annotate, merge/JSON patch, server-side apply) — also when the request tried to forge decided-by (the
# stamp wins, with the approver's own name). Everything else is refused.
ALLOWED = {
    ("approver", c)
    for c in ("annotate", "merge-patch", "json-patch", "server-side-apply", "forged-decided-by-with-decision")
}
RESULTS: collections.Counter[str] = collections.Counter()
CUSTOM = ("agentrun.dev", "v1alpha1")


def _run_body(name: str, approval: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "agentrun.dev/v1alpha1",
        "kind": "AgentRun",
        "metadata": {"name": name},
        "spec": {
            "graph": "agentrun_examples.support_ticket:graph",
            "input": {"ticket": {"id": 1}},
            "suspend": True,
            "approval": approval,
        },
    }


class Arena:
    """A namespace with three runs and five identities; every request goes through kubectl."""

    def __init__(self, kube: kubernetes.client.ApiClient, admin: Path, settings: Any, tmp: Path) -> None:
        self.kube, self.admin, self.settings, self.tmp = kube, admin, settings, tmp
        self.ns = f"approval-matrix-{secrets.token_hex(3)}"
        self.custom = kubernetes.client.CustomObjectsApi(kube)
        self.kubeconfigs: dict[str, Path] = {"admin": admin}
        self.names: dict[str, str] = {}

    def setup(self) -> None:
        core = kubernetes.client.CoreV1Api(self.kube)
        labels = {"agentrun.dev/test": "true", "agentrun.dev/test-session": str(os.getpid())}
        core.create_namespace({"metadata": {"name": self.ns, "labels": labels}})
        users = {
            "creator": ("carol", ["devs"]),
            "approver": ("manager", ["managers"]),
            "stranger": ("eve", ["outsiders"]),
            "editor": ("mallory", ["devs"]),
        }
        for actor, (user, groups) in users.items():
            self.kubeconfigs[actor] = identities.kubeconfig_for(user, groups, self.settings)
            self.names[actor] = user
        self._bind("carol", "User", "agentrun-editor")
        self._bind("carol", "User", "agentrun-approver")
        self._bind("manager", "User", "agentrun-approver")
        self._bind("mallory", "User", "agentrun-editor")
        self._service_account()
        # The gate: created by carol; approvers manager and carol (carol may not approve her own run).
        self._create("creator", _run_body("gate", {"approvers": {"users": ["manager", "carol"]}}))
        self._create("admin", _run_body("other", {}))
        self._create("admin", _run_body("idle", {}))
        self._pending("gate", PENDING)
        self._pending("other", OTHER)

    def _service_account(self) -> None:
        core = kubernetes.client.CoreV1Api(self.kube)
        for _ in range(100):  # the namespace's ServiceAccount admission may lag its creation a moment
            try:
                core.create_namespaced_service_account(self.ns, {"metadata": {"name": "robot"}})
                break
            except kubernetes.client.ApiException as exc:
                if exc.status != 403:
                    raise
                import time

                time.sleep(0.1)
        self._bind("robot", "ServiceAccount", "agentrun-editor")
        self._bind("robot", "ServiceAccount", "agentrun-approver")
        token = core.create_namespaced_service_account_token(
            "robot", self.ns, {"spec": {"expirationSeconds": 3600}}
        ).status.token
        doc = yaml.safe_load(self.kubeconfigs["editor"].read_text())
        doc["users"][0]["user"] = {"token": token}
        path = self.tmp / "robot.kubeconfig"
        path.write_text(yaml.safe_dump(doc))
        path.chmod(0o600)
        self.kubeconfigs["serviceaccount"] = path
        self.names["serviceaccount"] = f"system:serviceaccount:{self.ns}:robot"

    def _bind(self, name: str, kind: str, role: str) -> None:
        subject: dict[str, str] = {"kind": kind, "name": name}
        if kind == "User":
            subject["apiGroup"] = "rbac.authorization.k8s.io"
        else:
            subject["namespace"] = self.ns
        kubernetes.client.RbacAuthorizationV1Api(self.kube).create_namespaced_role_binding(
            self.ns,
            {
                "metadata": {"name": f"{name}-{role}"},
                "subjects": [subject],
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            },
        )

    def _create(self, actor: str, body: dict[str, Any]) -> None:
        proc = self.kubectl(actor, "create", "-f", "-", stdin=json.dumps(body))
        assert proc.returncode == 0, proc.stderr

    def _pending(self, run: str, approval_id: str) -> None:
        """What the operator writes when a worker parks (status is the operator's; admin here)."""
        status = {"status": {"phase": "WaitingApproval", "pendingApproval": {"id": approval_id}}}
        self.custom.patch_namespaced_custom_object_status(*CUSTOM, self.ns, "agentruns", run, status)

    def kubectl(self, actor: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return kubectl(self.kubeconfigs[actor], "-n", self.ns, *args, stdin=stdin, timeout=60)

    def get(self, run: str) -> dict[str, Any]:
        result: dict[str, Any] = self.custom.get_namespaced_custom_object(*CUSTOM, self.ns, "agentruns", run)
        return result

    def annotations(self, run: str) -> dict[str, str]:
        return dict(self.get(run)["metadata"].get("annotations") or {})

    def reset(self) -> None:
        """Remove every decision annotation again (as the operator does after applying one)."""
        for run in ("gate", "other", "idle"):
            present = [k for k in DECISION_KEYS if k in self.annotations(run)]
            if present:
                patch = {"metadata": {"annotations": dict.fromkeys(present)}}
                self.custom.patch_namespaced_custom_object(*CUSTOM, self.ns, "agentruns", run, patch)
        approval = self.get("gate")["spec"].get("approval") or {}
        assert approval.get("approvers", {}).get("users") == ["manager", "carol"], approval  # never widened
        assert not approval.get("allowSelfApproval"), approval

    def close(self) -> None:
        with contextlib.suppress(kubernetes.client.ApiException):
            kubernetes.client.CoreV1Api(self.kube).delete_namespace(self.ns)

    @classmethod
    @contextlib.contextmanager
    def opened(
        cls, kube: kubernetes.client.ApiClient, admin: Path, settings: Any, tmp: Path
    ) -> Iterator[Self]:
        arena = cls(kube, admin, settings, tmp)
        arena.setup()
        try:
            yield arena
        finally:
            arena.close()


def arena_fixture(cls: type[Arena], name: str) -> Any:
    """The module's ``arena`` fixture: one arena of ``cls`` shared by the module's tests (a large matrix)."""

    @pytest.fixture(scope="module")
    def arena(
        kube: kubernetes.client.ApiClient,
        admin_kubeconfig: Path,
        dev_cluster: Any,
        tmp_path_factory: pytest.TempPathFactory,
    ) -> Iterator[Arena]:
        with cls.opened(kube, admin_kubeconfig, dev_cluster.settings, tmp_path_factory.mktemp(name)) as a:
            yield a

    return arena


arena = arena_fixture(Arena, "arena")


def _flip(a: Arena, actor: str) -> dict[str, Any]:
    return {"approval": {"approvers": {"users": [a.names[actor]]}, "allowSelfApproval": True}}


def _attempt(a: Arena, actor: str, case: str) -> subprocess.CompletedProcess[str]:
    """One request of ``actor`` that tries to get a decision onto a run."""
    patch = {"metadata": {"annotations": {APPROVE: PENDING, COMMENT: f"by {actor}"}}}
    annotate = ("annotate", "--overwrite")
    if case == "annotate":
        return a.kubectl(actor, *annotate, "ar/gate", f"{APPROVE}={PENDING}")
    if case == "merge-patch":
        return a.kubectl(actor, "patch", "ar", "gate", "--type", "merge", "-p", json.dumps(patch))
    if case == "json-patch":
        ops = [{"op": "add", "path": "/metadata/annotations/agentrun.dev~1approve", "value": PENDING}]
        return a.kubectl(actor, "patch", "ar", "gate", "--type", "json", "-p", json.dumps(ops))
    if case == "server-side-apply":
        body = {
            "apiVersion": "agentrun.dev/v1alpha1",
            "kind": "AgentRun",
            "metadata": {"name": "gate", "annotations": {APPROVE: PENDING}},
        }
        manager = f"--field-manager=matrix-{actor}"
        return a.kubectl(actor, "apply", "--server-side", manager, "-f", "-", stdin=json.dumps(body))
    if case == "replace":
        body = a.get("gate")
        body["metadata"].setdefault("annotations", {})[APPROVE] = PENDING
        return a.kubectl(actor, "replace", "-f", "-", stdin=json.dumps(body))
    if case == "status-subresource":
        status_patch = {**patch, "status": {"pendingApproval": {"id": PENDING}}}
        args = ("patch", "ar", "gate", "--subresource=status", "--type", "merge")
        return a.kubectl(actor, *args, "-p", json.dumps(status_patch))
    if case == "forged-decided-by":
        return a.kubectl(actor, *annotate, "ar/gate", f"{DECIDED_BY}=manager", f"{GROUPS}=managers")
    if case == "forged-decided-by-with-decision":
        forged = (f"{DECIDED_BY}=ceo", f"{GROUPS}=system:masters")
        return a.kubectl(actor, *annotate, "ar/gate", f"{APPROVE}={PENDING}", *forged)
    if case == "stale-id":
        return a.kubectl(actor, *annotate, "ar/gate", f"{APPROVE}={STALE}")
    if case == "other-runs-id":
        return a.kubectl(actor, *annotate, "ar/gate", f"{APPROVE}={OTHER}")
    if case == "run-not-waiting":
        return a.kubectl(actor, *annotate, "ar/idle", f"{APPROVE}={PENDING}")
    if case == "approve-and-reject":
        return a.kubectl(actor, *annotate, "ar/gate", f"{APPROVE}={PENDING}", f"{REJECT}={PENDING}")
    if case == "policy-flip-same-request":
        flip = {"spec": _flip(a, actor), **patch}
        return a.kubectl(actor, "patch", "ar", "gate", "--type", "merge", "-p", json.dumps(flip))
    if case == "policy-change-while-pending":
        flip = {"spec": _flip(a, actor)}
        return a.kubectl(actor, "patch", "ar", "gate", "--type", "merge", "-p", json.dumps(flip))
    raise AssertionError(case)


def _decision_on_a_run(a: Arena) -> tuple[str, dict[str, str]] | None:
    for run in ("gate", "other", "idle"):
        ann = a.annotations(run)
        if any(k in ann for k in (APPROVE, REJECT, DECIDED_BY, GROUPS)):
            return run, ann
    return None


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("actor", ACTORS)
def test_only_the_authorised_approver_decides(arena: Arena, actor: str, case: str) -> None:
    a = arena
    a.reset()
    proc = _attempt(a, actor, case)
    found = _decision_on_a_run(a)
    outcome = "applied" if found is not None else "refused"
    RESULTS[outcome] += 1
    RESULTS[f"{actor}:{outcome}"] += 1
    if (actor, case) in ALLOWED:
        assert proc.returncode == 0, proc.stderr
        assert found is not None
        run, ann = found
        # Exactly what the approver meant, stamped by the API server with the approver's own identity.
        assert run == "gate" and ann.get(APPROVE) == PENDING and REJECT not in ann
        assert ann[DECIDED_BY] == "manager" and ann[GROUPS].split(",")[0] == "managers", ann
    else:
        assert found is None, f"{actor} {case}: {found} (rc {proc.returncode}: {proc.stderr})"
        # The status subresource ignores metadata: the request "succeeds" (for whoever may write status)
        # and changes no annotation.
        assert proc.returncode != 0 or case == "status-subresource", proc.stdout
    a.reset()


def test_creator_may_reject_and_approver_may_not_edit(arena: Arena) -> None:
    a = arena
    a.reset()
    proc = a.kubectl("creator", "annotate", "--overwrite", "ar/gate", f"{REJECT}={PENDING}")
    assert proc.returncode == 0, proc.stderr  # a creator can always stop their own run
    assert a.annotations("gate")[DECIDED_BY] == "carol"
    a.reset()
    # patch without update cannot touch spec.approval, not even before a gate (run "idle" waits for nothing)
    widen = json.dumps({"spec": {"approval": {"approvers": {"users": ["manager"]}}}})
    proc = a.kubectl("approver", "patch", "ar", "idle", "--type", "merge", "-p", widen)
    assert proc.returncode != 0 and 'needs the RBAC verb "update"' in proc.stderr, proc.stderr
    proc = a.kubectl("editor", "patch", "ar", "idle", "--type", "merge", "-p", widen)
    assert proc.returncode == 0, proc.stderr  # an editor may, while nothing is pending
    proc = a.kubectl("editor", "annotate", "--overwrite", "ar/gate", "note=hello")
    assert proc.returncode == 0, proc.stderr
    proc = a.kubectl("editor", "annotate", "--overwrite", "ar/gate", f"{COMMENT}=sneaky")
    assert proc.returncode != 0 and "only be set together with a decision" in proc.stderr
    proc = a.kubectl("admin", "annotate", "--overwrite", "ar/gate", "agentrun.dev/created-by=bob")
    assert proc.returncode != 0 and "created-by is set by the API server" in proc.stderr


def test_created_by_stamped_and_no_decision_at_creation(arena: Arena) -> None:
    a = arena
    assert a.annotations("gate")["agentrun.dev/created-by"] == "carol"
    body = _run_body("born-decided", {})
    body["metadata"]["annotations"] = {APPROVE: PENDING}
    proc = a.kubectl("admin", "create", "-f", "-", stdin=json.dumps(body))
    assert proc.returncode != 0 and "cannot be set at creation" in proc.stderr


def test_zz_matrix_counts(arena: Arena) -> None:
    """The matrix in numbers (printed with -s; asserted when the whole matrix ran in this session)."""
    total = len(ACTORS) * len(CASES)
    per_actor = ", ".join(f"{x} {RESULTS[x + ':applied']}/{len(CASES)}" for x in ACTORS)
    print(
        f"\napproval matrix: {total} requests, {RESULTS['applied']} took effect, "
        f"{RESULTS['refused']} refused; took effect per identity: {per_actor}"
    )
    if RESULTS["applied"] + RESULTS["refused"] == total:
        assert RESULTS["applied"] == len(ALLOWED)
        assert all(RESULTS[f"{x}:applied"] == 0 for x in ACTORS if x != "approver")
