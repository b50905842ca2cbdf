"""Worker fencing with real Leases (dev cluster): a frozen zombie is deposed and makes no provider call."""

from __future__ import annotations

import signal
from pathlib import Path

import psycopg
import pytest

from agentrun_core import store
from agentrun_dev import http_provider
from tests.support import worker_harness
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.postgres]
Held = tuple[worker_harness.Worker, worker_harness.Blocked]


@pytest.fixture
def held(
    pg_dsn: str, namespace: str, admin_kubeconfig: Path, providers: worker_harness.Providers, tmp_path: Path
) -> Held:
    """Run ``r`` held by its worker in pod-a (a real Lease in the test's namespace), blocked inside
    ``prepare``; and the worker settings the next attempts run with."""
    worker = worker_harness.Worker(pg_dsn, providers, kubeconfig=admin_kubeconfig, namespace=namespace)
    worker_harness.admit(pg_dsn, "r")
    return worker, worker_harness.start_blocked(worker, "r", tmp_path, pod="pod-a", timeout=30)


def test_frozen_zombie_is_fenced_and_never_calls_the_provider(
    pg_dsn: str, providers: worker_harness.Providers, held: Held
) -> None:
    worker, blocked = held
    zombie, block, log = blocked.proc, blocked.block, blocked.log
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        wait_for(
            lambda: any(h.key == "worker" for h in store.list_heartbeats(conn, "r")), 30, interval=0.05
        )  # renewals beat
        first_epoch = store.get_run(conn, "r").lease_epoch  # type: ignore[union-attr]
    zombie.send_signal(signal.SIGSTOP)  # a GC pause / frozen node: it still believes it holds the Lease
    try:
        block.unlink()
        proc = worker.run("r", pod="pod-b", attempt=2, AGENTRUN_TEST_NODE_LOG=str(log))  # waits for expiry
        # On failure, also what the provider received (a 4xx here once went unexplained).
        # A str message: pytest truncates a tuple's repr, which hid the provider's side of this before.
        provider = http_provider.stats(providers.http_url)
        assert proc.returncode == 0, f"{proc.stderr[-4000:]}\nprovider: {provider}"
    finally:
        zombie.send_signal(signal.SIGCONT)
    _, err = zombie.communicate(timeout=60)
    assert zombie.returncode == 12, err[-3000:]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        run = store.get_run(conn, "r")
        effects = store.list_effects(conn, "r")
    assert run is not None and run.status == "succeeded" and run.lease_epoch > first_epoch
    assert len(effects) == 3 and {e.status for e in effects} == {"sent"}
    assert {e.epoch for e in effects} == {run.lease_epoch}
    stats = http_provider.stats(providers.http_url)
    assert stats["requests"] == 2 and set(stats["effects_performed"].values()) == {1}  # only pod-b called
    _, mail, _ = http_provider.request(providers.smtp_api + "/stats")
    assert mail["count"] == 1


def test_second_worker_waits_while_the_lease_is_renewed(held: Held) -> None:
    worker, blocked = held
    holder, block = blocked.proc, blocked.block
    try:
        other = worker.run("r", pod="pod-b", attempt=2, AGENTRUN_LEASE_WAIT_SECONDS="4")
        assert other.returncode == 12 and "held by" in other.stderr
    finally:
        block.unlink()
    holder.communicate(timeout=60)
    assert holder.returncode == 0


def test_renewals_and_heartbeats_continue_while_a_step_spins(
    pg_dsn: str, namespace: str, admin_kubeconfig: Path
) -> None:
    worker = worker_harness.Worker(pg_dsn, kubeconfig=admin_kubeconfig, namespace=namespace, lease_duration=3)
    worker_harness.admit(pg_dsn, "r", graph="tests.graphs.special_graphs:busy_graph")
    proc = worker.run("r", pod="pod-a", AGENTRUN_TEST_BUSY_SECONDS="5")
    assert proc.returncode == 0, proc.stderr[-3000:]  # the effect after 5 s of spinning was allowed
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        beats = {h.key: h for h in store.list_heartbeats(conn, "r")}
        (effect,) = store.list_effects(conn, "r")
    assert beats["worker"].details["seq"] >= 3  # renewals every 1 s kept beating during the spin
    assert effect.status == "sent"
