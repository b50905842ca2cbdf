"""An evicted worker Pod that is gone before any reconcile saw it stopping is still recorded ``evicted``.

On a real kubelet an evicted worker that drains at once goes Running → DisruptionTarget → Failed → deleted
within a second: often between two reconciles, which read only the watch-fed index (it drops a Pod on
DELETED). The reconcile's last view of the Pod is then ``Running``; what says "evicted" is the final object
of the watch's DELETED event (``memory.pod_deleted``). Here a real Pod of the dev cluster is evicted through
the Eviction API, its DELETED event is taken from a real watch, and the operator's fresh read
(``Runner.confirm``: the Pod is NotFound) decides the attempt's end reason.
"""

from __future__ import annotations

import datetime
import sys
import threading
from typing import Any

import kubernetes

from agent_operator import kube as op_kube
from agent_operator import settings as settings_
from agent_operator.decide import actions, cleanup, model, reconcile
from agent_operator.observe import memory as memory_
from agent_operator.serve import runner
from agentrun_core.api import meta as api_meta
from agentrun_core.api import protocol
from tests.support import rowmaker
from tests.support.kube import gone
from tests.support.waiting import wait_for

RUN = "gone"
UID = "3c9a2f0e-0000-4000-8000-000000000001"
# Exits at once on SIGTERM, as a worker between two steps drains (exit code 11) without waiting.
DRAIN_AT_ONCE = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *_: sys.exit(11))\n"
    "print('up', flush=True)\n"
    "while True: time.sleep(0.05)\n"
)

POLLS = settings_.ReconcileSettings(poll_seconds=1.0, idle_poll_seconds=5.0)


def _worker_pod(*, held: bool = False) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": protocol.pod_name(RUN, 1),
            "labels": {protocol.LABEL_RUN: RUN, protocol.LABEL_ATTEMPT: "1", protocol.LABEL_RUN_UID: UID},
            # As the operator makes them (agent_operator.decide.pods.manifest); the older test below goes
            # without.
            "finalizers": [protocol.POD_FINALIZER] if held else [],
        },
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 5,
            "containers": [
                {"name": "worker", "image": "python:3.11", "command": [sys.executable, "-c", DRAIN_AT_ONCE]}
            ],
        },
    }


def _world(namespace: str, last_seen: model.PodInfo) -> model.World:
    return model.World(
        run=model.RunRef(
            namespace=namespace,
            name=RUN,
            uid=UID,
            resource_version="1",
            annotations={},
            finalizers=(api_meta.FINALIZER,),
            deleting=False,
        ),
        spec=model.RunSpec.from_body({"graph": "pkg.mod:graph", "retry": {"backoffSeconds": 0}}),
        status={"attempts": 1, "workerPod": protocol.pod_name(RUN, 1)},
        now=datetime.datetime.now(datetime.UTC),
        db=rowmaker.run(status="running"),
        last_seen_pod=last_seen,  # what the last reconcile saw: the Pod Running, before the eviction
    )


def _start_reasons(plan: actions.Plan) -> list[str]:
    return [a.reason for a in plan.actions if isinstance(a, actions.CreatePod)]


