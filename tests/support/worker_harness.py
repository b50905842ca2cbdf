"""Running real worker subprocesses against real providers, for the chaos and worker integration tests."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg

from agentrun_core import store
from agentrun_dev import http_provider, smtp_sink
from tests.support import pg
from tests.support.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
GRAPH = "tests.graphs.effect_graph:builder"
# Worker processes alive at once in one chaos test, and zygotes in its pool (tests/chaos/conftest.py).
CONCURRENCY = int(os.environ.get("AGENTRUN_CHAOS_CONCURRENCY", "4"))


@dataclasses.dataclass
class Providers:
    http_url: str
    smtp_host: str
    smtp_port: int
    smtp_api: str


def http_only(url: str) -> Providers:
    """The HTTP provider at ``url``; the SMTP settings point nowhere (for graphs that send no email, or runs
    that stop before their email node)."""
    return Providers(url, "127.0.0.1", 1, "http://127.0.0.1:1")


@contextlib.contextmanager
def real_providers(base: Path) -> Iterator[Providers]:
    """A real HTTP provider and SMTP sink (agentrun_dev), their state under ``base``, for workers' tools."""
    with http_provider.HttpProvider(base / "http") as hp, smtp_sink.SmtpSink(base / "smtp") as sink:
        yield Providers(hp.url, sink.host, sink.port, sink.api_url)


@dataclasses.dataclass
class Worker:
    dsn: str
    providers: Providers | None = None
    kubeconfig: Path | None = None  # None: AGENTRUN_LEASE_MODE=none
    namespace: str = "default"
    lease_duration: int = 3
    extra_env: dict[str, str] = dataclasses.field(default_factory=dict)
    zygotes: ZygotePool | None = None  # fork pre-imported workers instead of starting fresh interpreters

    def env(self, run_id: str, *, pod: str, attempt: int, faults: str = "", **extra: str) -> dict[str, str]:
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "AGENTRUN_RUN_ID": run_id,
            "AGENTRUN_RUN_NAME": run_id,
            "AGENTRUN_NAMESPACE": self.namespace,
            "AGENTRUN_POD_NAME": pod,
            "AGENTRUN_ATTEMPT": str(attempt),
            "AGENTRUN_DSN": self.dsn,
            "AGENTRUN_LEASE_DURATION_SECONDS": str(self.lease_duration),
            "AGENTRUN_LEASE_WAIT_SECONDS": "30",
            "AGENTRUN_LEASE_OWNER": "false",  # no AgentRun object in these tests: GC would delete the Lease
            "AGENTRUN_FAULT_POINTS": faults,
        }
        if self.kubeconfig is None:
            env["AGENTRUN_LEASE_MODE"] = "none"
        else:
            env["AGENTRUN_LEASE_MODE"] = "kube"
            env["KUBECONFIG"] = str(self.kubeconfig)
        if self.providers is not None:
            env.update(
                AGENTRUN_TEST_HTTP_URL=self.providers.http_url,
                AGENTRUN_SMTP_HOST=self.providers.smtp_host,
                AGENTRUN_SMTP_PORT=str(self.providers.smtp_port),
                AGENTRUN_SMTP_API=self.providers.smtp_api,
            )
        env.update(self.extra_env)
        env.update(extra)
        return env

    def start(
        self, run_id: str, *, pod: str, attempt: int = 1, faults: str = "", **extra: str
    ) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "agent_worker.main"],
            env=self.env(run_id, pod=pod, attempt=attempt, faults=faults, **extra),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def run(
        self, run_id: str, *, pod: str, attempt: int = 1, faults: str = "", timeout: float = 120, **extra: str
    ) -> subprocess.CompletedProcess[str]:
        if self.zygotes is not None:
            return self.zygotes.run(
                self.env(run_id, pod=pod, attempt=attempt, faults=faults, **extra), timeout
            )
        proc = self.start(run_id, pod=pod, attempt=attempt, faults=faults, **extra)
        out, err = proc.communicate(timeout=timeout)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


