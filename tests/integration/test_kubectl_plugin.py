"""``kubectl agentrun …`` through the real kubectl plugin mechanism, on the dev cluster.

kubectl finds ``kubectl-agentrun`` (the project's console script) on PATH and runs it with the user's
KUBECONFIG; the ledger comes from AGENTRUN_DSN. The AgentRun's status and ledger rows are written here the
way the operator and worker write them, so this test needs neither; approvals go through the real admission
policies (the approver is a second real identity; a user without the `approve` verb is refused).
"""

from __future__ import annotations

import json
import pathlib
import time
from collections.abc import Callable
from typing import Any

import kubernetes
import psycopg
import pytest

from tests.support.kube import GROUP, PLURAL, VERSION, bind, create_run, kubectl
from tests.support.seeded_run import seed_run
from tests.support.specs import TICKET_GRAPH


def apply_decision(
    kube: kubernetes.client.ApiClient, namespace: str, dsn: str, name: str, seeded: dict[str, Any], by: str
) -> None:
    """What the operator does with an approve annotation (here: record it, as the operator would)."""
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "UPDATE agentrun_approvals SET status = 'approved', decided_by = %s, decided_at = now()"
            " WHERE approval_id = %s",
            (by, seeded["approval_id"]),
        )
        conn.execute(
            "INSERT INTO agentrun_attempts (run_id, attempt, pod, epoch, start_reason, ended_at, outcome)"
            " VALUES (%s, 3, %s, 3, 'approval', now(), 'succeeded')",
            (seeded["uid"], f"{name}-3"),
        )
        conn.execute("UPDATE agentrun_runs SET status = 'succeeded' WHERE run_id = %s", (seeded["uid"],))
    kubernetes.client.CustomObjectsApi(kube).patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        name,
        {"status": {"phase": "Succeeded", "pendingApproval": None, "attempts": 3}},
    )


def test_kubectl_agentrun_list_trace_ledger_approve(
    kube: kubernetes.client.ApiClient,
    namespace: str,
    pg_dsn: str,
    admin_kubeconfig: pathlib.Path,
    identity: Callable[..., pathlib.Path],
) -> None:
    name = "ticket-1"
    seeded = seed_run(kube, namespace, pg_dsn, name)

    listed = kubectl(admin_kubeconfig, "agentrun", "list", "-n", namespace, dsn=pg_dsn)
    assert listed.returncode == 0, listed.stderr
    row = next(line.split() for line in listed.stdout.splitlines() if line.startswith(name))
    assert row[:5] == [name, "WaitingApproval", "review", "2", seeded["approval_id"]]

    traced = kubectl(admin_kubeconfig, "agentrun", "trace", name, "-n", namespace, dsn=pg_dsn)
    assert traced.returncode == 0, traced.stderr
    for fragment in (
        f"{name}-1",
        f"{name}-2",
        "drained",
        "evicted",
        "smtp-42",
        "ck-3",
        "notify: ran in attempts 1, 2; same effect keys",
    ):
        assert fragment in traced.stdout, (fragment, traced.stdout)

    ledger = kubectl(admin_kubeconfig, "agentrun", "ledger", name, "-n", namespace, "-o", "json", dsn=pg_dsn)
    assert ledger.returncode == 0, ledger.stderr
    (eff,) = json.loads(ledger.stdout)
    assert (eff["key"], eff["status"], eff["attempts"], eff["providerRef"]) == (
        "k-notify",
        "sent",
        1,
        "smtp-42",
    )

    # a user who may edit runs but lacks the `approve` verb: the API server's refusal is shown as it is
    bind(kube, namespace, "eve", "agentrun-editor")
    refused = kubectl(identity("eve"), "agentrun", "approve", name, "-n", namespace, dsn=pg_dsn)
    assert refused.returncode == 1
    assert "agentrun: the API server refused" in refused.stderr or "denied" in refused.stderr, refused.stderr
    print("refusal shown to eve:", refused.stderr.strip())

    # no RBAC at all: even reading the run is refused, with the server's words
    nobody = kubectl(identity("mallory"), "agentrun", "trace", name, "-n", namespace, dsn=pg_dsn)
    assert nobody.returncode == 1
    assert 'User "mallory" cannot get resource "agentruns"' in nobody.stderr, nobody.stderr

    # the approver: annotated with the current pending approval id, stamped by the admission policy
    bind(kube, namespace, "alice", "agentrun-approver")
    approved = kubectl(
        identity("alice"),
        "agentrun",
        "approve",
        name,
        "-n",
        namespace,
        "--comment",
        "looks right",
        dsn=pg_dsn,
    )
    assert approved.returncode == 0, approved.stderr
    annotations = kubernetes.client.CustomObjectsApi(kube).get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name
    )["metadata"]["annotations"]
    assert annotations["agentrun.dev/approve"] == seeded["approval_id"]
    assert annotations["agentrun.dev/comment"] == "looks right"
    assert annotations.get("agentrun.dev/decided-by") == "alice"

    apply_decision(kube, namespace, pg_dsn, name, seeded, by=annotations["agentrun.dev/decided-by"])
    final = kubectl(admin_kubeconfig, "agentrun", "trace", name, "-n", namespace, dsn=pg_dsn)
    assert final.returncode == 0, final.stderr
    assert "alice" in final.stdout and "approved" in final.stdout
    print(final.stdout)

    again = kubectl(identity("alice"), "agentrun", "approve", name, "-n", namespace, dsn=pg_dsn)
    assert again.returncode == 1
    assert f"AgentRun {namespace}/{name} has no pending approval (phase Succeeded)" in again.stderr


def test_kubectl_agentrun_errors_are_clear(
    kube: kubernetes.client.ApiClient, namespace: str, pg_dsn: str, admin_kubeconfig: pathlib.Path
) -> None:
    missing = kubectl(admin_kubeconfig, "agentrun", "trace", "nope", "-n", namespace, dsn=pg_dsn)
    assert missing.returncode == 1
    assert missing.stderr.strip() == f'agentrun: AgentRun "nope" not found in namespace "{namespace}"'
    empty = kubectl(admin_kubeconfig, "agentrun", "list", "-n", namespace, dsn=pg_dsn)
    assert empty.returncode == 0 and "No AgentRuns found" in empty.stdout
    usage = kubectl(admin_kubeconfig, "agentrun", "trace", dsn=pg_dsn)
    assert usage.returncode == 2 and "usage" in usage.stderr
    started = time.monotonic()
    nodb = kubectl(admin_kubeconfig, "agentrun", "list", "-n", namespace, dsn="postgresql://x@127.0.0.1:1/x")
    assert nodb.returncode == 0  # list needs only the API server
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("cmd", ["approve", "reject"])
def test_no_pending_approval(
    kube: kubernetes.client.ApiClient, namespace: str, pg_dsn: str, admin_kubeconfig: pathlib.Path, cmd: str
) -> None:
    create_run(kube, namespace, "idle", {"graph": TICKET_GRAPH, "input": {}})
    result = kubectl(admin_kubeconfig, "agentrun", cmd, "idle", "-n", namespace, dsn=pg_dsn)
    assert result.returncode == 1
    assert "has no pending approval" in result.stderr
