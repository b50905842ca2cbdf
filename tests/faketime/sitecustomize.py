"""Loaded as ``sitecustomize`` only by the worker processes that the clock-skew test runs under libfaketime.

Debian's libfaketime 0.9.10 with ``FAKETIME_DONT_FAKE_MONOTONIC=1`` (needed: a faked monotonic clock hangs
CPython's timed lock waits) fails ``clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)`` with EINVAL, and that is
how CPython 3.11's ``time.sleep`` sleeps. ``select()`` with a timeout is unaffected, so sleeping is routed
through it. The wall clock stays skewed — that is what the test is about; only sleeping is worked around.
"""

from __future__ import annotations

import select
import time


def _sleep(seconds: float) -> None:
    if seconds < 0:
        raise ValueError("sleep length must be non-negative")
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        select.select([], [], [], left)


time.sleep = _sleep
