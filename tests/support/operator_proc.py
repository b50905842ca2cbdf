"""``agentrun operator`` as a subprocess of the test, scoped to the test's namespace and database.

The handle starts extra replicas, kills (SIGKILL) or stops (SIGTERM) them, restarts, waits for the leader
Lease and returns their logs. ``operator.env`` can be changed before ``start()`` for special settings.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from tests.support.kube import WORKER_SA

REPO = Path(__file__).resolve().parents[2]


@dataclasses.dataclass
class Replica:
    identity: str
    proc: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.proc.poll() is None

    def logs(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@dataclasses.dataclass
class OperatorHandle:
    namespace: str
    dsn: str
    env: dict[str, str]
    log_dir: Path
    replicas: list[Replica] = dataclasses.field(default_factory=list)
    _count: int = 0

    @property
    def lease_name(self) -> str:
        return self.env["AGENTRUN_LEADER_LEASE"]

    def start(self, identity: str | None = None, extra_env: dict[str, str] | None = None) -> Replica:
        self._count += 1
        identity = identity or f"operator-{self._count}"
        log = self.log_dir / f"{identity}.log"
        env = {**self.env, "AGENTRUN_LEADER_IDENTITY": identity, **(extra_env or {})}
        out = log.open("ab")
        proc = subprocess.Popen(
            [sys.executable, "-c", "import sys; from agentrun import cli; sys.exit(cli.main(['operator']))"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            start_new_session=True,
        )
        out.close()
        replica = Replica(identity, proc, log)
        self.replicas.append(replica)
        return replica

    @property
    def current(self) -> Replica:
        return self.replicas[-1]

    def leader(self, api: kubernetes.client.ApiClient) -> str:
        """holderIdentity of the leader Lease ("" when none)."""
        coord = kubernetes.client.CoordinationV1Api(api)
        try:
            lease: Any = coord.read_namespaced_lease(self.lease_name, self.namespace)
        except kubernetes.client.ApiException:
            return ""
        return lease.spec.holder_identity or ""

    def wait_leader(
        self, api: kubernetes.client.ApiClient, timeout: float = 30.0, not_: str | None = None
    ) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            holder = self.leader(api)
            alive = {r.identity for r in self.replicas if r.alive()}
            if holder and holder != not_ and holder in alive:
                return holder
            time.sleep(0.1)
        raise AssertionError(f"no leader within {timeout}s; logs:\n{self.logs()}")

    def replica(self, identity: str) -> Replica:
        return next(r for r in self.replicas if r.identity == identity)

    def kill(self, replica: Replica | None = None, sig: int = signal.SIGKILL) -> None:
        replica = replica or self.current
        if replica.alive():
            os.killpg(replica.proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                replica.proc.wait(timeout=15)

    def stop(self, replica: Replica | None = None) -> None:
        self.kill(replica, signal.SIGTERM)

    def restart(self, *, hard: bool = True, extra_env: dict[str, str] | None = None) -> Replica:
        """Stop the current replica (SIGKILL when ``hard``: the new one waits for the Lease to expire;
        SIGTERM otherwise: it releases the Lease and the new one leads at once) and start a new one."""
        if hard:
            self.kill()
        else:
            self.stop()
        return self.start(extra_env=extra_env)

    def reconfigure(self, api: kubernetes.client.ApiClient, **env: str) -> None:
        """Stop every replica, then lead again with one started with ``env`` on top of the old settings."""
        self.close()
        self.env.update(env)
        self.start()
        self.wait_leader(api, timeout=60)

    def logs(self) -> str:
        return "\n".join(f"===== {r.identity} (rc={r.proc.poll()}) =====\n{r.logs()}" for r in self.replicas)

    def close(self) -> None:
        for replica in self.replicas:
            if replica.alive():
                os.killpg(replica.proc.pid, signal.SIGTERM)
        for replica in self.replicas:
            try:
                replica.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(replica.proc.pid, signal.SIGKILL)
                replica.proc.wait(timeout=5)


def operator_env(dev_cluster: Any, namespace: str, dsn: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTRUN_")}
    env.update(dev_cluster.env)
    env.update(
        {
            "KUBECONFIG": str(dev_cluster.kubeconfig),
            "AGENTRUN_DSN": dsn,
            "AGENTRUN_WATCH_NAMESPACES": namespace,
            "AGENTRUN_LEADER_NAMESPACE": namespace,
            "AGENTRUN_LEADER_LEASE": "agentrun-operator",
            # Long enough that a loaded 2-core machine never makes the leader miss its renew deadline;
            # the HA tests shorten it for themselves.
            "AGENTRUN_LEADER_DURATION_SECONDS": "10",
            "AGENTRUN_WORKER_SERVICE_ACCOUNT": WORKER_SA,
            "AGENTRUN_POLL_SECONDS": "1",
            # The tests' webhook receivers listen on 127.0.0.1: the outbound policy refuses loopback unless
            # allowed (agent_operator.act.outbound), so the tests allow exactly that address.
            "AGENTRUN_NOTIFY_ALLOWED_NETWORKS": "127.0.0.1/32",
            "AGENTRUN_WORKER_GRACE_SECONDS": "10",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


@contextlib.contextmanager
def closing(handle: OperatorHandle, request: pytest.FixtureRequest) -> Iterator[OperatorHandle]:
    """The handle, its replicas stopped afterwards; when the test failed, their logs go to stderr (the
    conftest's ``pytest_runtest_makereport`` hook records the outcome as ``rep_call``)."""
    try:
        yield handle
    finally:
        handle.close()
        failed = getattr(request.node, "rep_call", None)
        if failed is not None and failed.failed:
            print(handle.logs()[-20000:], file=sys.stderr)


# The ``operators`` fixture: ``operators(extra_env=None)`` -> a new handle, not started yet.
Operators = Callable[..., OperatorHandle]
