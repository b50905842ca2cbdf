"""P3 on the real node: a worker evicted from a real kubelet + containerd node, the next attempt's first step.

With the real node up and the image loaded (as for P6), a run pinned to the real node (its selector and
toleration) runs ``agentrun_dev.mail_steps:graph`` with short pauses; once it has sent two emails its Pod is
evicted through the Eviction API. Timed from the eviction request, from Postgres and the API server (same
machine, same clock): attempt 1 recorded its end (the worker drained at a step boundary), attempt 2's Pod
created, attempt 2's first step — a real sandbox, container start and interpreter, the image present.
Beside it, alternating, the floor: a bare Pod on the same node and image, created → LangGraph's own imports
done (``floor_case``).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from agentrun_core.api import protocol
from agentrun_dev.demo_support import wait_until
from bench import cluster, db, resume, stats
from bench import p6_lost_node as p6

FLOOR_IMPORTS = "import langgraph.graph, langgraph.types, langgraph.checkpoint.postgres, psycopg_pool"

TARGET_SECONDS = 3.0  # evicted → the next attempt's first step, with the image present


def evicted_case(c: cluster.Cluster, dsn: str, *, timeout: float = 300.0) -> dict[str, float]:
    from agentrun_dev import settings as dev_settings
    from agentrun_dev import state
    from agentrun_dev.node import config

    s = dev_settings.from_env()
    api_url = f"http://127.0.0.1:{state.port(s, 'smtp-api')}"
    name = f"p3r-{uuid.uuid4().hex[:6]}"
    run_id = c.create_run(name, p6.mail_run_spec(s, 40, 0.2, {config.LABEL: "true"}))
    first = protocol.pod_name(name, 1)
    wait_until("two emails", lambda: len(p6._sink_counts(api_url, name)) >= 2, timeout)
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": first, "namespace": c.namespace},
    }
    t0 = time.time()
    c.core.create_namespaced_pod_eviction(first, c.namespace, eviction)
    wait_until("attempt 2's first step", lambda: "first_step" in resume.attempt_times(dsn, run_id), timeout)
    times = resume.attempt_times(dsn, run_id)
    node2 = p6._node_of(c, protocol.pod_name(name, 2))
    if node2 != config.NODE_NAME:
        raise AssertionError(f"attempt 2 ran on {node2!r}, not on the real node")
    # Done with it: the next case starts on a quiet node.
    c.delete_run(name)
    return {k: times[k] - t0 for k in ("ended", "created", "first_step") if k in times}


def floor_case(c: cluster.Cluster, timeout: float = 300.0) -> float:
    """The floor beside it: a bare Pod on the same node and image, created → LangGraph's own imports done
    (sandbox, container start, interpreter, ``FLOOR_IMPORTS``), as any LangGraph worker's Pod pays."""
    from agentrun_dev.node import config

    name = f"floor-{uuid.uuid4().hex[:6]}"
    code = f"import time; {FLOOR_IMPORTS}; print('FLOOR', time.time(), flush=True)"
    toleration = {"key": config.TAINT_KEY, "operator": "Equal", "value": "true", "effect": "NoSchedule"}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {config.LABEL: "true"},
            "tolerations": [toleration],
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "floor",
                    "image": p6.IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["python", "-c", code],
                    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                }
            ],
        },
    }
    t0 = time.time()
    c.core.create_namespaced_pod(c.namespace, pod)
    wait_until(
        f"{name} Succeeded",
        lambda: c.core.read_namespaced_pod(name, c.namespace).status.phase == "Succeeded",
        timeout,
    )
    log = str(c.core.read_namespaced_pod_log(name, c.namespace))
    c.core.delete_namespaced_pod(name, c.namespace)
    printed = next(line.split()[1] for line in log.splitlines() if line.startswith("FLOOR "))
    return float(printed) - t0


def run(report: stats.Report, *, quick: bool, reps: int) -> list[dict[str, float]]:
    section = "P3 on the real node (kubelet, containerd, runc): Pod evicted → next attempt (seconds)"
    report.section(section)
    why = p6.unavailable()
    if why is not None:
        report.note(f"skipped: {why}")
        return []
    cases: list[dict[str, float]] = []
    with db.fresh_database("p3real") as dsn, cluster.Cluster("p3real") as c:
        others = p6.in_cluster_operators(c)
        if others:
            report.note(f"skipped: in-cluster operators would act on the run too: {', '.join(others)}")
            return []
        c.start_operator(dsn, p6.operator_env(dsn))
        evicted_case(c, dsn)  # warm: the first container start on the node pays for cold caches
        floors: list[float] = []
        for _ in range(1 if quick else reps):  # alternating, as every baseline
            cases.append(evicted_case(c, dsn))
            floors.append(floor_case(c))
    rows: list[tuple[str, str]] = [
        ("evicted → attempt 1 recorded its end (the worker drained)", "ended"),
        ("evicted → attempt 2's Pod created", "created"),
        (f"evicted → attempt 2's first step (target ≤ {TARGET_SECONDS:.0f} s, image present)", "first_step"),
    ]
    for label, key in rows:
        values: list[Any] = [c_[key] for c_ in cases if key in c_]
        if values:
            report.add(section, stats.Row(label, values, unit="s"))
    report.add(
        section,
        stats.Row(
            "attempt 2's Pod created → its first step vs a bare Pod created → LangGraph imported (floor)",
            [c_["first_step"] - c_["created"] for c_ in cases],
            floors,
            unit="s",
        ),
    )
    return cases
