"""The upgrade from release v0.1.0 with runs in flight (docs/upgrading.md), on the dev cluster and a fresh
database: v0.1.0's operator and workers (its code, ``git archive v0.1.0``, on the project's current
dependencies) admit four runs — two parked on an approval, two held inside their first step by live v0.1.0
workers. Then the procedure: stop the old operator, ``agentrun migrate`` with the new code (the dry run
first), start the new operator (``AGENTRUN_MIGRATE=false``: the Job's work, not its own), release the held
workers, approve as a second identity. A v0.1.0 worker cannot write to the migrated schema (migration 24
scoped effect keys per run; without migration 35's fencing the held runs failed here with
``InvalidColumnReference``): migration 35 fences the live ones off, they exit 12 at their next write, and
the runs' next attempts run the new code. Every run succeeds, and every effect happened exactly once,
counted at the real HTTP provider and SMTP sink.

On the dev cluster a worker "image" is the code on the worker process's PYTHONPATH (the local pod runtime
runs the container's command as a local process): v0.1.0's operator gets a worker command that puts the
extracted tree first, so its workers run v0.1.0's code; the new operator's workers run the checkout's.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tarfile
from collections.abc import Callable
from io import BytesIO
from pathlib import Path
from typing import Any

import kubernetes
import psycopg
import pytest

from agentrun_core import store
from agentrun_dev import http_provider, smtp_sink
from tests.support.cli import agentrun
from tests.support.kube import bind, create_run, run_status
from tests.support.operator_proc import REPO, OperatorHandle, operator_env
from tests.support.specs import run_spec, upgrade_env
from tests.support.waiting import wait_for, wait_phase

pytestmark = pytest.mark.slow

TAG = "v0.1.0"
# The release's commit, which every full clone of main has: CI clones main's history without its tags.
RELEASE_COMMIT = "551d3053d81e70969eb475456feb98e96970ee8c"
GRAPH = "tests.graphs.upgrade_graph:graph"
PARKED = ("parked-1", "parked-2")  # at their approval before the upgrade
HELD = ("held-1", "held-2")  # inside their first step, live v0.1.0 workers, across the upgrade


def test_the_tag_when_present_names_the_release_commit() -> None:
    tagged = _resolve(TAG)
    assert tagged in (None, RELEASE_COMMIT)


def test_a_clone_without_the_release_commit_fails_and_says_unshallow(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(sys.modules[__name__], "TAG", "v0.0.0-never-tagged")
    monkeypatch.setattr(sys.modules[__name__], "RELEASE_COMMIT", "0" * 40)
    with pytest.raises(pytest.fail.Exception, match=r"git fetch --unshallow"):
        extract_release(tmp_path)


def _resolve(rev: str) -> str | None:
    found = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
        capture_output=True,
        text=True,
    )
    return found.stdout.strip() if found.returncode == 0 else None


def extract_release(dest: Path) -> Path:
    """The release's tree, as ``git archive`` gives it, by its commit (a clone without tags has it too).
    A shallow clone, which lacks the commit, fails here, clearly."""
    commit = _resolve(RELEASE_COMMIT)
    if commit is None:
        pytest.fail(
            f"the upgrade test needs release {TAG}'s commit {RELEASE_COMMIT[:12]}, which this clone "
            "does not have (a shallow clone?): run `git fetch --unshallow`",
            pytrace=False,
        )
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit], capture_output=True, check=True)
    with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
        tar.extractall(dest, filter="data")
    # The user's graph package, the same in both "images" (it uses only what v0.1.0 already offered).
    shutil.copy(
        REPO / "tests" / "graphs" / "upgrade_graph.py", dest / "tests" / "graphs" / "upgrade_graph.py"
    )
    return dest


_OPERATOR = "import sys; from agentrun import cli; sys.exit(cli.main(['operator']))"


class OldOperator(OperatorHandle):
    """v0.1.0's operator: the same process as ``agentrun operator``, from the extracted tree."""

    root: Path

    def start(self, identity: str | None = None, extra_env: dict[str, str] | None = None) -> Any:
        self._count += 1
        identity = identity or f"old-operator-{self._count}"
        log = self.log_dir / f"{identity}.log"
        env = {**self.env, "AGENTRUN_LEADER_IDENTITY": identity, **(extra_env or {})}
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-c", _OPERATOR],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.root,  # '' first on sys.path: the old tree's packages win over the checkout's
                start_new_session=True,
            )
        from tests.support.operator_proc import Replica

        replica = Replica(identity, proc, log)
        self.replicas.append(replica)
        return replica


def spec(hp: http_provider.HttpProvider, sink: smtp_sink.SmtpSink, name: str, hold: Path) -> dict[str, Any]:
    input_ = {
        "customer": name,
        "approval": name != "held-1",  # held-2 parks after the upgrade, under its old worker
        "hold": str(hold) if name in HELD else "",
    }
    retry = {"backoffSeconds": 1, "maxBackoffSeconds": 4}
    return run_spec(GRAPH, input_, lease=10, retry=retry, env=upgrade_env(hp, sink))


