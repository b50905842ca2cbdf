"""The Helm chart (deploy/helm/agentrun) and deploy/install.yaml, both generated from deploy/ (kustomize):
neither is stale, the chart's defaults give deploy/base back, ``helm lint`` passes, and the real API server
accepts ``helm template``'s output (``kubectl apply --dry-run=server``) for the default, the external
Postgres with TLS, and the in-cluster Postgres values — in a namespace that enforces Pod Security
``restricted``, without a PodSecurity warning. helm is v4, built from its Go module (agentrun_dev.helm).
"""

from __future__ import annotations

import copy
import pathlib
import subprocess
from typing import Any

import kubernetes.client
import pytest
import yaml

from agentrun_dev import helm, helmgen
from agentrun_dev import settings as settings_mod
from tests.support import deploy as ds
from tests.support import pod_security

pytestmark = pytest.mark.cluster

CHART = helmgen.CHART
RESTRICTED = pod_security.tenant_labels()
CA_PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"  # content is not parsed here
EXTERNAL = [
    "--set", "database.secretName=external-db",
    "--set", "database.dsn=postgresql://agentrun:pw@db.example.internal:5432/agentrun?sslmode=verify-full",
    "--set", "database.caSecret=agentrun-postgres-ca",
    "--set", f"database.caCert={CA_PEM}",
    "--set", "image.repository=registry.example.internal/agentrun",
    "--set", "image.tag=9.9.9",
    "--set", "operator.replicas=3",
    "--set", "operator.resources.limits.memory=1Gi",
]  # fmt: skip
VALUES = {
    "default": [],
    "external-postgres-tls": EXTERNAL,
    "in-cluster-postgres": ["--set", "postgres.inCluster=true"],
}


@pytest.fixture(scope="module")
def helm_bin() -> pathlib.Path:
    return helm.ensure(settings_mod.from_env())


