"""End-to-end on the real node: deploy/ applied as a user would, the support-ticket run in real containers.

Needs ``agentrun dev up --node=real`` and ``make image`` (``make e2e`` does both, then runs this). Not part
of ``make test`` (pyproject ``norecursedirs``); run it with ``make e2e``.

The story, each phase timed: the operator Deployment (two replicas, both on the real node) → the example
AgentRun → its worker evicted mid-step → attempt 2 resumes → that worker pushed over its memory limit →
``OOMKilled`` → attempt 3 resumes → the leader operator Pod killed → the standby leads → a second identity
approves → ``kubectl wait --for=condition=Succeeded`` → exactly one email at the SMTP sink.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from agentrun_dev import settings as settings_mod
from agentrun_dev.node import config, lifecycle
from tests.e2e import realnode_support as rs
from tests.support.waiting import wait_for

RUN = "support-ticket"
pytestmark = pytest.mark.e2e


def _run_status(s: settings_mod.Settings) -> dict[str, Any]:
    status: dict[str, Any] = rs.get_json(s, "ar", RUN, "-n", rs.RUNS_NS).get("status") or {}
    if status.get("phase") == "Failed":
        raise AssertionError(f"the run failed: {json.dumps(status, indent=1)}")
    return status


def _leader(s: settings_mod.Settings) -> str:
    lease = rs.get_json(s, "lease", "agentrun-operator", "-n", rs.SYSTEM_NS)
    return str((lease.get("spec") or {}).get("holderIdentity") or "")


def _operator_pods(s: settings_mod.Settings) -> list[dict[str, Any]]:
    pods = rs.get_json(s, "pods", "-n", rs.SYSTEM_NS, "-l", "app.kubernetes.io/component=operator")
    return [p for p in pods.get("items", []) if not p["metadata"].get("deletionTimestamp")]


def test_support_ticket_on_the_real_node(tmp_path: Path) -> None:
    s = settings_mod.from_env()
    phase = rs.Phases()
    api = kubernetes.config.new_client_from_config(config_file=str(s.kubeconfig))  # type: ignore[no-untyped-call]
    core = kubernetes.client.CoreV1Api(api)

    phase("real node Ready, image present")
    assert all(r.healthy for r in lifecycle.status(s)), lifecycle.status(s)
    rs.kubectl(s, "get", "nodes", "-o", "wide")

    phase("apply deploy/base (operator, 2 replicas)")
    system, tenant = rs.write_overlays(s, tmp_path)
    rs.pre_create_namespaces(s)
    rs.kubectl(s, "apply", "-k", str(system))
    # Fresh operator Pods on the image just loaded (a re-run finds the previous run's Pods on the old one).
    rs.kubectl(s, "-n", rs.SYSTEM_NS, "rollout", "restart", "deployment/agentrun-operator")
    rs.kubectl(s, "-n", rs.SYSTEM_NS, "rollout", "status", "deployment/agentrun-operator", "--timeout=300s")
    pods = wait_for(lambda: len(x := _operator_pods(s)) == 2 and x, 120, "exactly the two new operator Pods")
    assert len(pods) == 2 and {p["spec"]["nodeName"] for p in pods} == {config.NODE_NAME}, pods
    names = {p["metadata"]["name"] for p in pods}
    leader = wait_for(lambda: (x := _leader(s)) in names and x, 120, "one of them to lead")
    print(f"[e2e] operator pods {[p['metadata']['name'] for p in pods]}; leader {leader}")

    phase("apply deploy/tenant and the example AgentRun")
    rs.kubectl(s, "apply", "-k", str(tenant))
    rs.kubectl(
        s, "delete", "ar", RUN, "-n", rs.RUNS_NS, "--ignore-not-found", "--wait=true", "--timeout=120s"
    )
    rs.http_json(rs.smtp_api(s) + "/messages", method="DELETE")
    rs.kubectl(s, "apply", "-n", rs.RUNS_NS, "-f", str(rs.ROOT / "deploy/examples/support-ticket.yaml"))

    phase("evict the worker mid-step -> resume")
    # Mid-step, judged from the worker itself rather than from status (which the operator refreshes on its
    # own schedule): once attempt 1's worker holds the run's Lease it runs analyze, then retrieve (6 s) and
    # draft (4 s) before it can park, so an eviction now lands inside a step.
    pod1 = f"{RUN}-1"
    uid = rs.get_json(s, "ar", RUN, "-n", rs.RUNS_NS)["metadata"]["uid"]

    def holds_lease() -> bool:  # this run's Lease (its run-uid label), not one left by the run deleted above
        lease = rs.get_json(s, "lease", f"agentrun-{RUN}", "-n", rs.RUNS_NS)
        labels = (lease.get("metadata") or {}).get("labels") or {}
        holder = (lease.get("spec") or {}).get("holderIdentity")
        return bool(labels.get("agentrun.dev/run-uid") == uid and holder == pod1)

    wait_for(holds_lease, 300, f"{pod1} to hold the run's Lease", interval=0.2)
    node = rs.get_json(s, "pod", pod1, "-n", rs.RUNS_NS)["spec"]["nodeName"]
    assert node == config.NODE_NAME, f"worker {pod1} ran on {node}, not the real node"
    meta = kubernetes.client.V1ObjectMeta(name=pod1, namespace=rs.RUNS_NS)
    core.create_namespaced_pod_eviction(pod1, rs.RUNS_NS, kubernetes.client.V1Eviction(metadata=meta))
    st = wait_for(
        lambda: (x := _run_status(s)).get("attempts", 0) >= 2 and x["workerPod"] != pod1 and x,
        180,
        "attempt 2",
    )
    pod2 = st["workerPod"]
    print(f"[e2e] evicted {pod1}; attempt 2 in {pod2} (reason {st.get('attemptReason')})")
    assert str(st.get("attemptReason")).lower() == "evicted", st

    phase("push attempt 2's worker over its memory limit -> OOMKilled -> resume")
    running = wait_for(
        lambda: (
            (p := rs.get_json(s, "pod", pod2, "-n", rs.RUNS_NS))
            and ((p.get("status") or {}).get("containerStatuses") or [{}])[0].get("state", {}).get("running")
            and p
        ),
        180,
        f"{pod2} running",
        interval=0.2,
    )
    # At once, not after attempt 2's worker takes the Lease: attempt 1 drained at a step boundary (retrieve
    # done), so attempt 2 only runs `draft` (4 s) before it parks, and under load (kubectl polls, the
    # ballast's own start) that window was missed: the worker parked (exit 10) before the cgroup went over
    # its limit. From its container's start the worker is alive through start-up, admission, the Lease and
    # `draft`.
    limit = Path(rs.container_memory_cgroup(s, running), "memory.limit_in_bytes")
    ballast = rs.push_over_memory_limit(limit.parent, int(limit.read_text()) // (1 << 20) + 64)
    ballast.wait(timeout=120)
    terminated = wait_for(
        lambda: (
            (
                (rs.get_json(s, "pod", pod2, "-n", rs.RUNS_NS).get("status") or {}).get("containerStatuses")
                or [{}]
            )[0]
            .get("state", {})
            .get("terminated")
        ),
        120,
        f"{pod2} terminated",
    )
    print(f"[e2e] {pod2} terminated: {terminated}")
    assert terminated["reason"] == "OOMKilled" and terminated["exitCode"] == 137, terminated
    st = wait_for(
        lambda: (x := _run_status(s)).get("attempts", 0) >= 3 and x["workerPod"] != pod2 and x,
        180,
        "attempt 3",
    )
    print(f"[e2e] attempt 3 in {st['workerPod']} (reason {st.get('attemptReason')})")
    assert str(st.get("attemptReason")).lower() == "oomkilled", st

    phase("kill the leader operator Pod -> the standby leads")
    wait_for(lambda: _run_status(s).get("phase") == "WaitingApproval", 300, "WaitingApproval")
    leader = _leader(s)
    standby = [p["metadata"]["name"] for p in _operator_pods(s) if p["metadata"]["name"] != leader]
    # An ordinary delete: kubelet SIGTERMs the leader, which releases its Lease, so the standby (already
    # watching) leads at once. A force delete (grace 0) is a tie by design: the API object goes at once but
    # the container renews until kubelet stops it, and the Deployment's replacement Pod, whose fresh observer
    # waits one lease duration from its first read, then expires the Lease at about the moment the standby
    # does — either may win, both are correct (tests/integration/test_operator_ha.py covers the hard kill).
    rs.kubectl(s, "delete", "pod", leader, "-n", rs.SYSTEM_NS, "--wait=false")
    new = wait_for(lambda: (x := _leader(s)) != leader and x, 120, "a new leader")
    # The standby usually wins; but when the old leader's shutdown (kopf stopping its daemons) releases the
    # Lease only after the Deployment's replacement Pod is up, both poll the free Lease every 2 s and either
    # may take it — both are live replicas, and the run must go on under whichever leads.
    live = {p["metadata"]["name"] for p in _operator_pods(s)}
    who = "the standby" if new in standby else "the replacement"
    print(f"[e2e] killed leader {leader}; now leading: {new} ({who})")
    assert new in live and new != leader, f"the new leader {new} is not a live operator Pod {sorted(live)}"

    phase("approve as a second identity -> Succeeded")
    st = _run_status(s)
    approval = st["pendingApproval"]["id"]
    manager = subprocess.run(
        [str(Path(sys.executable).parent / "agentrun"), "dev", "kubeconfig", rs.APPROVER, rs.APPROVER_GROUP],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    rs.kubectl(s, "annotate", "ar", RUN, "-n", rs.RUNS_NS, f"agentrun.dev/approve={approval}",
               kubeconfig=Path(manager))  # fmt: skip
    rs.kubectl(s, "wait", "--for=condition=Succeeded", f"ar/{RUN}", "-n", rs.RUNS_NS, "--timeout=300s")

    phase("trace and mailbox")
    env = {**os.environ, "AGENTRUN_DSN": rs.postgres.dsn(s), "KUBECONFIG": str(s.kubeconfig)}
    trace = subprocess.run(
        [str(Path(sys.executable).parent / "agentrun"), "trace", RUN, "-n", rs.RUNS_NS],
        capture_output=True, text=True, check=False, env=env,
    )  # fmt: skip
    print(trace.stdout or trace.stderr)
    mailbox = rs.http_json(rs.smtp_api(s) + "/messages")
    print(f"[e2e] mailbox: {json.dumps(mailbox, indent=1)[:2000]}")
    assert int(mailbox.get("count", 0)) == 1, mailbox

    phase("kubectl logs of the last worker (through the dev cluster's egress proxy)")
    last = _run_status(s)["workerPod"]
    log = rs.kubectl(s, "logs", last, "-n", rs.RUNS_NS, "--tail=20")
    print(log)
    assert "released by " + last in log, log  # the worker's last words: its Lease released at the end
    phase.report()