def holder(dsn: str, run_id: str) -> str | None:
    """The worker Pod that claimed the run (its attempt running), from the run's row."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT holder FROM agentrun_runs WHERE run_id = %s AND status = 'running'", (run_id,)
        ).fetchone()
    return str(row[0]) if row and row[0] else None


def test_upgrade_from_v0_1_0_with_runs_in_flight(
    dev_cluster: Any,
    kube: kubernetes.client.ApiClient,
    namespace: str,
    worker_account: str,
    empty_dsn: str,
    identity: Callable[..., Path],
    sink: smtp_sink.SmtpSink,
    tmp_path: Path,
) -> None:
    old_root = extract_release(tmp_path / "v0.1.0")
    hold = tmp_path / "hold"
    hold.write_text("held across the upgrade\n")
    base_env = operator_env(dev_cluster, namespace, empty_dsn)
    pythonpath = f"{old_root}{os.pathsep}{old_root / 'operator'}"
    old_env = {
        **base_env,
        "PYTHONPATH": pythonpath,
        # Its workers run its code: the old tree first on their PYTHONPATH (the dev cluster's "image").
        "AGENTRUN_WORKER_COMMAND": (
            f"/usr/bin/env PYTHONPATH={pythonpath} {sys.executable} -m agentrun.cli worker"
        ),
    }
    old = OldOperator(namespace, empty_dsn, old_env, tmp_path)
    old.root = old_root
    new = OperatorHandle(namespace, empty_dsn, {**base_env, "AGENTRUN_MIGRATE": "false"}, tmp_path)
    bind(kube, namespace, "manager", "agentrun-approver")
    manager = identity("manager", ["managers"])
    try:
        with http_provider.HttpProvider(tmp_path / "h") as hp:
            # --- v0.1.0 -----------------------------------------------------------------------------------
            old.start()
            old.wait_leader(kube, timeout=90)
            uids = {
                name: create_run(kube, namespace, name, spec(hp, sink, name, hold))["metadata"]["uid"]
                for name in (*PARKED, *HELD)
            }
            for name in PARKED:
                wait_phase(kube, namespace, name, "WaitingApproval", 120, old)
            for name in HELD:
                wait_for(
                    lambda name=name: holder(empty_dsn, uids[name]) == f"{name}-1",  # type: ignore[misc]
                    120,
                    f"{name} held in its first step by its v0.1.0 worker",
                    on_timeout=old.logs,
                )
            with psycopg.connect(empty_dsn) as conn:
                assert store.schema_version(conn) == 22  # v0.1.0's own migrations, applied by its operator
                assert store.schema_compat_level(conn) is None
            assert len(http_provider.stats(hp.url)["effects_performed"]) == len(PARKED)

            # --- the upgrade: operator stopped, migrate, new operator -------------------------------------
            old.stop()
            cli_env = {k: v for k, v in os.environ.items() if k != "AGENTRUN_DSN"}
            dry = agentrun("migrate", "--dsn", empty_dsn, "--dry-run", timeout=300, env=cli_env)
            assert dry.returncode == 0, dry
            pending = [line.split()[0] for line in dry.stdout.splitlines() if line.startswith("  ")]
            assert pending[0] == "0023" and "0035" in pending, dry.stdout
            done = agentrun("migrate", timeout=300, env={**cli_env, "AGENTRUN_DSN": empty_dsn})
            assert done.returncode == 0, done
            assert [ln.split()[1] for ln in done.stdout.splitlines() if ln.startswith("applied")] == pending
            new.start()
            new.wait_leader(kube, timeout=90)

            # --- in flight: the held v0.1.0 workers go on against the migrated schema; approvals ----------
            hold.unlink()  # the held v0.1.0 workers go on, and are fenced at their next write
            for name in (*PARKED, "held-2"):
                pending_approval = wait_for(
                    lambda name=name: run_status(kube, namespace, name).get("pendingApproval"),  # type: ignore[misc]
                    120,
                    f"{name} to ask for its approval",
                    on_timeout=new.logs,
                )
                approved = agentrun(
                    "approve", name, "-n", namespace, "--id", pending_approval["id"], "--yes",
                    timeout=300, env={**cli_env, "KUBECONFIG": str(manager)},
                )  # fmt: skip
                assert approved.returncode == 0, approved
            for name in (*PARKED, *HELD):
                status = wait_phase(kube, namespace, name, "Succeeded", 120, new)
                assert status["restarts"] == 0, status  # nothing counted against maxAttempts
                if name in HELD:  # the v0.1.0 worker was fenced off; a new one ran the rest
                    fenced = status["lastAttemptEnd"]["reason"] == "lease_lost"
                    assert status["attempts"] >= 2 and fenced, status

            # --- exactly once, where it happened ---------------------------------------------------------
            performed = http_provider.stats(hp.url)["effects_performed"]
            mails = sink.store.find(None)
        runs = (*PARKED, *HELD)
        assert len(performed) == len(runs) and set(performed.values()) == {1}, performed
        assert len(mails) == len(runs), mails
        assert len({m["message_id"] for m in mails}) == len(runs)
        with psycopg.connect(empty_dsn) as conn:
            assert store.schema_compat_level(conn) == 1
    finally:
        for handle in (old, new):
            handle.close()
        for replica in (*old.replicas, *new.replicas):
            if replica.proc.poll() is None:
                os.killpg(replica.proc.pid, signal.SIGKILL)
