"""LeaseKeeper against the real kube-apiserver of the dev cluster.

Partitions are real: the keeper under test talks to the API server through a loopback TCP proxy that the
test can black-hole (requests hang, like a lost network) and heal, while other keepers talk to the API
server directly. Short durations (2-3 s) keep the suite fast; every timing assertion leaves slack for a
loaded 2-core machine.
"""

from __future__ import annotations

import asyncio
import copy
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import kubernetes.client
import pytest

from agentrun_core import kube as wkube
from agentrun_core import lease, lease_math
from agentrun_dev import tcpproxy
from tests.support.waiting import wait_for

pytestmark = pytest.mark.cluster


def _upstream(api: kubernetes.client.ApiClient) -> tuple[str, int]:
    url = urllib.parse.urlsplit(api.configuration.host)
    assert url.hostname and url.port
    return url.hostname, url.port


@pytest.fixture
def proxy(kube: kubernetes.client.ApiClient) -> Iterator[tcpproxy.Proxy]:
    """A loopback proxy to the API server that can black-hole traffic (a partition)."""
    host, port = _upstream(kube)
    with tcpproxy.Proxy(port, host) as p:
        yield p


def via(api: kubernetes.client.ApiClient, p: tcpproxy.Proxy) -> kubernetes.client.ApiClient:
    """An ApiClient with the same credentials that reaches the API server through the proxy."""
    cfg = copy.copy(api.configuration)
    host, _ = _upstream(api)
    cfg.host = f"https://{host}:{p.port}"
    cfg.retries = False
    return kubernetes.client.ApiClient(cfg)


def keeper(
    api: kubernetes.client.ApiClient,
    namespace: str,
    holder: str,
    duration: int = 3,
    name: str = "lease-a",
    **kw: object,
) -> lease.LeaseKeeper:
    return lease.LeaseKeeper(api, lease.LeaseConfig(namespace, name, holder, duration_seconds=duration), **kw)  # type: ignore[arg-type]


def spec(api: kubernetes.client.ApiClient, namespace: str, name: str = "lease-a") -> dict:
    result: dict = wkube.get_lease(api, namespace, name)["spec"]
    return result


# --- acquisition --------------------------------------------------------------------------------------------


def race(keepers: list[lease.LeaseKeeper], wait_seconds: float) -> dict[str, int | lease.LeaseHeld]:
    """Start all acquisitions at the same instant; holder -> epoch or the LeaseHeld raised."""
    barrier = threading.Barrier(len(keepers))
    results: dict[str, int | lease.LeaseHeld] = {}

    def run(k: lease.LeaseKeeper) -> None:
        barrier.wait()
        try:
            results[k.config.holder] = k.acquire(wait_seconds=wait_seconds)
        except lease.LeaseHeld as exc:
            results[k.config.holder] = exc

    threads = [threading.Thread(target=run, args=(k,)) for k in keepers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_racing_keepers_exactly_one_wins(kube: kubernetes.client.ApiClient, namespace: str) -> None:
    for round_ in range(3):
        name = f"race-{round_}"
        results = race([keeper(kube, namespace, f"pod-{i}", name=name) for i in range(4)], wait_seconds=0.3)
        winners = [h for h, r in results.items() if isinstance(r, int)]
        assert len(winners) == 1, results
        losers = [r for h, r in results.items() if h not in winners]
        assert all(isinstance(r, lease.LeaseHeld) and r.holder == winners[0] for r in losers)
        current = spec(kube, namespace, name)
        assert current["holderIdentity"] == winners[0]
        assert current["leaseTransitions"] == results[winners[0]] == 1
    # And racing for an expired Lease: still exactly one new holder, one transition.
    # The winner (not renewing) looks fresh to the losers again, so they time out: the new version was
    # first seen after t0 + 1 s, so it cannot look expired before t0 + 2 s > their 1.8 s.
    old = keeper(kube, namespace, "pod-old", duration=1, name="race-expired")
    epoch = old.acquire(wait_seconds=1)
    keepers = [keeper(kube, namespace, f"pod-{i}", duration=1, name="race-expired") for i in range(3)]
    results = race(keepers, wait_seconds=1.8)
    winners = [h for h, r in results.items() if isinstance(r, int)]
    assert len(winners) == 1, results
    assert results[winners[0]] == epoch + 1 == spec(kube, namespace, "race-expired")["leaseTransitions"]


def test_create_sets_labels_owner_and_epoch_floor(kube: kubernetes.client.ApiClient, namespace: str) -> None:
    owner_cm = kubernetes.client.CoreV1Api(kube).create_namespaced_config_map(
        namespace, {"metadata": {"name": "owner"}}
    )
    owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner_cm.metadata.uid}
    cfg = lease.LeaseConfig(
        namespace, "lease-a", "pod-a", duration_seconds=3, owner=owner, labels={"agentrun.dev/run": "r1"}
    )
    k = lease.LeaseKeeper(kube, cfg)
    assert k.acquire(wait_seconds=1, min_epoch=7) == 7 == k.epoch
    body = kube_get(kube, namespace)
    assert body["metadata"]["labels"] == {"agentrun.dev/run": "r1"}
    assert body["metadata"]["ownerReferences"][0]["uid"] == owner_cm.metadata.uid
    assert body["spec"]["renewTime"].endswith("Z") and len(body["spec"]["renewTime"]) == 27  # MicroTime
    # Already ours: no change of holder, epoch stays...
    assert lease.LeaseKeeper(kube, cfg).acquire(wait_seconds=1) == 7
    # ...unless a fresh epoch is demanded (the worker passes its stored epoch + 1).
    assert lease.LeaseKeeper(kube, cfg).acquire(wait_seconds=1, min_epoch=8) == 8


