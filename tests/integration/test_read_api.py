"""Reading a run with the reader's own Kubernetes identity: ``kubectl agentrun trace|ledger NAME`` through the
API server's aggregation layer (APIService ``v1alpha1.read.agentrun.dev``, served by the operator), no Secret
and no DSN on the reader's side.

The real chain, nothing mocked: kubectl -> kube-apiserver (authenticates the user, RBAC on
``agentruntraces.read.agentrun.dev``) -> the front proxy's client certificate -> the operator's HTTPS endpoint
(checks that certificate against the ``extension-apiserver-authentication`` ConfigMap, then a
SubjectAccessReview: may this user ``get`` the AgentRun?) -> Postgres as the namespace's tenant role.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes
import psycopg
import psycopg.conninfo
import pytest

from agentrun import client
from agentrun_core import store
from agentrun_dev import read_api
from tests.support.kube import bind, create_run
from tests.support.operator_proc import OperatorHandle, Operators
from tests.support.sockets import free_port
from tests.support.specs import STEPS
from tests.support.waiting import wait_phase

VENV_BIN = Path(sys.executable).parent


@pytest.fixture
def read_operator(
    dev_cluster: Any, kube: kubernetes.client.ApiClient, operators: Operators, tmp_path: Path
) -> Iterator[OperatorHandle]:
    """The operator with its read API on, registered as the dev cluster's APIService."""
    port = free_port()
    cert, key = read_api.serving_pair(dev_cluster.settings, tmp_path / "read-api")
    handle = operators(
        {
            "AGENTRUN_READ_API_PORT": str(port),
            "AGENTRUN_READ_API_ADDRESS": "127.0.0.1",
            "AGENTRUN_READ_API_CERT": str(cert),
            "AGENTRUN_READ_API_KEY": str(key),
        }
    )
    handle.start()
    try:
        handle.wait_leader(kube, timeout=60)
        read_api.register(dev_cluster.settings, port)
        read_api.wait_available(dev_cluster.settings, port, timeout=60)
        yield handle
    finally:
        # Never left pointing at a dead port: the API server would keep answering 503 for the group.
        read_api.unregister(dev_cluster.settings)


