"""P6: a lost node — the node running an attempt is cut off while its Pod keeps running.

Two nodes: the dev cluster's real node (kubelet, containerd, runc: ``agentrun dev up --node=real``, the image
built and loaded: ``make image``, ``python -m agentrun_dev.node.image load``) and the local pod runtime's
node. An operator runs on the host (so the cut does not reach it). A run of ``agentrun_dev.mail_steps:graph``
(one email per step through the effect ledger, a pause after each) starts on the real node; once it has sent
two emails the node is partitioned (``agentrun_dev.node.lifecycle.partition``: the one path from the node's
network namespace to the API server, Postgres and the SMTP sink black-holed; kubelet, containerd and the
worker's container keep running). From the cut: the operator sees the run's Lease expire, force-deletes the
Pod and starts the next attempt, which prefers another node (``agent_operator.decide.pods.manifest``,
``avoid_node``) — its first step on the pod runtime's node is the figure. Then the partition heals: the old
worker, still running, reaches Postgres and the sink again; it must be fenced, and the sink must hold each
step's email exactly once.

Placement: the run tolerates the real node's taint and selects ``kubernetes.io/os=linux`` (both nodes), so
kube-scheduler places its Pods (the pod runtime leaves such Pods to it); the pod runtime's node is cordoned
until attempt 1 is bound, so attempt 1 lands on the real node. Each node reaches Postgres at its own address
(the real node's Pods at the node IP, the pod runtime's on loopback), so the workers' DSN lists both hosts,
loopback first (refused at once inside a Pod's network namespace; libpq then tries the next).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
import urllib.request
import uuid
from typing import Any

import kubernetes
import psycopg
from psycopg import conninfo

from agentrun_core.api import protocol
from agentrun_dev.demo_support import DemoError, wait_until
from bench import cluster, db, resume, stats

GRAPH = "agentrun_dev.mail_steps:graph"
IMAGE = "agentrun:0.1.0"  # what `make image` tags and deploy/ runs
POD_RUNTIME_NODE = "agentrun-dev-node"  # agentrun_dev.podruntime.settings.Settings.node_name
LEASE_SECONDS = 10
SLACK_SECONDS = 5.0  # the target: the next attempt's first step within the Lease duration + this
SUBJECT = "lost-node step"  # agentrun_dev.mail_steps.SUBJECT


@dataclasses.dataclass
class Outcome:
    """One lost-node case, times in seconds from the cut."""

    lease_seconds: int
    expiry: float  # the old Lease's expiry (its last renewTime + duration): no safe takeover before it
    created: float  # attempt 2's row written (the operator created its Pod)
    takeover: float  # attempt 2's first step
    nodes: tuple[str, str]  # attempt 1's node, attempt 2's
    old_outcome: str  # attempt 1's row after the heal ("fenced": its worker came back and was refused)
    old_detail: str  # and why, in the worker's words
    emails: dict[int, int]  # step -> messages at the sink
    phase: str  # the run's phase at the end

    @property
    def duplicates(self) -> int:
        return sum(n - 1 for n in self.emails.values() if n > 1)


def unavailable() -> str | None:
    """None when a lost-node case can run here; else why not."""
    try:
        from agentrun_dev import settings as dev_settings
        from agentrun_dev.node import config, lifecycle

        s = dev_settings.from_env()
        down = [r.name for r in lifecycle.status(s) if not r.healthy]
        if down:
            return f"the real node is not up ({', '.join(down)}): agentrun dev up --node=real"
        api = db.kube_api(str(s.kubeconfig))
        try:
            node: Any = kubernetes.client.CoreV1Api(api).read_node(config.NODE_NAME)
        finally:
            api.close()
        names = [n for image in node.status.images or () for n in image.names or ()]
        if not any(n.endswith("/" + IMAGE) or n == IMAGE for n in names):
            load = "make image; python -m agentrun_dev.node.image load"
            return f"the image {IMAGE} is not on the real node: {load}"
    except Exception as exc:  # no dev cluster, no node state: say so, never fail the suite
        return f"the dev cluster or its real node is not reachable: {exc}"
    return None


def in_cluster_operators(c: cluster.Cluster) -> list[str]:
    """Operator Deployments with replicas (deploy/ watches every namespace: it would act on our run too)."""
    apps: Any = kubernetes.client.AppsV1Api(c.api)
    found = apps.list_deployment_for_all_namespaces(label_selector="app.kubernetes.io/component=operator")
    return [f"{d.metadata.namespace}/{d.metadata.name}" for d in found.items if d.spec.replicas]


def two_node_dsn(dsn: str, node_ip: str) -> str:
    """``dsn`` with the node IP as a second host: loopback for the pod runtime, the node IP for the real node.
    Pure."""
    params: dict[str, Any] = conninfo.conninfo_to_dict(dsn)
    host, port = str(params.get("host") or "127.0.0.1"), str(params.get("port") or 5432)
    params.update(host=f"{host},{node_ip}", port=f"{port},{port}")
    return conninfo.make_conninfo(**params)


def operator_env(dsn: str) -> dict[str, str]:
    from agentrun_dev.node import config

    return {
        "AGENTRUN_WORKER_DSN": two_node_dsn(dsn, config.NODE_IP),
        "AGENTRUN_WORKER_IMAGE": IMAGE,
        "AGENTRUN_POLL_SECONDS": "1",
    }


def _sink_counts(api_url: str, run: str) -> dict[int, int]:
    with urllib.request.urlopen(api_url + "/messages", timeout=10) as resp:
        messages = json.loads(resp.read())["messages"]
    counts: dict[int, int] = {}
    prefix = f"{SUBJECT} {run} "
    for m in messages:
        subject = str(m.get("subject") or "")
        if subject.startswith(prefix) and subject[len(prefix) :].isdigit():
            step = int(subject[len(prefix) :])
            counts[step] = counts.get(step, 0) + 1
    return counts


def _node_of(c: cluster.Cluster, pod: str) -> str:
    try:
        return str(c.core.read_namespaced_pod(pod, c.namespace).spec.node_name or "")
    except kubernetes.client.ApiException:
        return ""


def _cordon(c: cluster.Cluster, node: str, on: bool) -> None:
    c.core.patch_node(node, {"spec": {"unschedulable": on}})


def _outcome(dsn: str, run_id: str, attempt: int) -> tuple[str, str]:
    """The attempt row's (outcome, detail): the operator writes ``lost`` when it replaces the worker, the
    worker its own outcome when it ends (``fenced``: it found another holder or a write was refused)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT coalesce(outcome, ''), coalesce(detail, '') FROM agentrun_attempts"
            " WHERE run_id = %s AND attempt = %s",
            (run_id, attempt),
        ).fetchone()
    return (str(row[0]), str(row[1])) if row else ("", "")


