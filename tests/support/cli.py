"""The ``agentrun`` command as a user runs it: the venv's console script, in a subprocess of its own."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

VENV_BIN = Path(sys.executable).parent


def agentrun(
    *args: str, timeout: float, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``agentrun ARGS``, its output captured; ``env`` (when given) is its whole environment. Its exit code is
    the caller's to check."""
    return subprocess.run(
        [str(VENV_BIN / "agentrun"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
