"""deploy/ RBAC applied for real, then ``kubectl auth can-i --list`` for each service account compared with
the checked-in allowlists in deploy/rbac-allowlist/.

What every authenticated service account may do anyway (discovery, self reviews) is measured on an unbound
service account in the same namespace and subtracted, so the allowlists hold exactly what agentrun grants.
Regenerate after an intended change with
``AGENTRUN_WRITE_ALLOWLIST=1 pytest tests/integration/test_deploy_rbac.py`` and review the diff.
"""

from __future__ import annotations

import os
import pathlib
import secrets

import kubernetes.client
import pytest

from tests.support import deploy as ds

pytestmark = pytest.mark.cluster

ALLOWLIST = ds.ROOT / "deploy" / "rbac-allowlist"
RBAC_FILES = [
    ds.DEPLOY / "base" / "rbac-operator.yaml",
    ds.DEPLOY / "base" / "rbac-leader.yaml",
    ds.DEPLOY / "base" / "rbac-worker.yaml",
    ds.DEPLOY / "tenant" / "worker-rbac.yaml",
    ds.DEPLOY / "tenant" / "notify-rbac.yaml",  # the operator may read the notify token Secret, by name
]
FORBIDDEN_VERBS = {"*", "escalate", "bind", "impersonate"}


def _grants(kubeconfig: pathlib.Path, home: str, sa: str, where: str) -> set[tuple[str, str, str, str]]:
    """What service account ``home:sa`` may do in namespace ``where``."""
    out = ds.kubectl(
        kubeconfig, "auth", "can-i", "--list", f"--as=system:serviceaccount:{home}:{sa}", "-n", where
    ).stdout
    return ds.parse_can_i_list(out)


@pytest.fixture
def applied_rbac(
    namespace: str, admin_kubeconfig: pathlib.Path, kube: kubernetes.client.ApiClient
) -> tuple[str, str]:
    """The RBAC of deploy/ applied in ``namespace`` (cluster-scoped objects suffixed), plus a second namespace
    to check that nothing leaks beyond the bound one. Cleaned up afterwards."""
    suffix = f"-t{secrets.token_hex(3)}"
    docs = ds.retarget(ds.load_docs(RBAC_FILES), namespace, suffix)
    ds.kubectl(admin_kubeconfig, "apply", "-f", "-", stdin=ds.dump(docs))
    # The unbound SA that measures the baseline every service account has.
    ds.kubectl(admin_kubeconfig, "create", "serviceaccount", "baseline", "-n", namespace)
    other = f"{namespace[:50]}-other"
    ds.kubectl(admin_kubeconfig, "create", "namespace", other)
    try:
        yield namespace, other
    finally:
        cluster_objects = [d for d in docs if d["kind"] in ds.CLUSTER_KINDS]
        ds.kubectl(
            admin_kubeconfig,
            "delete",
            "--ignore-not-found",
            "-f",
            "-",
            stdin=ds.dump(cluster_objects),
            check=False,
        )
        ds.kubectl(admin_kubeconfig, "delete", "namespace", other, "--wait=false", check=False)


def _check(name: str, granted: set[tuple[str, str, str, str]]) -> None:
    path = ALLOWLIST / f"{name}.txt"
    if os.environ.get("AGENTRUN_WRITE_ALLOWLIST") == "1":
        header = f"# kubectl auth can-i --list for {name}, minus what any service account may do.\n"
        header += (
            "# resource\tnon-resource URLs\tresource names\tverb   (tests/integration/test_deploy_rbac.py)\n"
        )
        path.write_text(header + ds.format_rows(granted))
    expected = ds.read_allowlist(path)
    assert granted == expected, (
        f"{name}: granted but not allowlisted: {sorted(granted - expected)}; "
        f"allowlisted but not granted: {sorted(expected - granted)}"
    )


def test_service_accounts_match_the_allowlists(
    applied_rbac: tuple[str, str], admin_kubeconfig: pathlib.Path
) -> None:
    namespace, other = applied_rbac

    def grants(sa: str, where: str) -> set[tuple[str, str, str, str]]:
        baseline = _grants(admin_kubeconfig, namespace, "baseline", where)
        assert baseline, "the baseline service account should at least have the discovery rules"
        return _grants(admin_kubeconfig, namespace, sa, where) - baseline

    operator_home, worker_home = grants("agentrun-operator", namespace), grants("agentrun-worker", namespace)
    # Elsewhere the operator has its ClusterRole only, and a worker has nothing at all.
    operator_other, worker_other = grants("agentrun-operator", other), grants("agentrun-worker", other)
    for granted in (operator_home, worker_home):
        assert not {row for row in granted if row[3] in FORBIDDEN_VERBS or row[0] == "*.*"}
        assert not {row for row in granted if row[0].startswith("secrets") and not row[2]}, (
            "secrets only by name"
        )
    assert worker_other == set(), f"the worker ServiceAccount may act outside its namespace: {worker_other}"
    # The leader Lease grant is namespaced: the other namespace sees the ClusterRole alone.
    assert operator_other < operator_home
    _check("agentrun-operator", operator_home)
    _check("agentrun-operator.other-namespace", operator_other)
    _check("agentrun-worker", worker_home)


def test_worker_really_cannot_touch_pods_or_secrets(
    applied_rbac: tuple[str, str], admin_kubeconfig: pathlib.Path
) -> None:
    namespace, _ = applied_rbac
    who = f"--as=system:serviceaccount:{namespace}:agentrun-worker"
    for verb, resource in [("get", "secrets"), ("create", "pods"), ("list", "leases"), ("delete", "leases")]:
        result = ds.kubectl(
            admin_kubeconfig, "auth", "can-i", verb, resource, who, "-n", namespace, check=False
        )
        assert result.stdout.strip() == "no", (verb, resource, result.stdout)
    result = ds.kubectl(
        admin_kubeconfig, "auth", "can-i", "update", "leases", who, "-n", namespace, check=False
    )
    assert result.stdout.strip() == "yes"
