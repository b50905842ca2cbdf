"""`agentrun demo` end to end on the dev cluster: the README's first command minus the bootstrap.

The demo itself asserts exactly one email (it exits 1 otherwise); this test also checks the story its
output tells: an eviction, a second attempt, an approval by the manager, the trace and the mailbox.
"""

from __future__ import annotations

import os
import re
import subprocess
from typing import Any

import pytest

from tests.support import cli

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def _agentrun(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """As a user runs it: no AGENTRUN_ setting of the tests' own but the dev cluster's home."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTRUN_") or k == "AGENTRUN_DEV_HOME"}
    return cli.agentrun(*args, timeout=timeout, env=env)


def test_demo_evicts_resumes_approves_and_sends_one_email(dev_cluster: Any) -> None:
    try:
        result = _agentrun("demo", timeout=420)
        out = result.stdout
        assert result.returncode == 0, out[-6000:] + result.stderr[-3000:]
        assert "/eviction" in out
        assert re.search(r"resumed: attempt 2 in pod support-ticket-2", out), out[-4000:]
        assert "agentrun.dev/approve=a-" in out and "condition met" in out
        assert re.search(r"approved\s+manager", out), "the trace names the approver"
        assert re.search(r"\bevicted\b", out), "the trace shows why attempt 2 started"
        assert "mailbox of the dev SMTP sink: 1 email(s)" in out
        assert out.count("Subject:    Re: Charged twice for my subscription [T-1042]") == 1
        # Re-running is safe: a second demo deletes the first run and sends its own single email.
        again = _agentrun("demo", timeout=420)
        assert again.returncode == 0, again.stdout[-4000:] + again.stderr[-2000:]
        assert "operator pid" in again.stdout and "already running" in again.stdout
        assert "1 email(s)" in again.stdout
    finally:
        stop = _agentrun("demo", "stop", timeout=60)
        assert stop.returncode == 0, stop.stderr