def test_evicted_pod_deleted_between_reconciles_is_recorded_evicted(
    dev_cluster: Any, kube: kubernetes.client.ApiClient, namespace: str
) -> None:
    core: Any = kubernetes.client.CoreV1Api(kube)  # plain dict bodies, as the operator sends them
    api: Any = kube
    name = protocol.pod_name(RUN, 1)
    deleted: list[dict[str, Any]] = []
    watching = threading.Event()

    def watch() -> None:  # the operator's view: every event of the run's Pods, DELETED included
        w: Any = kubernetes.watch.Watch()  # type: ignore[no-untyped-call]
        watching.set()
        for ev in w.stream(core.list_namespaced_pod, namespace, timeout_seconds=60):
            if ev["type"] == "DELETED" and ev["object"].metadata.name == name:
                deleted.append(api.sanitize_for_serialization(ev["object"]))
                w.stop()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    watching.wait(10)
    core.create_namespaced_pod(namespace, _worker_pod())
    running = wait_for(
        lambda: (p := core.read_namespaced_pod(name, namespace)).status.phase == "Running" and p,
        60,
        "the worker Running",
    )
    sampled = model.PodInfo.from_body(api.sanitize_for_serialization(running))
    assert sampled.alive and sampled.disruption is None

    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
    }
    core.create_namespaced_pod_eviction(name, namespace, eviction)
    wait_for(lambda: deleted, 60, "the DELETED event")
    watcher.join(10)
    final = model.PodInfo.from_body(deleted[0])
    # The premise: the API server's DELETED object still says why (DisruptionTarget from the Eviction API).
    assert final.disruption == "EvictionByEvictionAPI", deleted[0]["status"]

    client = op_kube.client(str(dev_cluster.kubeconfig))
    reconciler = runner.Runner(settings_.Settings(dsn="postgresql://unused"), client, db=None)  # type: ignore[arg-type]

    # Without the DELETED event's final state, the fresh read (NotFound) leaves only the Running view.
    memory = memory_.RunMemory()
    memory.seen_pods[name] = sampled
    world = reconciler.confirm(_world(namespace, sampled), memory)
    assert world.live and world.pods == {}
    assert _start_reasons(reconcile.decide(world, POLLS)) == ["deleted"]

    # With it (the watch handler keeps it: handlers.pod_changed), the attempt ended "evicted".
    memory_.pod_deleted(memory, deleted[0])
    world = reconciler.confirm(_world(namespace, sampled), memory)
    assert world.last_seen_pod is not None and world.last_seen_pod.disruption == "EvictionByEvictionAPI"
    assert _start_reasons(reconcile.decide(world, POLLS)) == ["evicted"]


def test_a_restarted_operator_reads_why_a_held_pod_ended_then_releases_it(
    dev_cluster: Any, kube: kubernetes.client.ApiClient, namespace: str
) -> None:
    core: Any = kubernetes.client.CoreV1Api(kube)
    api: Any = kube
    name = protocol.pod_name(RUN, 1)
    core.create_namespaced_pod(namespace, _worker_pod(held=True))
    running = wait_for(
        lambda: (p := core.read_namespaced_pod(name, namespace)).status.phase == "Running" and p,
        60,
        "the worker Running",
    )
    sampled = model.PodInfo.from_body(api.sanitize_for_serialization(running))
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
    }
    core.create_namespaced_pod_eviction(name, namespace, eviction)

    def finished() -> dict[str, Any] | None:
        # The kubelet's last word: the final status written, then its own delete with grace period 0. Without
        # the finalizer the Pod would be gone from here on.
        body: dict[str, Any] = api.sanitize_for_serialization(core.read_namespaced_pod(name, namespace))
        meta = body["metadata"]
        done = body["status"].get("phase") == "Failed" and meta.get("deletionGracePeriodSeconds") == 0
        return body if done else None

    final = wait_for(finished, 60, "the evicted Pod terminated and deleted by its kubelet")
    assert model.PodInfo.from_body(final).held

    # A new operator: no memory of the Pod at all (no watch event, no earlier sample).
    client = op_kube.client(str(dev_cluster.kubeconfig))
    reconciler = runner.Runner(settings_.Settings(dsn="postgresql://unused"), client, db=None)  # type: ignore[arg-type]
    world = reconciler.confirm(_world(namespace, sampled), memory_.RunMemory())
    assert world.pods[1].disruption == "EvictionByEvictionAPI" and world.pods[1].terminated
    plan = reconcile.decide(world, POLLS)
    assert _start_reasons(plan) == ["evicted"]
    assert [a.reason for a in plan.actions if isinstance(a, actions.RecordLoss)] == ["evicted"]

    # Once the plan is carried out, the Pod is released, and the API server removes it.
    assert cleanup.releasable(world, plan) == [name]
    op_kube.release_pod(client, namespace, name)

    wait_for(
        lambda: gone(lambda: core.read_namespaced_pod(name, namespace)), 30, "the released Pod to be removed"
    )