def kube_get(api: kubernetes.client.ApiClient, namespace: str, name: str = "lease-a") -> dict:
    return wkube.get_lease(api, namespace, name)


def test_takeover_after_expiry_raises_the_epoch(kube: kubernetes.client.ApiClient, namespace: str) -> None:
    a, b = keeper(kube, namespace, "pod-a", duration=2), keeper(kube, namespace, "pod-b", duration=2)
    epoch_a = a.acquire(wait_seconds=1)  # and then never renewed: a hung or dead worker
    started = time.monotonic()
    epoch_b = b.acquire(wait_seconds=10)
    waited = time.monotonic() - started
    assert epoch_b == epoch_a + 1
    # b judged expiry by its own observation: it watched the unchanged Lease for a full duration.
    assert waited > 2.0
    assert waited < 2.0 + 2 * lease_math.poll_interval(2) + 1.5
    assert spec(kube, namespace)["holderIdentity"] == "pod-b"
    assert not a.may_act()


def test_held_lease_times_out_with_lease_held(kube: kubernetes.client.ApiClient, namespace: str) -> None:
    a = keeper(kube, namespace, "pod-a", duration=2)
    a.acquire(wait_seconds=1)
    a.start()
    try:
        with pytest.raises(lease.LeaseHeld) as err:
            keeper(kube, namespace, "pod-b", duration=2).acquire(wait_seconds=3)  # longer than the duration
        assert err.value.holder == "pod-a"
    finally:
        a.release()


def test_release_then_reacquire(kube: kubernetes.client.ApiClient, namespace: str) -> None:
    a, b = keeper(kube, namespace, "pod-a"), keeper(kube, namespace, "pod-b")
    epoch = a.acquire(wait_seconds=1)
    a.start()
    assert a.may_act()
    assert a.release() is True
    assert not a.may_act()
    with pytest.raises(lease.LeaseLost, match="released"):
        a.check()
    current = spec(kube, namespace)
    assert current["holderIdentity"] == "" and current["leaseTransitions"] == epoch
    started = time.monotonic()
    assert b.acquire(wait_seconds=0.5) == epoch + 1  # free: taken at once, no expiry wait
    assert time.monotonic() - started < 0.5
    assert a.release() is False  # not ours any more: left alone
    assert spec(kube, namespace)["holderIdentity"] == "pod-b"
    b.release()
    assert a.acquire(wait_seconds=0.5) == epoch + 2