def mail_run_spec(s: Any, emails: int, pause: float, node_selector: dict[str, str]) -> dict[str, Any]:
    """A run of ``GRAPH`` sending ``emails`` to the dev cluster's SMTP sink (settings ``s``), its worker on
    the nodes ``node_selector`` picks, the real node's taint tolerated."""
    from agentrun_dev import state
    from agentrun_dev.node import config

    toleration = {"key": config.TAINT_KEY, "operator": "Equal", "value": "true", "effect": "NoSchedule"}
    return {
        "graph": GRAPH,
        "input": {"emails": emails, "pause_seconds": pause},
        "retry": {"backoffSeconds": 0},
        "worker": {
            "nodeSelector": node_selector,
            "tolerations": [toleration],
            "env": [
                {"name": "MAIL_STEPS_SMTP_PORT", "value": str(state.port(s, "smtp"))},
                {"name": "MAIL_STEPS_SMTP_API_PORT", "value": str(state.port(s, "smtp-api"))},
            ],
        },
    }


def lost_node_case(
    c: cluster.Cluster, dsn: str, *, emails: int = 12, pause: float = 1.0, timeout: float = 300.0
) -> Outcome:
    from agentrun_dev import settings as dev_settings
    from agentrun_dev import state
    from agentrun_dev.node import config, lifecycle

    s = dev_settings.from_env()
    api_url = f"http://127.0.0.1:{state.port(s, 'smtp-api')}"
    name = f"p6-{uuid.uuid4().hex[:6]}"
    spec = mail_run_spec(s, emails, pause, {"kubernetes.io/os": "linux"})
    spec["lease"] = {"durationSeconds": LEASE_SECONDS}
    first, second = protocol.pod_name(name, 1), protocol.pod_name(name, 2)
    _cordon(c, POD_RUNTIME_NODE, True)  # attempt 1 on the real node
    try:
        run_id = c.create_run(name, spec)
        node1 = wait_until(f"{first} bound", lambda: _node_of(c, first), timeout)
    finally:
        _cordon(c, POD_RUNTIME_NODE, False)
    if node1 != config.NODE_NAME:
        raise AssertionError(f"attempt 1 ran on {node1}, not on the real node {config.NODE_NAME}")
    wait_until("two emails from the real node", lambda: len(_sink_counts(api_url, name)) >= 2, timeout)
    coord: Any = kubernetes.client.CoordinationV1Api(c.api)
    lease_name = protocol.lease_name(name)
    t_cut = time.time()
    lifecycle.partition(s)
    try:
        # The last renewal the API server has from the old worker: nothing it sends now arrives.
        renewed = coord.read_namespaced_lease(lease_name, c.namespace).spec.renew_time.timestamp()
        wait_until(
            "attempt 2's first step",
            lambda: "first_step" in resume.attempt_times(dsn, run_id),
            timeout,
        )
        times = resume.attempt_times(dsn, run_id)
        node2 = _node_of(c, second)
    finally:
        lifecycle.heal(s)
    # The old worker ran on through the partition; healed, it reaches Postgres again and must stop there.
    with contextlib.suppress(DemoError):  # reported: the outcome it has
        wait_until("attempt 1's worker fenced", lambda: _outcome(dsn, run_id, 1)[0] == "fenced", 120)
    old, old_detail = _outcome(dsn, run_id, 1)
    wait_until(f"{name} Succeeded", lambda: _phase(c, name) == "Succeeded", timeout, interval=0.5)
    return Outcome(
        lease_seconds=LEASE_SECONDS,
        expiry=renewed + LEASE_SECONDS - t_cut,
        created=times["created"] - t_cut,
        takeover=times["first_step"] - t_cut,
        nodes=(node1, node2),
        old_outcome=old,
        old_detail=old_detail,
        emails=_sink_counts(api_url, name),
        phase=_phase(c, name),
    )


