"""Real agents on the dev cluster, their worker killed at a random moment: evicted (the Eviction API: the
worker drains), its Pod force-deleted (grace period 0), or its worker process SIGKILLed. The agents are the
chaos agents of tests/chaos/test_real_agent_faults.py (3 parallel tool calls, then 2; a tool whose effect
calls another effect; a subagent as a tool; a random drafting latency before each effect): ``create_agent``
with async tools (driven with ``astream``) and the ``ToolNode`` ReAct graph with sync ones.

The moment is random but not a sleep: each run is killed once the HTTP provider has received a randomly drawn
number of its deliveries (0: as soon as its Pod runs). Every run must end ``Succeeded`` with exactly one
delivery per tool call's effect at the provider (counted there), none lost, no divergence, and the final
messages of an unkilled run of the same agent. Real operator, API server, worker Pods, Postgres, provider.
"""

from __future__ import annotations

import collections
import concurrent.futures
import os
import random
import signal
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import psycopg
import pytest

from agentrun_core import store
from agentrun_core.api import protocol
from agentrun_dev import http_provider
from tests.graphs import real_agents
from tests.support import pg
from tests.support.kube import create_run, pods
from tests.support.operator_proc import OperatorHandle
from tests.support.specs import run_spec
from tests.support.waiting import wait_for, wait_phase

AGENTS = {
    "create-agent-async": "tests.graphs.async_agents:agent",
    "react": "tests.graphs.real_agents:chaos_react",
}
KILLS = ("evict", "force-delete", "sigkill")
START = {"messages": [{"role": "user", "content": "settle everything"}]}
EVERYONE = {to: 1 for to in real_agents.CHAOS_DELIVERIES}


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[str]:
    with http_provider.HttpProvider(tmp_path / "provider") as p:
        yield p.url


def _spec(graph: str, url: str) -> dict[str, Any]:
    env = {"TEST_HTTP_URL": url, "TEST_JITTER_MS": "1000"}  # AGENTRUN_* names are the operator's
    return run_spec(graph, START, retry={"backoffSeconds": 0, "maxAttempts": 6}, env=env)


class Deliveries:
    """Effects performed at the provider, counted there: run uid -> recipient -> count. Each key's request
    is read once (a kill waits on these counts, polled often: one request per poll, not one per effect)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._lock = threading.Lock()
        self._whom: dict[str, tuple[str, str]] = {}  # idempotency key -> (run, recipient)

    def __call__(self) -> dict[str, collections.Counter[str]]:
        found: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        for key, performed in http_provider.stats(self.url)["effects_performed"].items():
            with self._lock:
                whom = self._whom.get(key)
            if whom is None:
                status, entry, _ = http_provider.request(f"{self.url}/effects/{key}")
                assert status == 200, (status, entry)
                whom = (entry["request"]["run"], entry["request"]["to"])
                with self._lock:
                    self._whom[key] = whom
            found[whom[0]][whom[1]] += performed
        return found


def _running_pod(kube: kubernetes.client.ApiClient, ns: str, run: str) -> Any:
    for pod in pods(kube, ns, run):
        if pod.status.phase == "Running" and pod.metadata.deletion_timestamp is None:
            return pod
    return None


def _sigkill_worker(ns: str, pod: str) -> int:
    """SIGKILL the worker processes of ``pod`` (the dev pod runtime runs containers as local processes; the
    worker's environment names its Pod and namespace, which is this test's own)."""
    needles = {f"{protocol.ENV_POD_NAME}={pod}".encode(), f"{protocol.ENV_NAMESPACE}={ns}".encode()}
    killed = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if not needles <= set(f.read().split(b"\0")):
                    continue
            os.kill(int(entry), signal.SIGKILL)
            killed += 1
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return killed


def _kill(
    kube: kubernetes.client.ApiClient, ns: str, name: str, uid: str, how: str, delivered: Deliveries
) -> str:
    """Wait for the drawn moment, then kill the run's worker ``how``; what was done (for the report)."""
    # at most 3 of the 7 deliveries: a turn of drafting (up to 1 s a call) is still ahead when it is killed
    after = random.Random(f"{name}-{uuid.uuid4()}").randrange(0, 4)
    pod = wait_for(
        lambda: sum(delivered()[uid].values()) >= after and _running_pod(kube, ns, name),
        240,
        f"{name}: its Pod running after {after} deliveries",
        interval=0.05,
    )
    podname, core = pod.metadata.name, kubernetes.client.CoreV1Api(kube)
    if how == "evict":
        core.create_namespaced_pod_eviction(podname, ns, {"metadata": {"name": podname, "namespace": ns}})
    elif how == "force-delete":
        core.delete_namespaced_pod(podname, ns, grace_period_seconds=0)
    elif not _sigkill_worker(ns, podname):
        return f"{how}: no worker process of {podname} left after {after} deliveries"
    return f"{how} {podname} after {after} deliveries"


@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_real_agents_killed_at_random_deliver_each_tool_call_once(
    agent: str, kube: kubernetes.client.ApiClient, operator: OperatorHandle, pg_dsn: str, provider: str
) -> None:
    ns, graph = operator.namespace, AGENTS[agent]
    names = ["ref", *KILLS]
    uids = {n: create_run(kube, ns, n, _spec(graph, provider))["metadata"]["uid"] for n in names}
    deliveries = Deliveries(provider)
    with concurrent.futures.ThreadPoolExecutor(len(KILLS)) as pool:
        kills = {how: pool.submit(_kill, kube, ns, how, uids[how], how, deliveries) for how in KILLS}
        done = {how: kill.result() for how, kill in kills.items()}
    statuses = {n: wait_phase(kube, ns, n, "Succeeded", 300, operator) for n in names}
    delivered = deliveries()
    expected = pg.final_messages(pg_dsn, graph, uids["ref"])
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for name in names:
            what = (name, done.get(name), statuses[name].get("attempts"))
            assert delivered[uids[name]] == EVERYONE, what  # one delivery per effect of each call, none lost
            rows = store.list_effects(conn, uids[name])
            assert len(rows) == len(EVERYONE), what
            assert all(e.status == "sent" and e.divergences == 0 for e in rows), what
            assert pg.final_messages(pg_dsn, graph, uids[name]) == expected, what
    # The kills landed: a killed run needed another attempt. A worker may still finish first (a force-deleted
    # Pod's process lives until the runtime sees the deletion), so two of the three must show it.
    seen = {how: (done[how], statuses[how]["attempts"], statuses[how].get("attemptReason")) for how in KILLS}
    assert sum(statuses[how]["attempts"] >= 2 for how in KILLS) >= 2, seen
