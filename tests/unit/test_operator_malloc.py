"""The operator caps glibc's malloc arenas before its reconcile threads start (``serve.main``): a thread
pool's per-thread arenas keep what a burst of reconciles freed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

# Eight threads allocate past pymalloc (4 KiB blocks) and hold it; malloc_stats() prints "Arena N:" per arena.
_PROBE = textwrap.dedent(
    """
    import ctypes, sys, threading
    from agent_operator.serve import main
    print(main.cap_malloc_arenas(), file=sys.stderr)
    done = threading.Event()
    def hold():
        kept = [bytearray(4096) for _ in range(500)]
        done.wait()
    threads = [threading.Thread(target=hold) for _ in range(8)]
    for t in threads:
        t.start()
    ctypes.CDLL(None).malloc_stats()
    done.set()
    for t in threads:
        t.join()
    """
)


def _arenas(env: dict[str, str]) -> tuple[str, int]:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=60, check=True
    ).stderr
    return out.splitlines()[0], sum(1 for line in out.splitlines() if line.startswith("Arena "))


glibc = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt and malloc_stats")


@glibc
def test_the_operator_runs_on_two_malloc_arenas() -> None:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    applied, arenas = _arenas(env)
    assert applied == "True" and arenas == 2


@glibc
def test_malloc_arena_max_in_the_environment_wins() -> None:
    applied, arenas = _arenas({**os.environ, "MALLOC_ARENA_MAX": "4"})
    assert applied == "False" and arenas == 4