def template(helm_bin: pathlib.Path, namespace: str, *args: str) -> list[dict[str, Any]]:
    out = subprocess.run(
        [str(helm_bin), "template", "agentrun", str(CHART), "-n", namespace, *args],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def by_key(docs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def test_chart_and_install_yaml_are_not_stale() -> None:
    stale = helmgen.stale(helmgen.render())
    assert not stale, f"regenerate with `python -m agentrun_dev.helmgen`: {stale}"


def test_install_yaml_equals_kubectl_kustomize(admin_kubeconfig: pathlib.Path) -> None:
    text = helmgen.INSTALL.read_text()
    header, _, body = text.partition("\n")
    assert header.startswith("# Generated"), header
    assert body == ds.kubectl(admin_kubeconfig, "kustomize", str(ds.DEPLOY / "base")).stdout


@pytest.mark.parametrize("values", sorted(VALUES))
def test_helm_lint(values: str, helm_bin: pathlib.Path) -> None:
    out = subprocess.run(
        [str(helm_bin), "lint", "--strict", str(CHART), *VALUES[values]],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 chart(s) failed" in out.stdout, out.stdout


def test_default_values_render_deploy_base(helm_bin: pathlib.Path, admin_kubeconfig: pathlib.Path) -> None:
    """Only the documented differences: no Namespace object (the release's), the settings ConfigMap's fixed
    name (a checksum annotation rolls the Pods instead of kustomize's name hash)."""
    got = by_key(template(helm_bin, helmgen.SYSTEM_NS, "--set", "tenantNamespaces.names=null"))
    base = by_key(
        [
            d
            for d in yaml.safe_load_all(
                ds.kubectl(admin_kubeconfig, "kustomize", str(ds.DEPLOY / "base")).stdout
            )
            if d and d["kind"] != "Namespace"
        ]
    )
    for k in [k for k in base if k[0] == "ConfigMap" and k[1].startswith("agentrun-operator-config-")]:
        base[("ConfigMap", "agentrun-operator-config")] = base.pop(k)
        base[k[0], "agentrun-operator-config"]["metadata"]["name"] = "agentrun-operator-config"
    dep = copy.deepcopy(got[("Deployment", "agentrun-operator")])
    annotations = dep["spec"]["template"]["metadata"].pop("annotations")
    assert set(annotations) == {"checksum/config"}
    got[("Deployment", "agentrun-operator")] = dep
    base_dep = base[("Deployment", "agentrun-operator")]["spec"]["template"]["spec"]["containers"][0]
    base_dep["envFrom"][0]["configMapRef"]["name"] = "agentrun-operator-config"
    assert sorted(got) == sorted(base)
    for k in base:
        assert got[k] == base[k], k


def test_external_postgres_values_mount_the_ca(helm_bin: pathlib.Path) -> None:
    docs = by_key(template(helm_bin, "agentrun-system", *EXTERNAL))
    dep = docs[("Deployment", "agentrun-operator")]
    assert dep["spec"]["replicas"] == 3
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    assert c["image"] == "registry.example.internal/agentrun:9.9.9"
    assert c["resources"]["limits"]["memory"] == "1Gi"
    env = {e["name"]: e for e in c["env"]}
    assert env["AGENTRUN_DSN"]["valueFrom"]["secretKeyRef"] == {"name": "external-db", "key": "dsn"}
    assert env["PGSSLROOTCERT"]["value"] == "/etc/agentrun/postgres-ca/ca.crt"
    assert {"name": "postgres-ca", "mountPath": "/etc/agentrun/postgres-ca", "readOnly": True} in c[
        "volumeMounts"
    ]
    assert {"name": "postgres-ca", "secret": {"secretName": "agentrun-postgres-ca"}} in dep["spec"][
        "template"
    ]["spec"]["volumes"]
    config = docs[("ConfigMap", "agentrun-operator-config")]["data"]
    assert config["AGENTRUN_WORKER_CA_SECRET"] == "agentrun-postgres-ca/ca.crt"
    assert config["AGENTRUN_WORKER_IMAGE"] == "registry.example.internal/agentrun:9.9.9"
    secret = docs[("Secret", "external-db")]
    assert secret["stringData"]["dsn"].endswith("sslmode=verify-full")
    # The CA Secret in the release's namespace and in every tenant namespace (worker Pods mount their own).
    all_docs = template(helm_bin, "agentrun-system", *EXTERNAL)
    cas = [d["metadata"]["namespace"] for d in all_docs if d["metadata"]["name"] == "agentrun-postgres-ca"]
    assert sorted(cas) == ["agentrun-runs", "agentrun-system"]


@pytest.mark.parametrize("values", sorted(VALUES))
def test_server_accepts_helm_template(
    values: str,
    helm_bin: pathlib.Path,
    namespace: str,
    kube: kubernetes.client.ApiClient,
    admin_kubeconfig: pathlib.Path,
) -> None:
    # enforced and warned about, as a tenant namespace is labelled
    assert [RESTRICTED.get(pod_security.PREFIX + m) for m in ("enforce", "warn")] == ["restricted"] * 2
    kubernetes.client.CoreV1Api(kube).patch_namespace(namespace, {"metadata": {"labels": RESTRICTED}})
    tenant = ["--set", f"tenantNamespaces.names={{{namespace}}}", "--set", "tenantNamespaces.create=false"]
    docs = template(helm_bin, namespace, *VALUES[values], *tenant)
    outside = [
        (d["kind"], d["metadata"]["name"], d["metadata"]["namespace"])
        for d in docs
        if d["metadata"].get("namespace") not in (None, namespace)
    ]
    # The one object outside the release: the operator's read of the API server's front-proxy CA (the read
    # API authenticates the proxied requests with it), in kube-system as every aggregated API server binds it.
    assert outside == [("RoleBinding", "agentrun-operator-auth-reader", "kube-system")], outside
    result = ds.kubectl(admin_kubeconfig, "apply", "--dry-run=server", "-f", "-", stdin=ds.dump(docs))
    assert "PodSecurity" not in result.stderr, result.stderr
    applied = {line.split()[0] for line in result.stdout.splitlines() if "(server dry run)" in line}
    assert "deployment.apps/agentrun-operator" in applied
    assert "configmap/agentrun-operator-config" in applied
    assert "serviceaccount/agentrun-worker" in applied
    if values == "in-cluster-postgres":
        assert "statefulset.apps/agentrun-postgres" in applied
    if values == "external-postgres-tls":
        assert "secret/agentrun-postgres-ca" in applied