class ZygotePool:
    """``size`` zygote processes (tests/chaos/zygote.py); ``run`` borrows one per worker process."""

    def __init__(self, size: int) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self._all = [
            subprocess.Popen(
                [sys.executable, "-m", "tests.chaos.zygote"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=env,
                cwd=str(REPO),
            )
            for _ in range(size)
        ]
        self._free: queue.Queue[subprocess.Popen[str]] = queue.Queue()
        for z in self._all:
            self._free.put(z)
        self._dir = tempfile.mkdtemp(prefix="agentrun-zygote-")
        self._n = 0

    def run(self, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
        z = self._free.get(timeout=timeout)
        try:
            self._n += 1
            err = os.path.join(self._dir, f"{os.getpid()}-{id(z)}-{self._n}.err")
            assert z.stdin is not None and z.stdout is not None
            z.stdin.write(json.dumps({"env": env, "stderr": err}) + "\n")
            z.stdin.flush()
            line = z.stdout.readline()
            if not line:
                raise RuntimeError("zygote died")
            code = int(json.loads(line)["returncode"])
            with open(err) as f:
                stderr = f.read()
            os.unlink(err)
        finally:
            self._free.put(z)
        return subprocess.CompletedProcess(["zygote"], code, "", stderr)

    def close(self) -> None:
        for z in self._all:
            if z.stdin is not None:
                z.stdin.close()
        for z in self._all:
            z.wait(timeout=30)


def admit(dsn: str, run_id: str, graph: str = GRAPH, durability: str = "sync", **input_: Any) -> store.Run:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return pg.admit(
            conn,
            run_id=run_id,
            graph=graph,
            input=input_,
            spec_hash="test",
            durability=durability,
            approval_policy={"timeoutSeconds": 3600},
        )


def fenced_itself(proc: subprocess.CompletedProcess[str]) -> bool:
    """True when the worker exited 12 because it lost or could not get its Lease: on a loaded machine the API
    server can time renewals out for a whole (3 s) lease, and the worker then stops without writing, exactly
    as designed. The chaos harness starts another attempt then, as the operator would; anything else that
    exits 12 is not excused (the harness runs one worker at a time, so no one else deposes it)."""
    if proc.returncode != 12:
        return False
    return "lease lost" in proc.stderr or "lease held by another worker" in proc.stderr


@dataclasses.dataclass
class Drive:
    """What driving one run to its end took: processes killed at the fault point, processes in all, and
    approvals given on the way."""

    killed: int = 0
    processes: int = 0
    parked: int = 0


def drive(
    worker: Worker,
    run_id: str,
    fault: str,
    *,
    processes: int,
    pod: Callable[[int], str],
    env: Callable[[bool], dict[str, str]],
    fenced_ok: bool = True,
    approve: bool = False,
    what: str = "",
) -> Drive:
    """Worker processes for ``run_id``, one after another (attempt 1, 2, ... in pod ``pod(attempt)``, with
    ``env(killed yet)``), until one finishes the run. Until one is killed they carry ``fault``
    ("point@hit"): the kill must be SIGKILL at that point. One that fenced itself (``fenced_itself``; when
    ``fenced_ok``) is followed by another, as the operator would; with ``approve`` one that parked (exit 10)
    has its pending approval approved first. Any other exit, or no finish in ``processes``, fails the test
    (``what`` names the run in the message)."""
    point, what, done = fault.split("@")[0], what or run_id, Drive()
    for attempt in range(1, processes + 1):
        extra: dict[str, Any] = env(bool(done.killed))  # environment variables only (str values)
        proc = worker.run(
            run_id, pod=pod(attempt), attempt=attempt, faults="" if done.killed else fault, **extra
        )
        done.processes += 1
        if proc.returncode == -9:
            assert f"fault point {point}" in proc.stderr, proc.stderr[-2000:]
            done.killed += 1
            continue
        if fenced_ok and fenced_itself(proc):
            continue  # its Lease lapsed (renewals timed out under load): the operator would retry it
        if approve and proc.returncode == 10:
            done.parked += 1
            approve_pending(worker.dsn, run_id)
            continue
        assert proc.returncode == 0, f"{what}: exit {proc.returncode}\n{proc.stderr[-3000:]}"
        return done
    raise AssertionError(f"{what}: did not finish in {processes} processes")


def approve_pending(dsn: str, run_id: str) -> None:
    """Approve the run's one pending approval, as the operator records a human's decision."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        (pending,) = [a for a in store.list_approvals(conn, run_id) if a.status == "pending"]
        assert store.decide_approval(
            conn, approval_id=pending.approval_id, run_id=run_id, decision="approved", decided_by="t"
        )


def finished_runs(
    conn: psycopg.Connection[Any], reps: list[dict[str, Any]]
) -> Iterator[tuple[dict[str, Any], str]]:
    """Each rep with its run id, once checked that its run was killed once (at the planned point) and then
    succeeded anyway."""
    for rep in reps:
        run_id = str(rep["run_id"])
        assert rep["killed"] == 1, rep
        run = store.get_run(conn, run_id)
        assert run is not None and run.status == "succeeded", (rep, run)
        yield rep, run_id


def delivered(providers: Providers) -> tuple[dict[str, int], dict[str, int]]:
    """Effects performed at the HTTP provider (by idempotency key) and mails stored by the sink (by
    Message-ID): counted where they arrive."""
    http_counts: dict[str, int] = http_provider.stats(providers.http_url)["effects_performed"]
    _, smtp_stats, _ = http_provider.request(providers.smtp_api + "/stats")
    return http_counts, smtp_stats["by_message_id"]


def kill_mid_call(worker: Worker, run_id: str, provider_url: str) -> None:
    """Attempt 1 of ``run_id`` in pod p1, SIGKILLed once its call reached the provider (which commits late:
    the call is still in flight when the worker dies)."""
    first = worker.start(run_id, pod="p1", attempt=1)
    reached = lambda: http_provider.stats(provider_url)["late_accepted"] == 1  # noqa: E731
    wait_for(reached, 60, "the call to reach the provider", interval=0.05)
    first.send_signal(signal.SIGKILL)
    first.communicate(timeout=30)


@dataclasses.dataclass
class Blocked:
    """A worker process held inside its graph's first node: ``block.unlink()`` lets the node go on."""

    proc: subprocess.Popen[str]
    block: Path
    log: Path  # the nodes' log (AGENTRUN_TEST_NODE_LOG): one line per node entered


def start_blocked(worker: Worker, run_id: str, tmp: Path, *, pod: str, timeout: float = 60) -> Blocked:
    """A worker of ``run_id`` in ``pod`` (effect_graph: ``prepare`` waits while the block file exists),
    returned once its node log says it is inside ``prepare``; killed if it does not get there in time."""
    block, log = tmp / "block", tmp / "log"
    block.touch()
    proc = worker.start(run_id, pod=pod, AGENTRUN_TEST_BLOCK_FILE=str(block), AGENTRUN_TEST_NODE_LOG=str(log))
    try:
        inside = lambda: log.exists() and "prepare" in log.read_text()  # noqa: E731
        wait_for(inside, timeout, f"{run_id}'s worker in {pod} inside prepare", interval=0.05)
    except BaseException:
        proc.kill()
        proc.communicate()
        raise
    return Blocked(proc, block, log)


def performed_once(
    effect: store.Effect, delivered: tuple[dict[str, int], dict[str, int]], why: object
) -> None:
    """The effect settled (sent or confirmed) and reached its provider exactly once: a charge at the HTTP
    provider (by idempotency key), an email at the SMTP sink (by Message-ID)."""
    http_counts, mail_counts = delivered
    assert effect.status in ("sent", "confirmed"), (why, effect)
    if effect.tool == "charge":
        assert http_counts.get(effect.idempotency_key) == 1, (why, effect)
    else:
        assert mail_counts.get(f"{effect.idempotency_key}@test.invalid") == 1, (why, effect)