def _phase(c: cluster.Cluster, name: str) -> str:
    obj = c.run_object(name)
    return str((obj.get("status") or {}).get("phase") or "")


QUICK_EMAILS, EMAILS = 6, 12


def run(report: stats.Report, *, quick: bool, reps: int) -> list[Outcome]:
    """Print the P6 figures; return the cases (none when skipped: the reason is printed)."""
    section = (
        f"P6 lost node: the real node cut off mid-run (Pod still running), run Lease {LEASE_SECONDS}s "
        "(seconds from the cut)"
    )
    report.section(section)
    why = unavailable()
    if why is not None:
        report.note(f"skipped: {why}")
        return []
    cases: list[Outcome] = []
    with db.fresh_database("p6") as dsn, cluster.Cluster("p6") as c:
        others = in_cluster_operators(c)
        if others:
            report.note(f"skipped: in-cluster operators would act on the run too: {', '.join(others)}")
            return []
        c.start_operator(dsn, operator_env(dsn))
        for _ in range(1 if quick else reps):
            cases.append(lost_node_case(c, dsn, emails=QUICK_EMAILS if quick else EMAILS))
    target = LEASE_SECONDS + SLACK_SECONDS
    report.add(
        section,
        stats.Row(
            "cut → old Lease expired (floor: no safe takeover before it)", [o.expiry for o in cases], unit="s"
        ),
    )
    report.add(section, stats.Row("cut → attempt 2's Pod created", [o.created for o in cases], unit="s"))
    report.add(
        section,
        stats.Row(
            f"cut → attempt 2's first step (target ≤ {target:.0f}s)", [o.takeover for o in cases], unit="s"
        ),
    )
    report.add(
        section,
        stats.Row(
            "old Lease expired → attempt 2's first step", [o.takeover - o.expiry for o in cases], unit="s"
        ),
    )
    worst = max(o.takeover for o in cases)
    report.note(
        f"takeover ≤ {target:.0f}s in {sum(o.takeover <= target for o in cases)}/{len(cases)} cases "
        f"(worst {worst:.1f}s); attempt 2 on {sorted({o.nodes[1] for o in cases})}"
    )
    report.note(
        f"after the heal: old workers fenced {sum(o.old_outcome == 'fenced' for o in cases)}/{len(cases)}; "
        f"emails at the SMTP sink {sum(sum(o.emails.values()) for o in cases)}, duplicates "
        f"{sum(o.duplicates for o in cases)}; runs Succeeded {sum(o.phase == 'Succeeded' for o in cases)}"
    )
    return cases
