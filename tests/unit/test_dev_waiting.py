"""agentrun_dev.waiting.poll: the first truthy value at once, the last falsy one after the deadline."""

from __future__ import annotations

import itertools
import time

from agentrun_dev import waiting


def test_poll_returns_the_first_truthy_value_without_waiting_for_the_deadline() -> None:
    values = iter([0, None, "ready", "later"])
    t0 = time.monotonic()
    assert waiting.poll(lambda: next(values), timeout=60.0, interval=0.01) == "ready"
    assert time.monotonic() - t0 < 30.0
    assert next(values) == "later"  # not called again once truthy


def test_poll_returns_the_last_falsy_value_once_the_deadline_passed() -> None:
    calls = itertools.count(1)
    seen: list[int] = []

    def never() -> list[int]:
        seen.append(next(calls))
        return []

    assert waiting.poll(never, timeout=0.05, interval=0.01) == []
    assert len(seen) >= 2  # polled again until the deadline, not given up after one try