# --- renewal ------------------------------------------------------------------------------------------------


def test_renewals_continue_while_the_main_thread_and_event_loop_are_blocked(
    kube: kubernetes.client.ApiClient, namespace: str
) -> None:
    renewed: list[float] = []
    calls = {"n": 0}

    def heartbeat() -> None:
        calls["n"] += 1
        renewed.append(time.monotonic())
        if calls["n"] == 2:
            raise RuntimeError("a failing heartbeat write must not stop renewals")

    a = keeper(kube, namespace, "pod-a", duration=3, on_renewed=heartbeat)
    a.acquire(wait_seconds=1)
    a.start()
    t0 = time.monotonic()

    async def tool_blocking_the_loop() -> None:
        time.sleep(2.6)  # a synchronous call inside a coroutine: the event loop is stuck

    asyncio.run(tool_blocking_the_loop())
    assert a.may_act()
    t1 = time.monotonic()
    x = 0
    while time.monotonic() - t1 < 2.6:  # CPU-bound pure-Python loop on the main thread
        x += 1
    assert a.may_act()
    a.check()
    during = [t for t in renewed if t >= t0]
    assert len(during) >= 4, during  # every 1 s for 5.2 s
    gaps = [b - a_ for a_, b in zip([t0, *during], during, strict=False)]
    assert max(gaps) < lease_math.renew_deadline(3), gaps
    assert a.renewals >= len(during)
    # Another process sees a live holder.
    with pytest.raises(lease.LeaseHeld):
        keeper(kube, namespace, "pod-b", duration=3).acquire(wait_seconds=0.3)
    a.release()


def test_may_act_turns_false_past_the_renew_deadline_when_partitioned(
    kube: kubernetes.client.ApiClient, namespace: str, proxy: tcpproxy.Proxy
) -> None:
    lost: list[str] = []
    a = keeper(via(kube, proxy), namespace, "pod-a", duration=3, on_lost=lost.append)
    a.acquire(wait_seconds=1)
    a.start()
    wait_for(lambda: a.renewals >= 1, 3, interval=0.01)
    proxy.blackhole()
    wait_for(lambda: not a.may_act(), 4, interval=0.01)
    went_false = time.monotonic()
    last_ok = a.last_renewed  # read after: a renewal in flight at the cut may still have got through
    assert last_ok is not None
    # Within the renew deadline of the last renewal that got through, and not before it.
    assert lease_math.renew_deadline(3) <= went_false - last_ok < lease_math.renew_deadline(3) + 0.5
    with pytest.raises(lease.LeaseLost, match="no successful renewal"):
        a.check()
    # Healed before the full duration: nobody else wrote, so the next CAS renewal succeeds and we act again.
    proxy.heal()
    wait_for(a.may_act, 3, interval=0.01)
    a.check()
    assert lost == []
    # Partitioned for longer than the duration: the keeper gives up and reports the loss.
    proxy.blackhole()
    wait_for(lambda: bool(lost), 6, interval=0.01)
    assert "full lease duration" in lost[0]
    assert not a.may_act()
    with pytest.raises(lease.LeaseLost):
        a.check()


