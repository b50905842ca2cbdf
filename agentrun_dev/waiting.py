"""Waiting on a condition: polled until it holds or a deadline passes, never a fixed sleep.

One loop for the dev tooling (the demo, ``agentrun dev up``) and the tests' waits (``tests.support.waiting``
can build on it): each caller says what a timeout means (its own error and message).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def poll(check: Callable[[], T], timeout: float, interval: float) -> T:
    """``check()``'s first truthy value, called every ``interval`` s; once ``timeout`` s have passed, its last
    value (falsy: the caller reports the timeout). Returns as soon as the value is truthy."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)
