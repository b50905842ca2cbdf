"""The LeaseKeeper's threads stop at once: ``release()``/``stop()`` sit on every attempt's exit path.

Before, the heartbeat thread polled its event every 0.5 s and ``stop()`` joined it, so every exit waited
0.25 s on average (up to 0.5 s). No API server is needed: the threads are stopped long before the first
renewal (a 60 s Lease renews after 20 s), so the client is never used.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from agentrun_core import lease


def _started_keeper(hook: Any) -> lease.LeaseKeeper:
    keeper = lease.LeaseKeeper(
        api=None,  # type: ignore[arg-type]  # never called: see the module docstring
        config=lease.LeaseConfig(namespace="ns", name="l", holder="p", duration_seconds=60),
        on_renewed=hook,
    )
    keeper._epoch = 1  # as after acquire(); acquiring needs an API server, stopping does not
    keeper._last_renewed = time.monotonic()
    keeper.start()
    return keeper


def test_stop_does_not_wait_for_a_heartbeat_poll() -> None:
    # Ten stops in a row: with the old 0.5 s poll they took ~2.5 s in total (each 0-0.5 s), and less than
    # 1 s with a vanishing probability; woken by the stop itself they take milliseconds each.
    t0 = time.monotonic()
    for _ in range(10):
        keeper = _started_keeper(lambda: None)
        keeper.stop()
        assert keeper._hook_thread is None
    assert time.monotonic() - t0 < 1.0


def test_the_heartbeat_hook_still_runs_after_each_renewal_and_stops_after_release() -> None:
    beats: list[int] = []
    beat = threading.Event()

    def hook() -> None:
        beats.append(1)
        beat.set()

    keeper = _started_keeper(hook)
    hook_thread = keeper._hook_thread
    assert hook_thread is not None
    keeper._renewed.set()  # what a successful renewal does
    assert beat.wait(timeout=30)
    keeper.stop()
    assert not hook_thread.is_alive()
    assert len(beats) == 1
