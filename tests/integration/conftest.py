"""Integration fixtures of the operator, reused by other suites (observability, demo, chaos).

* ``worker_account(namespace)`` — the worker ServiceAccount ``agentrun-worker`` with its real least-privilege
  Role (Leases get/create/update in the namespace, nothing else), created in the test's namespace.
* ``operator`` — ``agentrun operator`` as a subprocess scoped to the test's namespace
  (``AGENTRUN_WATCH_NAMESPACES``, leader Lease in that namespace), against the dev cluster and the test's
  ``pg_dsn``. The handle starts extra replicas, kills (SIGKILL) or stops (SIGTERM) them, restarts, and
  returns their logs. ``operator.env`` can be changed before ``start()`` for special settings.
* helpers ``create_run``/``wait_for``/``run_status``/``events``/``pods`` for tests that drive AgentRuns.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from agentrun_dev import smtp_sink

REPO = Path(__file__).resolve().parents[2]
GROUP, VERSION, PLURAL = "agentrun.dev", "v1alpha1", "agentruns"
WORKER_SA = "agentrun-worker"


# --- worker service account -------------------------------------------------------------------------------


def create_worker_account(api: kubernetes.client.ApiClient, namespace: str, name: str = WORKER_SA) -> str:
    """ServiceAccount + Role + RoleBinding of a worker: Leases get/create/update, in this namespace only."""
    core = kubernetes.client.CoreV1Api(api)
    rbac = kubernetes.client.RbacAuthorizationV1Api(api)
    with contextlib.suppress(kubernetes.client.ApiException):
        core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
    role = {
        "metadata": {"name": name},
        "rules": [
            {
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "verbs": ["get", "create", "update"],
            }
        ],
    }
    with contextlib.suppress(kubernetes.client.ApiException):
        rbac.create_namespaced_role(namespace, role)
    binding = {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
    }
    with contextlib.suppress(kubernetes.client.ApiException):
        rbac.create_namespaced_role_binding(namespace, binding)
    return name


@pytest.fixture
def worker_account(kube: kubernetes.client.ApiClient, namespace: str) -> str:
    return create_worker_account(kube, namespace)


# --- the operator subprocess ------------------------------------------------------------------------------


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
            lease = coord.read_namespaced_lease(self.lease_name, self.namespace)
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


@pytest.fixture
def operator(
    dev_cluster: Any,
    kube: kubernetes.client.ApiClient,
    namespace: str,
    pg_dsn: str,
    worker_account: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[OperatorHandle]:
    """One operator replica, leader of its namespace, already running when the test starts."""
    handle = OperatorHandle(namespace, pg_dsn, operator_env(dev_cluster, namespace, pg_dsn), tmp_path)
    handle.start()
    try:
        handle.wait_leader(kube, timeout=60)
        yield handle
    finally:
        handle.close()
        failed = getattr(request.node, "rep_call", None)
        if failed is not None and failed.failed:
            print(handle.logs()[-20000:], file=sys.stderr)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    setattr(item, f"rep_{report.when}", report)


# --- helpers for tests that drive AgentRuns ---------------------------------------------------------------


def custom(api: kubernetes.client.ApiClient) -> kubernetes.client.CustomObjectsApi:
    return kubernetes.client.CustomObjectsApi(api)


def create_run(
    api: kubernetes.client.ApiClient, namespace: str, name: str, spec: dict[str, Any]
) -> dict[str, Any]:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "AgentRun", "metadata": {"name": name}, "spec": spec}
    result: dict[str, Any] = custom(api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, body
    )
    return result


def get_run(api: kubernetes.client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    result: dict[str, Any] = custom(api).get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    return result


def patch_spec(api: kubernetes.client.ApiClient, namespace: str, name: str, spec: dict[str, Any]) -> None:
    custom(api).patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, {"spec": spec})


def run_status(api: kubernetes.client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    return dict(get_run(api, namespace, name).get("status") or {})


def condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    for cond in status.get("conditions") or ():
        if cond.get("type") == type_:
            return dict(cond)
    return {}


def wait_for(
    predicate: Callable[[], Any],
    timeout: float,
    what: str,
    interval: float = 0.2,
    on_timeout: Callable[[], str] | None = None,
) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    detail = on_timeout() if on_timeout else ""
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})\n{detail}")


def wait_phase(
    api: kubernetes.client.ApiClient,
    namespace: str,
    name: str,
    phases: str | tuple[str, ...],
    timeout: float = 90.0,
    handle: OperatorHandle | None = None,
) -> dict[str, Any]:
    wanted = (phases,) if isinstance(phases, str) else phases

    def check() -> dict[str, Any] | None:
        status = run_status(api, namespace, name)
        return status if status.get("phase") in wanted else None

    def explain() -> str:
        text = json.dumps(run_status(api, namespace, name), indent=1, default=str)[-4000:]
        text += "\nEVENTS:\n" + "\n".join(
            f"{e.type} {e.reason}: {e.message}" for e in events(api, namespace, name)
        )
        if handle is not None:
            text += "\n" + handle.logs()[-8000:]
        return text

    result: dict[str, Any] = wait_for(check, timeout, f"{name} phase in {wanted}", on_timeout=explain)
    return result


def events(api: kubernetes.client.ApiClient, namespace: str, name: str) -> list[Any]:
    core = kubernetes.client.CoreV1Api(api)
    found = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
    return sorted(found, key=lambda e: (e.first_timestamp or e.event_time or 0, e.metadata.name))


def pods(api: kubernetes.client.ApiClient, namespace: str, run: str) -> list[Any]:
    core = kubernetes.client.CoreV1Api(api)
    found = core.list_namespaced_pod(namespace, label_selector=f"agentrun.dev/run={run}").items
    return sorted(found, key=lambda p: int(p.metadata.labels.get("agentrun.dev/attempt", "0")))


@contextlib.contextmanager
def sampling_live_pods(
    api: kubernetes.client.ApiClient, namespace: str, observe: Callable[[list[Any]], None]
) -> Iterator[None]:
    """While the block runs, ``observe`` gets the namespace's worker Pods that are alive (not Succeeded or
    Failed) every 0.1 s, on a thread of its own: a limit that a test must never see exceeded is watched the
    whole time, not at the moments the test looks. A listing that fails (the API server slow under load) is
    skipped; what ``observe`` raises is raised here, and a block in which no listing succeeded fails: a
    sampler that stopped must not pass for one that saw nothing wrong."""
    core = kubernetes.client.CoreV1Api(api)
    stop = threading.Event()
    errors: list[BaseException] = []
    samples = [0]

    def sample() -> None:
        while not stop.is_set():
            try:
                found = core.list_namespaced_pod(namespace, label_selector="agentrun.dev/run").items
            except Exception:  # the next listing counts
                stop.wait(0.1)
                continue
            try:
                observe([p for p in found if p.status.phase not in ("Succeeded", "Failed")])
            except BaseException as exc:
                errors.append(exc)
                return
            samples[0] += 1
            stop.wait(0.1)

    sampler = threading.Thread(target=sample, name="live-pod-sampler", daemon=True)
    sampler.start()
    try:
        yield
    finally:
        stop.set()
        sampler.join(5)
    if errors:
        raise errors[0]
    assert samples[0] > 0, "the live-Pod sampler never got a listing of the namespace's Pods"


def kubectl(kubeconfig: Path | str, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=check,
    )


def bind(
    kube: kubernetes.client.ApiClient, namespace: str, user: str, role: str, kind: str = "ClusterRole"
) -> None:
    """Bind ``user`` to ``role`` (a ClusterRole by default) in ``namespace``."""
    body: dict[str, Any] = {
        "metadata": {"name": f"{user}-{role}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }
    kubernetes.client.RbacAuthorizationV1Api(kube).create_namespaced_role_binding(namespace, body)


@pytest.fixture
def sink(tmp_path: Path) -> Iterator[smtp_sink.SmtpSink]:
    """A real SMTP sink of the test's own (emails are counted where they arrive)."""
    with smtp_sink.SmtpSink(tmp_path / "smtp") as server:
        yield server
