"""deploy/ against the dev cluster's real API server: every kustomization builds, the server accepts it
(``kubectl apply --dry-run=server -k``) in a namespace that enforces Pod Security ``restricted``, without a
single PodSecurity warning, and the Pods the workloads would create pass ``restricted`` enforcement.
"""

from __future__ import annotations

import pathlib
from typing import Any

import kubernetes.client
import pytest
import yaml

from tests.support import deploy as ds
from tests.support import pod_security

pytestmark = pytest.mark.cluster

# The tenant namespace's labels: enforce and warn "restricted" (warn-version defaults to latest, as the
# dev cluster's PodSecurity admission has no configuration of its own).
RESTRICTED = pod_security.tenant_labels()


@pytest.fixture
def restricted_namespace(namespace: str, kube: kubernetes.client.ApiClient) -> str:
    kubernetes.client.CoreV1Api(kube).patch_namespace(namespace, {"metadata": {"labels": RESTRICTED}})
    return namespace


@pytest.mark.parametrize(
    "target",
    [
        "base",
        "overlays/in-cluster-postgres",
        "overlays/prometheus-operator",
        "overlays/k8s-1.34",
        "admission-vap-only",
        "tenant",
        "examples",
    ],
)
def test_kustomization_builds(target: str, admin_kubeconfig: pathlib.Path) -> None:
    out = ds.kubectl(admin_kubeconfig, "kustomize", str(ds.DEPLOY / target)).stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    assert docs
    for doc in docs:
        assert doc["metadata"].get("name"), doc


def _workload_pods(docs: list[dict[str, Any]], namespace: str) -> list[dict[str, Any]]:
    """The Pods the Deployments and StatefulSets would create (the security context is what matters).

    The dry run happens before the ServiceAccounts and claims exist, so those two are stood in for: the
    namespace's default ServiceAccount, and an emptyDir per volumeClaimTemplate.
    """
    pods = []
    for doc in docs:
        if doc["kind"] in {"Deployment", "StatefulSet"}:
            spec = dict(doc["spec"]["template"]["spec"])
            spec.pop("serviceAccountName", None)
            claims = [c["metadata"]["name"] for c in doc["spec"].get("volumeClaimTemplates", [])]
            spec["volumes"] = [*spec.get("volumes", []), *({"name": c, "emptyDir": {}} for c in claims)]
            pods.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": f"{doc['metadata']['name']}-probe", "namespace": namespace},
                    "spec": spec,
                }
            )
    return pods


@pytest.mark.parametrize("target", ["base", "overlays/in-cluster-postgres"])
def test_server_accepts_in_a_restricted_namespace(
    target: str, restricted_namespace: str, admin_kubeconfig: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    overlay = ds.overlay_into(tmp_path, target, restricted_namespace)
    result = ds.kubectl(admin_kubeconfig, "apply", "--dry-run=server", "-k", str(overlay))
    assert "(server dry run)" in result.stdout
    assert "PodSecurity" not in result.stderr, result.stderr
    applied = {line.split()[0] for line in result.stdout.splitlines() if line.strip()}
    assert "deployment.apps/agentrun-operator" in applied
    # PSA only warns on workload templates; enforcement happens on Pods. Dry-run the Pods they would make.
    docs = [
        d for d in yaml.safe_load_all(ds.kubectl(admin_kubeconfig, "kustomize", str(overlay)).stdout) if d
    ]
    pods = _workload_pods(docs, restricted_namespace)
    assert pods
    pod_result = ds.kubectl(
        admin_kubeconfig, "apply", "--dry-run=server", "-f", "-", stdin=ds.dump(pods), check=False
    )
    assert pod_result.returncode == 0, pod_result.stderr
    assert "PodSecurity" not in pod_result.stderr, pod_result.stderr


def test_restricted_namespace_really_refuses_a_non_compliant_pod(
    restricted_namespace: str, admin_kubeconfig: pathlib.Path
) -> None:
    """The check above can fail: the same dry run refuses a Pod that drops the security context."""
    bad = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bad", "namespace": restricted_namespace},
        "spec": {"containers": [{"name": "c", "image": "agentrun:0.1.0"}]},
    }
    result = ds.kubectl(
        admin_kubeconfig, "apply", "--dry-run=server", "-f", "-", stdin=ds.dump([bad]), check=False
    )
    assert result.returncode != 0
    assert "violates PodSecurity" in result.stderr


def test_tenant_and_examples_are_accepted(
    restricted_namespace: str, admin_kubeconfig: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    tenant_dir = tmp_path / "tenant"
    tenant_dir.mkdir()
    result = ds.kubectl(
        admin_kubeconfig,
        "apply",
        "--dry-run=server",
        "-k",
        str(ds.overlay_into(tenant_dir, "tenant", restricted_namespace)),
    )
    assert "serviceaccount/agentrun-worker created (server dry run)" in result.stdout
    assert "rolebinding.rbac.authorization.k8s.io/agentrun-worker created (server dry run)" in result.stdout
    # The AgentRun examples pass the CRD's schema and CEL rules (and the admission policies).
    examples = ds.kubectl(
        admin_kubeconfig,
        "apply",
        "--dry-run=server",
        "-n",
        restricted_namespace,
        "-k",
        str(ds.DEPLOY / "examples"),
    )
    assert "agentrun.agentrun.dev/support-ticket created (server dry run)" in examples.stdout
    assert "agentrun.agentrun.dev/support-ticket-strict created (server dry run)" in examples.stdout


def test_operator_worker_pod_passes_restricted(
    restricted_namespace: str, admin_kubeconfig: pathlib.Path
) -> None:
    """The Pod the operator creates for each attempt is admitted by ``restricted`` enforcement as built."""
    from agent_operator import settings
    from agent_operator.decide import model, pods

    run = model.RunRef(namespace=restricted_namespace, name="psa", uid="00000000-0000-0000-0000-000000000001")
    spec = model.RunSpec.from_body({"graph": "agentrun_examples.support_ticket:graph"})
    body = pods.manifest(run, spec, 1, "first", settings.from_env({"AGENTRUN_DSN": "postgresql://x/y"}))
    body["metadata"].pop("ownerReferences", None)  # the owner does not exist in a dry run
    ds.kubectl(admin_kubeconfig, "create", "serviceaccount", "agentrun-worker", "-n", restricted_namespace)
    result = ds.kubectl(
        admin_kubeconfig, "apply", "--dry-run=server", "-f", "-", stdin=ds.dump([body]), check=False
    )
    assert result.returncode == 0, result.stderr
    assert "violates PodSecurity" not in result.stderr + result.stdout
