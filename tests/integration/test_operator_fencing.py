"""Leadership under load and fenced status writes.

* Postgres made slow (a test holds an exclusive lock on ``agentrun_runs`` while it ``pg_sleep``s): every
  reconcile blocks in its query, yet the leader renews its Lease on its own thread and keeps leading.
* A replica that decided on an old view (a paused, deposed leader waking up) cannot overwrite the status a
  newer leader wrote: the write carries a resourceVersion precondition and is refused; a replica past its
  renew deadline writes nothing at all.
"""

from __future__ import annotations

import datetime
import threading
import time

import kubernetes
import psycopg
import pytest

from agent_operator import kube as op_kube
from agent_operator import settings as settings_
from agent_operator.decide import actions, model
from agent_operator.observe import memory as memory_
from agent_operator.serve import runner
from tests.support.kube import create_run, get_run, pods
from tests.support.operator_proc import OperatorHandle
from tests.support.waiting import wait_for

RUNS = 10  # more than the event loop's default thread pool (min(32, cpus + 4)) on the CI machines
LOCK_SECONDS = 25


def _renew_time(api: kubernetes.client.ApiClient, operator: OperatorHandle) -> object:
    coord = kubernetes.client.CoordinationV1Api(api)
    lease = coord.read_namespaced_lease(operator.lease_name, operator.namespace)
    return (lease.spec.holder_identity, lease.spec.renew_time)


def test_slow_postgres_does_not_cost_the_leader_its_lease(
    kube: kubernetes.client.ApiClient, operator: OperatorHandle, pg_dsn: str
) -> None:
    ns = operator.namespace
    leader = operator.current
    for i in range(RUNS):
        create_run(kube, ns, f"slow-{i}", {"graph": "pkg.mod:graph", "worker": {"command": ["sleep", "600"]}})
    wait_for(
        lambda: all(pods(kube, ns, f"slow-{i}") for i in range(RUNS)),
        120,
        "a Pod for every run",
        on_timeout=operator.logs,
    )
    locked = threading.Event()

    def hold_lock() -> None:
        with psycopg.connect(pg_dsn) as conn:
            conn.execute("LOCK TABLE agentrun_runs IN ACCESS EXCLUSIVE MODE")
            locked.set()
            conn.execute("SELECT pg_sleep(%s)", (LOCK_SECONDS,))
            conn.rollback()

    holder = threading.Thread(target=hold_lock, daemon=True)
    holder.start()
    assert locked.wait(30)
    started = time.monotonic()
    renewals = set()
    while holder.is_alive():
        who, renewed = _renew_time(kube, operator)  # type: ignore[misc]
        assert who == leader.identity, operator.logs()[-4000:]
        assert leader.alive(), f"the leader exited while Postgres was slow\n{leader.logs()[-4000:]}"
        renewals.add(renewed)
        time.sleep(0.5)
    held = time.monotonic() - started
    duration = float(operator.env["AGENTRUN_LEADER_DURATION_SECONDS"])
    assert held > 2 * duration  # the lock really outlasted the renew deadline
    assert len(renewals) >= held / duration  # renewed every third of a duration, give or take load
    assert leader.alive() and "leadership lost" not in leader.logs()
    # and reconciles carry on once Postgres answers again
    create_run(kube, ns, "after", {"graph": "pkg.mod:graph", "worker": {"command": ["sleep", "600"]}})
    wait_for(lambda: pods(kube, ns, "after"), 60, "a Pod after the slow period", on_timeout=operator.logs)


def _world(body: dict[str, object], status: dict[str, object]) -> model.World:
    return model.World(
        run=model.RunRef.from_body(body),
        spec=model.RunSpec.from_body(body.get("spec") or {}),  # type: ignore[arg-type]
        status=status,
        now=datetime.datetime.now(datetime.UTC),
    )


def test_a_deposed_leaders_late_status_write_is_refused(
    dev_cluster: object, kube: kubernetes.client.ApiClient, namespace: str
) -> None:
    create_run(kube, namespace, "fenced", {"graph": "pkg.mod:graph"})
    api = kube
    old_view = get_run(api, namespace, "fenced")  # what the old leader saw before it was paused

    # The new leader writes status meanwhile.
    custom = kubernetes.client.CustomObjectsApi(kube)
    custom.patch_namespaced_custom_object_status(
        "agentrun.dev", "v1alpha1", namespace, "agentruns", "fenced", {"status": {"phase": "Running"}}
    )

    client = op_kube.client(str(dev_cluster.kubeconfig))  # type: ignore[attr-defined]
    cfg = settings_.Settings(dsn="postgresql://unused")
    stale = runner.Runner(cfg, client, db=None)  # type: ignore[arg-type]
    plan = actions.Plan(status={"phase": "Failed", "message": "late write of a deposed leader"})
    with pytest.raises(runner.StaleStatus):
        stale.execute(_world(old_view, {}), plan, memory_.RunMemory())
    assert get_run(api, namespace, "fenced")["status"]["phase"] == "Running"

    # Past its renew deadline a replica writes nothing, whatever it saw.
    fresh = get_run(api, namespace, "fenced")
    deposed = runner.Runner(cfg, client, db=None, may_write=lambda: False)  # type: ignore[arg-type]
    with pytest.raises(runner.NotLeader):
        deposed.execute(_world(fresh, dict(fresh["status"])), plan, memory_.RunMemory())
    assert get_run(api, namespace, "fenced")["status"]["phase"] == "Running"

    # The current leader, deciding on the current view, writes.
    current = runner.Runner(cfg, client, db=None)  # type: ignore[arg-type]
    ok = actions.Plan(status={"phase": "Pending", "message": "current"})
    current.execute(_world(fresh, dict(fresh["status"])), ok, memory_.RunMemory())
    assert get_run(api, namespace, "fenced")["status"]["phase"] == "Pending"
