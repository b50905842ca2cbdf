"""Every read command with every ``-o`` format, run names completed from the cluster, and the image pin's
CRD rule — through real kubectl (``kubectl agentrun …``, ``kubectl __complete agentrun …``) against the dev
cluster. The run and its ledger are seeded as the operator and worker write them (test_kubectl_plugin)."""

from __future__ import annotations

import json
import pathlib

import kubernetes
import pytest
import yaml

from agentrun import output
from tests.support.kube import GROUP, PLURAL, VERSION, kubectl
from tests.support.seeded_run import seed_run

READ = ("get", "list", "trace", "ledger")


@pytest.fixture
def seeded(kube: kubernetes.client.ApiClient, namespace: str, pg_dsn: str) -> dict[str, str]:
    return {**seed_run(kube, namespace, pg_dsn, "ticket-7"), "name": "ticket-7"}


def read(cfg: pathlib.Path, dsn: str, command: str, ns: str, fmt: str) -> str:
    args = ["agentrun", command, *([] if command == "list" else ["ticket-7"]), "-n", ns, "-o", fmt]
    done = kubectl(cfg, *args, dsn=dsn)
    assert done.returncode == 0, (command, fmt, done.stderr)
    return done.stdout


@pytest.mark.parametrize("command", READ)
def test_every_read_command_prints_every_format(
    seeded: dict[str, str], namespace: str, pg_dsn: str, admin_kubeconfig: pathlib.Path, command: str
) -> None:
    out = {fmt: read(admin_kubeconfig, pg_dsn, command, namespace, fmt) for fmt in output.FORMATS}
    as_json = json.loads(out["json"])
    assert yaml.safe_load(out["yaml"]) == as_json  # the same data, two syntaxes
    names = out["name"].split()
    if command == "ledger":
        assert [e["key"] for e in as_json] == ["k-notify"]
        assert names == ["effect/k-notify"]
        assert "smtp-42" in out["table"] and "k-notify" in out["table"]
    else:
        assert names == ["agentrun.agentrun.dev/ticket-7"]
    if command == "list":
        assert as_json["kind"] == "List" and [i["metadata"]["name"] for i in as_json["items"]] == ["ticket-7"]
    if command == "get":
        assert as_json["metadata"]["uid"] == seeded["uid"]
        assert as_json["status"]["pendingApproval"]["id"] == seeded["approval_id"]
    if command in ("get", "list"):
        header = out["table"].splitlines()[0].split()
        assert header[:2] == ["NAME", "PHASE"] and "GRAPH" not in header
        wide = out["wide"].splitlines()[0].split()
        assert wide[: len(header)] == header and wide[len(header) :] == [
            "GRAPH",
            "IMAGE",
            "RETRIES",
            "MESSAGE",
        ]
        row = out["table"].splitlines()[1].split()
        assert row[:5] == ["ticket-7", "WaitingApproval", "review", "2", seeded["approval_id"]]
    if command == "trace":
        assert as_json["run"]["uid"] == seeded["uid"] and as_json["effects"][0]["providerRef"] == "smtp-42"
        # wide shows the effects with every ledger column (CREATED, SENT, CONFIRMED, ...)
        assert "CONFIRMED" in out["wide"] and "CONFIRMED" not in out["table"]
        assert "ATTEMPTS" in out["table"]


def test_empty_list_in_each_format(namespace: str, pg_dsn: str, admin_kubeconfig: pathlib.Path) -> None:
    assert read(admin_kubeconfig, pg_dsn, "list", namespace, "table").strip() == (
        f"No AgentRuns found in namespace {namespace}."
    )
    assert json.loads(read(admin_kubeconfig, pg_dsn, "list", namespace, "json"))["items"] == []
    assert read(admin_kubeconfig, pg_dsn, "list", namespace, "name").strip() == ""


def test_kubectl_completes_run_names_from_the_cluster(
    seeded: dict[str, str], namespace: str, pg_dsn: str, admin_kubeconfig: pathlib.Path
) -> None:
    # kubectl's own completion entry point runs kubectl_complete-agentrun (kubectl 1.26+ plugin completion)
    done = kubectl(admin_kubeconfig, "__complete", "agentrun", "trace", "-n", namespace, "tic", dsn=pg_dsn)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["ticket-7", ":4"], done.stdout
    verbs = kubectl(admin_kubeconfig, "__complete", "agentrun", "", dsn=pg_dsn)
    assert {"get", "logs", "suspend", "resume", "completion"} <= set(verbs.stdout.splitlines())
    # another namespace has no such run
    other = kubectl(admin_kubeconfig, "__complete", "agentrun", "trace", "-n", "default", "tic", dsn=pg_dsn)
    assert other.stdout.splitlines() == [":4"], other.stdout


def test_the_worker_image_changes_only_with_a_retry(
    kube: kubernetes.client.ApiClient,
    seeded: dict[str, str],
    namespace: str,
    pg_dsn: str,
    admin_kubeconfig: pathlib.Path,
) -> None:
    changed = kubectl(
        admin_kubeconfig,
        "patch",
        "agentrun",
        "ticket-7",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec": {"worker": {"image": "registry.example/worker:2"}}}',
        dsn=pg_dsn,
    )
    assert changed.returncode != 0
    assert "spec.worker.image is pinned for the run's attempts" in changed.stderr, changed.stderr
    custom = kubernetes.client.CustomObjectsApi(kube)
    custom.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        "ticket-7",
        {"status": {"phase": "Failed", "pendingApproval": None}},
    )
    retried = kubectl(
        admin_kubeconfig,
        "agentrun",
        "retry",
        "ticket-7",
        "-n",
        namespace,
        "--image",
        "registry.example/worker:2",
        dsn=pg_dsn,
    )
    assert retried.returncode == 0, retried.stderr
    spec = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "ticket-7")["spec"]
    assert spec["worker"]["image"] == "registry.example/worker:2" and spec["retryGeneration"] == 1
