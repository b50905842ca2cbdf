"""scripts/approver-kubeconfig (docs/quickstart.md, the second identity) against the real API server: the
kubeconfig it prints authenticates as the namespace's ServiceAccount ``approver`` with a TokenRequest
token, may approve AgentRuns there (ClusterRole agentrun-approver) and nothing more: not edit runs, not
elsewhere."""

from __future__ import annotations

import os
import pathlib
import subprocess

import pytest

from tests.support import deploy as ds

pytestmark = pytest.mark.cluster

SCRIPT = ds.ROOT / "scripts" / "approver-kubeconfig"


def test_approver_kubeconfig(namespace: str, admin_kubeconfig: pathlib.Path, tmp_path: pathlib.Path) -> None:
    env = {**os.environ, "KUBECONFIG": str(admin_kubeconfig)}
    out = subprocess.run(
        [str(SCRIPT), namespace], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    kubeconfig = tmp_path / "approver.kubeconfig"
    kubeconfig.write_text(out.stdout)
    assert "client-key-data" not in out.stdout  # none of the admin's credentials are copied

    def can_i(*args: str) -> str:
        return ds.kubectl(kubeconfig, "auth", "can-i", *args, check=False).stdout.strip()

    who = ds.kubectl(kubeconfig, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}").stdout
    assert who == f"system:serviceaccount:{namespace}:approver"
    assert can_i("approve", "agentruns.agentrun.dev", "-n", namespace) == "yes"
    assert can_i("update", "agentruns.agentrun.dev", "-n", namespace) == "no"
    assert can_i("approve", "agentruns.agentrun.dev", "-n", "default") == "no"
    # Run again (a fresh token): the ServiceAccount and RoleBinding are kept, not duplicated or refused.
    again = subprocess.run(
        [str(SCRIPT), namespace], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert again.returncode == 0, again.stderr
