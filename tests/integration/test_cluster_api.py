"""The dev cluster is a real Kubernetes control plane: schemas, optimistic concurrency, RBAC, Pod Security,
garbage collection and service-account tokens all behave as in a real cluster."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from kubernetes.client import ApiClient, ApiException

from tests.support.kube import gone
from tests.support.waiting import wait_for


def _client(kubeconfig: Path) -> ApiClient:
    return kubernetes.config.new_client_from_config(config_file=str(kubeconfig))


def test_versions_and_admission_policy_apis_are_served(kube: ApiClient) -> None:
    version = kubernetes.client.VersionApi(kube).get_code()
    assert version.git_version == "v1.37.2"
    resources = kubernetes.client.AdmissionregistrationV1Api(kube).get_api_resources().resources
    names = {r.name for r in resources}
    assert {"mutatingadmissionpolicies", "validatingadmissionpolicies"} <= names


def test_crd_installs_and_its_schema_rejects_a_bad_object(kube: ApiClient, namespace: str) -> None:
    ext = kubernetes.client.ApiextensionsV1Api(kube)
    custom = kubernetes.client.CustomObjectsApi(kube)
    suffix = secrets.token_hex(3)
    group, plural = "test.agentrun.dev", f"widgets{suffix}"
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": f"widget{suffix}", "kind": f"Widget{suffix}"},
            "versions": [{
                "name": "v1", "served": True, "storage": True,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {"spec": {
                        "type": "object", "required": ["size"],
                        "properties": {"size": {"type": "integer", "minimum": 1, "maximum": 10}},
                    }},
                }},
            }],
        },
    }  # fmt: skip
    ext.create_custom_resource_definition(crd)
    try:

        def established() -> bool:
            conds = ext.read_custom_resource_definition(f"{plural}.{group}").status.conditions or []
            return any(c.type == "Established" and c.status == "True" for c in conds)

        wait_for(established, 30, "CRD Established")

        def obj(name: str, spec: dict[str, Any]) -> dict[str, Any]:
            return {
                "apiVersion": f"{group}/v1",
                "kind": f"Widget{suffix}",
                "metadata": {"name": name},
                "spec": spec,
            }

        # The served endpoint may lag Established by a moment; retry the valid create on 404 only.
        def create_good() -> bool:
            try:
                custom.create_namespaced_custom_object(
                    group, "v1", namespace, plural, obj("good", {"size": 3})
                )
                return True
            except ApiException as exc:
                if exc.status == 404:
                    return False
                raise

        wait_for(create_good, 30, "custom resource endpoint")
        for bad in ({"size": 0}, {"size": "big"}, {}):
            with pytest.raises(ApiException) as err:
                custom.create_namespaced_custom_object(group, "v1", namespace, plural, obj("bad", bad))
            assert err.value.status == 422, bad
        got = custom.get_namespaced_custom_object(group, "v1", namespace, plural, "good")
        assert got["spec"] == {"size": 3}
    finally:
        ext.delete_custom_resource_definition(f"{plural}.{group}")


def test_lease_update_with_stale_resource_version_is_a_conflict(kube: ApiClient, namespace: str) -> None:
    coord = kubernetes.client.CoordinationV1Api(kube)
    created = coord.create_namespaced_lease(
        namespace, {"metadata": {"name": "l"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}
    )
    stale_rv = created.metadata.resource_version
    first = {"metadata": {"name": "l", "resourceVersion": stale_rv}, "spec": {"holderIdentity": "b"}}
    coord.replace_namespaced_lease("l", namespace, first)
    second = {"metadata": {"name": "l", "resourceVersion": stale_rv}, "spec": {"holderIdentity": "c"}}
    with pytest.raises(ApiException) as err:
        coord.replace_namespaced_lease("l", namespace, second)
    assert err.value.status == 409
    assert coord.read_namespaced_lease("l", namespace).spec.holder_identity == "b"


def test_identity_is_a_real_user_refused_without_rbac_and_allowed_with_a_role(
    kube: ApiClient, namespace: str, identity: Callable[..., Path]
) -> None:
    user = f"alice-{secrets.token_hex(3)}"
    with _client(identity(user, ["devs"])) as alice:
        review = kubernetes.client.AuthenticationV1Api(alice).create_self_subject_review({"metadata": {}})
        assert review.status.user_info.username == user
        assert "devs" in review.status.user_info.groups
        alice_core = kubernetes.client.CoreV1Api(alice)
        with pytest.raises(ApiException) as err:
            alice_core.list_namespaced_config_map(namespace)
        assert err.value.status == 403

        rbac = kubernetes.client.RbacAuthorizationV1Api(kube)
        rbac.create_namespaced_role(namespace, {
            "metadata": {"name": "cm-reader"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}],
        })  # fmt: skip
        rbac.create_namespaced_role_binding(namespace, {
            "metadata": {"name": "alice-reads"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-reader"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        })  # fmt: skip

        def allowed() -> bool:
            try:
                alice_core.list_namespaced_config_map(namespace)
                return True
            except ApiException as exc:
                if exc.status == 403:
                    return False  # the RBAC authorizer's cache catches up within moments
                raise

        wait_for(allowed, 10, "RoleBinding to take effect")
        # The Role grants reading only.
        with pytest.raises(ApiException) as err:
            alice_core.create_namespaced_config_map(namespace, {"metadata": {"name": "x"}})
        assert err.value.status == 403
        # Another namespace is still closed.
        with pytest.raises(ApiException) as err:
            alice_core.list_namespaced_config_map("default")
        assert err.value.status == 403


def _pod(name: str, privileged: bool) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": "python", "command": ["python", "-c", "pass"]}
    if privileged:
        container["securityContext"] = {"privileged": True}
    else:
        container["securityContext"] = {
            "allowPrivilegeEscalation": False, "runAsNonRoot": True, "runAsUser": 1000,
            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"},
        }  # fmt: skip
    return {"metadata": {"name": name}, "spec": {"restartPolicy": "Never", "containers": [container]}}


def test_pod_security_admission_rejects_a_privileged_pod_in_a_restricted_namespace(
    kube: ApiClient, namespace: str
) -> None:
    core = kubernetes.client.CoreV1Api(kube)
    core.patch_namespace(
        namespace, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}
    )
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod(namespace, _pod("priv", privileged=True))
    assert err.value.status == 403
    assert "violates PodSecurity" in str(err.value.body)
    # A compliant pod is admitted (dry run: nothing is created, so nothing runs).
    core.create_namespaced_pod(namespace, _pod("ok", privileged=False), dry_run="All")


def test_controller_manager_garbage_collects_dependents_of_a_deleted_owner(
    kube: ApiClient, namespace: str
) -> None:
    core = kubernetes.client.CoreV1Api(kube)
    owner = core.create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}})
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "child", "ownerReferences": [ref]}})
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "bystander"}})
    core.delete_namespaced_config_map("owner", namespace, propagation_policy="Background")

    wait_for(
        lambda: gone(lambda: core.read_namespaced_config_map("child", namespace)),
        30,
        "garbage collection of the dependent",
    )
    assert core.read_namespaced_config_map("bystander", namespace).metadata.name == "bystander"


def test_service_account_tokens_are_issued_and_authenticate(
    kube: ApiClient, namespace: str, admin_kubeconfig: Path
) -> None:
    core = kubernetes.client.CoreV1Api(kube)
    token = core.create_namespaced_service_account_token(
        "default", namespace, {"spec": {"expirationSeconds": 600}}
    ).status.token
    cfg = kubernetes.client.Configuration()
    cfg.host = kube.configuration.host
    cfg.ssl_ca_cert = kube.configuration.ssl_ca_cert
    cfg.api_key = {"authorization": f"Bearer {token}"}
    with ApiClient(cfg) as sa:
        review = kubernetes.client.AuthenticationV1Api(sa).create_self_subject_review({"metadata": {}})
        assert review.status.user_info.username == f"system:serviceaccount:{namespace}:default"
        with pytest.raises(ApiException) as err:  # a default service account has no rights
            kubernetes.client.CoreV1Api(sa).list_namespaced_secret(namespace)
        assert err.value.status == 403
