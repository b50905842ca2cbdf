"""Approval admission on the real API server, as real second identities (client certificates).

The MutatingAdmissionPolicy stamps who created a run and who decided; the ValidatingAdmissionPolicy refuses
decisions from subjects without the RBAC verb ``approve``, self-approval, and forged stamps. No operator runs
here: these are the API server's own answers.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import kubernetes
import pytest
from conftest import get_run, kubectl

RUN = """
apiVersion: agentrun.dev/v1alpha1
kind: AgentRun
metadata: {{name: {name}}}
spec:
  graph: agentrun_examples.support_ticket:graph
  input: {{ticket: {{id: 1}}}}
  suspend: true
  approval: {approval}
"""


def bind(kube: kubernetes.client.ApiClient, namespace: str, user: str, role: str) -> None:
    kubernetes.client.RbacAuthorizationV1Api(kube).create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": f"{user}-{role}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        },
    )


def apply(kubeconfig: Path, namespace: str, name: str, approval: str = "{}") -> None:
    import subprocess

    proc = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), "apply", "-n", namespace, "-f", "-"],
        input=RUN.format(name=name, approval=approval),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr


def annotate(kubeconfig: Path, namespace: str, name: str, *pairs: str) -> tuple[int, str]:
    proc = kubectl(kubeconfig, "annotate", "-n", namespace, "--overwrite", f"ar/{name}", *pairs)
    return proc.returncode, proc.stderr + proc.stdout


@pytest.fixture
def people(
    kube: kubernetes.client.ApiClient, namespace: str, identity: Callable[..., Path], admin_kubeconfig: Path
) -> dict[str, Path]:
    bind(kube, namespace, "manager", "agentrun-approver")
    bind(kube, namespace, "mallory", "agentrun-editor")
    bind(kube, namespace, "alice", "agentrun-editor")
    bind(kube, namespace, "alice", "agentrun-approver")
    return {
        "manager": identity("manager", ["managers"]),
        "mallory": identity("mallory", ["devs"]),
        "alice": identity("alice", ["devs"]),
        "admin": admin_kubeconfig,
    }


def annotations(kube: kubernetes.client.ApiClient, namespace: str, name: str) -> dict[str, str]:
    return dict(get_run(kube, namespace, name)["metadata"].get("annotations") or {})


def test_created_by_and_decided_by_are_stamped_by_the_api_server(
    kube: kubernetes.client.ApiClient, namespace: str, people: dict[str, Path]
) -> None:
    apply(people["alice"], namespace, "r1")
    assert annotations(kube, namespace, "r1")["agentrun.dev/created-by"] == "alice"
    code, out = annotate(
        people["manager"], namespace, "r1", "agentrun.dev/approve=a-000000000001", "agentrun.dev/comment=fine"
    )
    assert code == 0, out
    ann = annotations(kube, namespace, "r1")
    assert ann["agentrun.dev/decided-by"] == "manager"
    assert ann["agentrun.dev/approve"] == "a-000000000001"


def test_subject_without_approve_verb_is_refused(
    kube: kubernetes.client.ApiClient, namespace: str, people: dict[str, Path]
) -> None:
    apply(people["admin"], namespace, "r2")
    for key in ("agentrun.dev/approve", "agentrun.dev/reject"):
        code, out = annotate(people["mallory"], namespace, "r2", f"{key}=a-000000000001")
        assert code != 0
        assert 'user "mallory" may not approve or reject' in out and 'RBAC verb "approve"' in out
    # mallory may still change other annotations (she can patch the run)
    code, out = annotate(people["mallory"], namespace, "r2", "note=hello")
    assert code == 0, out
    assert "agentrun.dev/approve" not in annotations(kube, namespace, "r2")


def test_self_approval_refused_unless_allowed(
    kube: kubernetes.client.ApiClient, namespace: str, people: dict[str, Path]
) -> None:
    apply(people["alice"], namespace, "mine")
    code, out = annotate(people["alice"], namespace, "mine", "agentrun.dev/approve=a-000000000001")
    assert code != 0 and "self-approval refused" in out
    # rejecting one's own run is allowed (the creator can always stop it)
    code, out = annotate(people["alice"], namespace, "mine", "agentrun.dev/reject=a-000000000001")
    assert code == 0, out
    apply(people["alice"], namespace, "mine-ok", approval="{allowSelfApproval: true}")
    code, out = annotate(people["alice"], namespace, "mine-ok", "agentrun.dev/approve=a-000000000001")
    assert code == 0, out


def test_stamps_cannot_be_forged(
    kube: kubernetes.client.ApiClient, namespace: str, people: dict[str, Path]
) -> None:
    apply(people["alice"], namespace, "r3")
    code, out = annotate(people["manager"], namespace, "r3", "agentrun.dev/decided-by=ceo")
    assert code != 0 and "cannot be forged" in out
    code, out = annotate(people["admin"], namespace, "r3", "agentrun.dev/created-by=bob")
    assert code != 0 and "created-by is set by the API server" in out
    # setting approve and a fake decided-by together: the stamp wins, so the forgery is refused
    code, out = annotate(
        people["manager"], namespace, "r3", "agentrun.dev/approve=a-1", "agentrun.dev/decided-by=ceo"
    )
    ann = annotations(kube, namespace, "r3")
    assert code != 0 or ann.get("agentrun.dev/decided-by") == "manager", out


def test_approvers_narrow_who_may_decide(
    kube: kubernetes.client.ApiClient, namespace: str, people: dict[str, Path]
) -> None:
    apply(people["admin"], namespace, "r4", approval="{approvers: {groups: [finance]}}")
    code, out = annotate(people["manager"], namespace, "r4", "agentrun.dev/approve=a-000000000001")
    assert code != 0 and "not among spec.approval.approvers" in out


def test_decision_at_creation_refused(namespace: str, people: dict[str, Path]) -> None:
    import subprocess

    manifest = RUN.format(name="r5", approval="{}").replace(
        "metadata: {name: r5}", "metadata: {name: r5, annotations: {agentrun.dev/approve: a-1}}"
    )
    proc = subprocess.run(
        ["kubectl", "--kubeconfig", str(people["admin"]), "create", "-n", namespace, "-f", "-"],
        input=manifest,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0 and "cannot be set at creation" in proc.stderr