def test_split_brain_the_deposed_holder_stopped_acting_first(
    kube: kubernetes.client.ApiClient, namespace: str, proxy: tcpproxy.Proxy
) -> None:
    """A partitioned holder is replaced: it stopped acting before the new holder started, and it reports
    the loss instead of carrying on after the partition heals."""
    lost: list[str] = []
    a = keeper(via(kube, proxy), namespace, "pod-a", duration=3, on_lost=lost.append)
    epoch_a = a.acquire(wait_seconds=1)
    a.start()
    stopped_acting: list[float] = []

    def watch() -> None:
        wait_for(lambda: not a.may_act(), 10, interval=0.005)
        stopped_acting.append(time.monotonic())

    watcher = threading.Thread(target=watch)
    proxy.blackhole()
    watcher.start()
    b = keeper(kube, namespace, "pod-b", duration=3)
    epoch_b = b.acquire(wait_seconds=10)
    took_over = time.monotonic()
    watcher.join()
    assert epoch_b == epoch_a + 1
    assert stopped_acting[0] < took_over  # no instant at which both may act
    b.start()
    renewals_while_cut = a.renewals
    proxy.heal()
    # a gives up on its own once a full duration passed without renewal (before or just after b took
    # over); had it renewed later, its stale resourceVersion would get a 409 and it would see pod-b.
    wait_for(lambda: bool(lost), 5, interval=0.01)
    assert "full lease duration" in lost[0] or "pod-b" in lost[0]
    assert a.renewals == renewals_while_cut
    with pytest.raises(lease.LeaseLost):
        a.check()
    assert a.release() is False
    assert spec(kube, namespace)["holderIdentity"] == "pod-b"
    b.release()


def test_a_stale_renewal_is_refused_and_reported(kube: kubernetes.client.ApiClient, namespace: str) -> None:
    lost: list[str] = []
    a = keeper(kube, namespace, "pod-a", duration=2, on_lost=lost.append)
    epoch = a.acquire(wait_seconds=1)
    # Somebody else takes the Lease under a (a forced takeover; the CAS a will send is now stale).
    body = kube_get(kube, namespace)
    body["spec"]["holderIdentity"] = "intruder"
    body["spec"]["leaseTransitions"] = epoch + 1
    wkube.replace_lease(kube, namespace, "lease-a", body)
    a.start()
    wait_for(lambda: bool(lost), 3, interval=0.01)
    assert "intruder" in lost[0] and not a.may_act()
    assert spec(kube, namespace)["holderIdentity"] == "intruder"


def test_a_lease_deleted_under_the_keeper_is_lost(kube: kubernetes.client.ApiClient, namespace: str) -> None:
    lost: list[str] = []
    a = keeper(kube, namespace, "pod-a", duration=2, on_lost=lost.append)
    a.acquire(wait_seconds=1)
    a.start()
    wkube.delete_lease(kube, namespace, "lease-a")
    wait_for(lambda: bool(lost), 3, interval=0.01)
    assert "deleted" in lost[0]
    with pytest.raises(lease.LeaseLost, match="deleted"):
        a.check()


def test_unreachable_api_server_at_acquire(namespace: str, kube: kubernetes.client.ApiClient) -> None:
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there now: connection refused
    cfg = copy.copy(kube.configuration)
    cfg.host = f"https://127.0.0.1:{port}"
    cfg.retries = False
    k = keeper(kubernetes.client.ApiClient(cfg), namespace, "pod-a")
    with pytest.raises(lease.LeaseError, match="could not acquire") as err:
        k.acquire(wait_seconds=0.5)
    assert not isinstance(err.value, lease.LeaseHeld)
    assert not k.may_act()


def test_fault_point_before_lease_renew_kills_the_process(
    kube: kubernetes.client.ApiClient, namespace: str, admin_kubeconfig: Path
) -> None:
    script = (
        "import time\n"
        "from agentrun_core import kube, lease\n"
        f"config = lease.LeaseConfig({namespace!r}, 'lease-a', 'pod-x', 2)\n"
        "k = lease.LeaseKeeper(kube.load_api_client(), config)\n"
        "print(k.acquire(5), flush=True)\n"
        "k.start()\n"
        "time.sleep(30)\n"
    )
    env = {**os.environ, "KUBECONFIG": str(admin_kubeconfig), "AGENTRUN_FAULT_POINTS": "before_lease_renew@2"}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert proc.stdout.strip() == "1"
    assert "before_lease_renew hit #2" in proc.stderr
    # It died holding the Lease after exactly one renewal; a successor takes it once it expires.
    assert spec(kube, namespace)["holderIdentity"] == "pod-x"
    assert keeper(kube, namespace, "pod-y", duration=2).acquire(wait_seconds=8) == 2
