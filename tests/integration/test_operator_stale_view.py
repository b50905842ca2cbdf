"""No destructive action from a stale view: the operator talks to the API server through a TCP proxy
(``agentrun_dev.tcpproxy``) that stops forwarding on its open connections — kopf's watch streams stall
while the workers (direct to the API server) keep renewing their Leases. A stall longer than the Lease
duration must not force-delete the worker nor start a second attempt; a real hang is still taken over
within a Lease duration and a poll once the view is fresh."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import kubernetes
import pytest
import yaml

from agentrun_dev import tcpproxy
from agentrun_dev.podruntime import control
from tests.support.kube import events, pods, run_status
from tests.support.lease_holder import lease_spec
from tests.support.operator_proc import OperatorHandle, operator_env
from tests.support.takeover import start_holder
from tests.support.waiting import wait_for

STALL_SECONDS = 20.0
DURATION = 3


@pytest.fixture
def proxied_operator(
    dev_cluster: object,
    kube: kubernetes.client.ApiClient,
    namespace: str,
    pg_dsn: str,
    worker_account: str,
    tmp_path: Path,
) -> Iterator[tuple[OperatorHandle, tcpproxy.Proxy]]:
    port = dev_cluster.ports.apiserver  # type: ignore[attr-defined]
    with tcpproxy.running(port) as proxy:
        config = yaml.safe_load(Path(dev_cluster.kubeconfig).read_text())  # type: ignore[attr-defined]
        for cluster in config["clusters"]:
            cluster["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
        kubeconfig = tmp_path / "proxied-kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(config))
        env = operator_env(dev_cluster, namespace, pg_dsn)
        env["KUBECONFIG"] = str(kubeconfig)
        env["AGENTRUN_LEADER_DURATION_SECONDS"] = "60"  # the stall must not depose the leader here
        handle = OperatorHandle(namespace, pg_dsn, env, tmp_path)
        handle.start()
        try:
            handle.wait_leader(kube, timeout=60)
            yield handle, proxy
        finally:
            proxy.resume()
            handle.close()
            with contextlib.suppress(Exception):
                control.thaw_namespace(namespace)


def test_stalled_watch_kills_nothing_and_a_real_hang_is_still_taken_over(
    kube: kubernetes.client.ApiClient, proxied_operator: tuple[OperatorHandle, tcpproxy.Proxy]
) -> None:
    operator, proxy = proxied_operator
    ns = operator.namespace
    stall, _ = start_holder(kube, operator, "stall", DURATION, 60)
    assert proxy.connections > 0

    proxy.stall()  # every open connection of the operator (its watches) stops moving
    stalled_at = time.monotonic()
    renewals = set()
    while time.monotonic() - stalled_at < STALL_SECONDS:
        spec = lease_spec(kube, ns, "stall")
        assert spec is not None and spec.holder_identity == "stall-1", spec
        renewals.add(str(spec.renew_time))
        names = [(p.metadata.name, p.metadata.deletion_timestamp) for p in pods(kube, ns, "stall")]
        assert names == [("stall-1", None)], f"{names}\n{operator.logs()[-6000:]}"
        time.sleep(0.5)
    assert len(renewals) > STALL_SECONDS / DURATION  # the worker kept renewing all along
    proxy.resume()

    # The watches catch up; still one attempt, its worker untouched, the Lease never taken over.
    wait_for(lambda: "stall-1" in str(run_status(kube, ns, "stall")), 30, "status after the stall")
    time.sleep(2 * DURATION)  # room for a late, wrong takeover to show
    assert [p.metadata.name for p in pods(kube, ns, "stall")] == ["stall-1"]
    assert [p.metadata.deletion_timestamp for p in pods(kube, ns, "stall")] == [None]
    assert lease_spec(kube, ns, "stall").lease_transitions == 1
    assert run_status(kube, ns, "stall")["attempts"] == 1
    assert "LeaseExpired" not in [e.reason for e in events(kube, ns, "stall")]

    # A real hang is still taken over, within a Lease duration plus a poll (and slack for a loaded machine).
    control.freeze_pod(ns, "stall-1")
    frozen_at = time.monotonic()
    stall.pod(2, 30, "attempt 2 after a real hang")
    took = time.monotonic() - frozen_at
    assert took <= DURATION + 1 + 4, took
    print(f"stalled watch {STALL_SECONDS:.0f}s: no takeover; real hang taken over in {took:.2f}s")


def test_a_pod_the_stalled_watch_never_delivered_is_not_deleted(
    kube: kubernetes.client.ApiClient, proxied_operator: tuple[OperatorHandle, tcpproxy.Proxy]
) -> None:
    """A hang during a stall is taken over once (confirmed by fresh reads); the replacement Pod, which the
    stalled Pod watch never delivers, is not taken for deleted: no third attempt."""
    operator, proxy = proxied_operator
    ns = operator.namespace
    late, _ = start_holder(kube, operator, "late", DURATION, 60)
    proxy.stall()
    control.freeze_pod(ns, "late-1")
    late.pod(2, 60, "attempt 2 (the hang is real, confirmed by fresh reads)")
    seen_at = time.monotonic()
    while time.monotonic() - seen_at < STALL_SECONDS:
        names = [p.metadata.name for p in pods(kube, ns, "late")]
        assert "late-3" not in names, f"{names}\n{operator.logs()[-6000:]}"
        time.sleep(0.5)
    proxy.resume()
    time.sleep(2 * DURATION)
    assert "late-3" not in [p.metadata.name for p in pods(kube, ns, "late")]
    status = run_status(kube, ns, "late")
    assert status["attempts"] == 2 and status["restarts"] == 1, status