def agentrun(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``kubectl agentrun ARGS`` as the kubeconfig's user, with no DSN anywhere in its environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTRUN_")}
    env.update({"PATH": f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}", "KUBECONFIG": str(kubeconfig)})
    return subprocess.run(
        ["kubectl", "agentrun", *args], capture_output=True, text=True, timeout=60, env=env
    )


def kubectl_as(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *args], capture_output=True, text=True, timeout=60
    )


def other_namespace(kube: kubernetes.client.ApiClient, namespace: str) -> Iterator[str]:
    name = f"{namespace[:50]}-b"
    core = kubernetes.client.CoreV1Api(kube)
    core.create_namespace({"metadata": {"name": name}})
    try:
        yield name
    finally:
        core.delete_namespace(name, propagation_policy="Background")


@pytest.fixture
def namespace_b(kube: kubernetes.client.ApiClient, namespace: str) -> Iterator[str]:
    yield from other_namespace(kube, namespace)


def test_a_namespace_reader_reads_trace_and_ledger_with_only_rbac(
    kube: kubernetes.client.ApiClient,
    read_operator: OperatorHandle,
    namespace_b: str,
    identity: Callable[..., Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ns, out = read_operator.namespace, tmp_path / "effects.txt"
    uid = create_run(kube, ns, "r1", {"graph": STEPS, "input": {"path": str(out), "line": "x"}})["metadata"][
        "uid"
    ]
    wait_phase(kube, ns, "r1", "Succeeded", 120, read_operator)
    assert len(out.read_text().splitlines()) == 1  # the one effect, at the real provider (a file)
    # The same name in a namespace the reader has no rights in (never run: the operator does not watch it).
    create_run(kube, namespace_b, "r1", {"graph": STEPS, "input": {"path": str(out), "line": "x"}})
    bind(kube, ns, "rita", "agentrun-viewer")  # get/list/watch AgentRuns + their trace, nothing else
    bind(kube, ns, "vic", "view")  # the built-in view: the read resources (aggregated), not the AgentRun
    rita, vic, stan = identity("rita", ["readers"]), identity("vic", ["devs"]), identity("stan", ["devs"])

    traced = agentrun(rita, "trace", "r1", "-n", ns, "-o", "json")
    assert traced.returncode == 0, traced.stderr
    data = json.loads(traced.stdout)
    assert data["run"]["uid"] == uid and data["run"]["ledgerStatus"] == "succeeded"
    assert [e["tool"] for e in data["effects"]] == ["append_line"]
    assert data["effects"][0]["status"] == "sent"  # a tool that has no confirmation
    assert [a["attempt"] for a in data["attempts"]] == [1]
    assert [s["step"].split(":")[0] for s in data["steps"]] == ["prepare", "act", "finish"]
    table = agentrun(rita, "trace", "r1", "-n", ns)
    assert table.returncode == 0 and "ATTEMPTS" in table.stdout, table.stderr

    # The Python client, as the same reader (no dsn=, no AGENTRUN_DSN).
    monkeypatch.delenv("AGENTRUN_DSN", raising=False)
    as_rita = client.Client(kubeconfig=str(rita), namespace=ns)
    assert as_rita.trace("r1")["effects"] == data["effects"] == as_rita.effects("r1")
    with pytest.raises(client.Error, match="may not get AgentRun"):
        client.Client(kubeconfig=str(vic), namespace=ns).effects("r1")

    # The approvals view, with plain kubectl (the resource is discoverable like any other).
    approvals = kubectl_as(rita, "get", "agentrunapprovals.read.agentrun.dev", "r1", "-n", ns, "-o", "json")
    assert approvals.returncode == 0, approvals.stderr
    got = json.loads(approvals.stdout)
    assert got["kind"] == "AgentRunApprovals" and got["metadata"]["uid"] == uid and got["approvals"] == []

    ledger = agentrun(rita, "ledger", "r1", "-n", ns, "-o", "name")
    assert ledger.returncode == 0, ledger.stderr
    assert ledger.stdout.split() == [f"effect/{data['effects'][0]['key']}"]

    # The rows come through the namespace's tenant role (its Secret), under row-level security: with the
    # other namespace's role in that Secret, the same reader sees the run but none of its rows.
    with psycopg.connect(read_operator.dsn, autocommit=True) as conn:
        role = store.provision_tenant(conn, namespace_b, "another-tenants-password")
    params = psycopg.conninfo.conninfo_to_dict(read_operator.dsn)
    params.update(user=role, password="another-tenants-password")
    secret = {"stringData": {"dsn": psycopg.conninfo.make_conninfo(**params)}}
    kubernetes.client.CoreV1Api(kube).patch_namespaced_secret("agentrun-worker-db", ns, secret)
    foreign = agentrun(rita, "trace", "r1", "-n", ns, "-o", "json")
    assert foreign.returncode == 0, foreign.stderr
    seen = json.loads(foreign.stdout)
    assert seen["run"]["uid"] == uid and seen["run"]["ledgerStatus"] is None
    assert seen["effects"] == seen["attempts"] == seen["steps"] == []

    # Nobody else's: no RBAC at all, RBAC in the other namespace only, the read resources without the run.
    for who, where, says in (
        (stan, ns, "forbidden"),
        (rita, namespace_b, "forbidden"),
        (vic, ns, "may not get AgentRun"),
    ):
        refused = agentrun(who, "trace", "r1", "-n", where)
        assert refused.returncode == 1, refused.stdout
        assert says in refused.stderr and "r1" in refused.stderr, refused.stderr
        assert refused.stdout == ""
        refused = agentrun(who, "ledger", "r1", "-n", where)
        assert refused.returncode == 1 and says in refused.stderr, refused.stderr


def test_the_read_api_answers_only_the_api_servers_front_proxy(
    dev_cluster: Any, read_operator: OperatorHandle, identity: Callable[..., Path]
) -> None:
    """A client certificate from the same CA but not the front proxy's name, claiming to be the admin in the
    X-Remote-User header, is refused: the headers count only from the front proxy."""
    port = int(read_operator.env["AGENTRUN_READ_API_PORT"])
    ns = read_operator.namespace
    mallory = identity("mallory", ["devs"])
    cert, key = read_api.client_pair_of(mallory, Path(read_operator.env["AGENTRUN_READ_API_CERT"]).parent)
    ctx = ssl.create_default_context(cafile=str(dev_cluster.settings.pki_dir / "ca.crt"))
    ctx.check_hostname = False
    ctx.load_cert_chain(cert, key)
    req = urllib.request.Request(
        f"https://127.0.0.1:{port}/apis/read.agentrun.dev/v1alpha1/namespaces/{ns}/agentruntraces/r1",
        headers={"X-Remote-User": "agentrun-admin", "X-Remote-Group": "system:masters"},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(req, context=ctx, timeout=30)
    assert refused.value.code == 401
    assert "front-proxy-client" in refused.value.read().decode()


def test_without_the_read_api_the_cli_says_what_is_missing(
    dev_cluster: Any, kube: kubernetes.client.ApiClient, namespace: str, admin_kubeconfig: Path
) -> None:
    read_api.unregister(dev_cluster.settings)
    create_run(kube, namespace, "r1", {"graph": STEPS, "input": {"path": "/dev/null"}})
    for command in ("trace", "ledger"):
        done = agentrun(admin_kubeconfig, command, "r1", "-n", namespace)
        assert done.returncode == 1 and done.stdout == ""
        says = "the read API (APIService v1alpha1.read.agentrun.dev) is not installed"
        assert says in done.stderr, done.stderr
        assert "--dsn" in done.stderr
