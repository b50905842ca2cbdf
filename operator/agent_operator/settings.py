"""Operator settings: one dataclass tree, built from the environment in one place (``from_env``).

Every field says its unit and default. Nothing else in the operator reads ``os.environ``.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
import socket
import uuid
from collections.abc import Mapping

from agentrun_core import envconf


@dataclasses.dataclass(frozen=True)
class LeaderSettings:
    """Leader election through one ``coordination.k8s.io/v1`` Lease (not kopf peering)."""

    enabled: bool = True  # AGENTRUN_LEADER_ELECTION (true/false)
    namespace: str = "agentrun-system"  # AGENTRUN_LEADER_NAMESPACE
    name: str = "agentrun-operator"  # AGENTRUN_LEADER_LEASE
    duration_seconds: float = 15.0  # AGENTRUN_LEADER_DURATION_SECONDS: standby takes over after this
    identity: str = ""  # AGENTRUN_LEADER_IDENTITY; default: hostname + short random suffix


@dataclasses.dataclass(frozen=True)
class WorkerDefaults:
    """Worker Pod defaults, used where ``spec.worker`` says nothing."""

    image: str = "agentrun:dev"  # AGENTRUN_WORKER_IMAGE
    service_account: str = "agentrun-worker"  # AGENTRUN_WORKER_SERVICE_ACCOUNT
    command: tuple[str, ...] = ("agentrun", "worker")  # AGENTRUN_WORKER_COMMAND (space separated)
    # DSN handed to workers. Plain value (dev) unless dsn_secret is set (real clusters).
    dsn: str = ""  # AGENTRUN_WORKER_DSN; default: the operator's own AGENTRUN_DSN
    dsn_secret: str = ""  # AGENTRUN_WORKER_DSN_SECRET: "secret-name/key" → env valueFrom.secretKeyRef
    termination_grace_seconds: int = 30  # AGENTRUN_WORKER_GRACE_SECONDS: SIGTERM drain time of a worker
    image_pull_policy: str = "IfNotPresent"  # AGENTRUN_WORKER_IMAGE_PULL_POLICY
    # AGENTRUN_WORKER_CA_SECRET: "secret-name/key" of a Secret in each tenant namespace holding the CA of an
    # external Postgres; every worker Pod mounts it read-only and gets PGSSLROOTCERT pointing at it, so the
    # DSN can use sslmode=verify-full. The platform's setting, not the tenant's (spec.worker cannot name it).
    ca_secret: str = ""


@dataclasses.dataclass(frozen=True)
class ReconcileSettings:
    poll_seconds: float = 2.0  # AGENTRUN_POLL_SECONDS: max time between two looks at an active run
    idle_poll_seconds: float = 30.0  # AGENTRUN_IDLE_POLL_SECONDS: same, for finished/parked runs
    # A waiting run (parked, suspended, finished) that stays quiet is looked at after the idle poll, then
    # twice that, and so on up to this (seconds): a watch event or a deadline of its own still wakes it at
    # once, so this bounds only how late a missed wake-up is noticed. Each look is a round and a Postgres
    # transaction: 10,000 waiting runs cost the operator 2.0 % of a core at 600 s (bench P4; 3.5 % at 300 s).
    idle_poll_max_seconds: float = 600.0  # AGENTRUN_IDLE_POLL_MAX_SECONDS
    # Wait this long after creating a run's Pod before treating "no Pod in the cache" as "Pod deleted":
    # the watch may lag the create by a moment.
    pod_cache_grace_seconds: float = 5.0  # AGENTRUN_POD_CACHE_GRACE_SECONDS
    # An attempt that cannot start (Pod refused by the API server, unschedulable, container config error,
    # worker never takes its Lease) fails the run after this long, with that reason.
    start_timeout_seconds: float = 300.0  # AGENTRUN_START_TIMEOUT_SECONDS
    # Retention in Postgres of a run whose AgentRun was deleted (not by its TTL: those go at once).
    retention_seconds: float = 7 * 86400.0  # AGENTRUN_RETENTION_SECONDS
    purge_interval_seconds: float = 60.0  # AGENTRUN_PURGE_INTERVAL_SECONDS: how often the leader purges
    purge_batch: int = 500  # AGENTRUN_PURGE_BATCH: runs per purge statement
    # Worker Pods alive at once per namespace (a count; 0 = no limit). Runs beyond it wait, first come
    # first served, and start as slots free (agent_operator.observe.throttle).
    max_workers_per_namespace: int = 50  # AGENTRUN_MAX_WORKERS_PER_NAMESPACE
    # How long the last attempt's Pod of a finished run, or of a run parked on an approval, is kept for its
    # log (seconds, from when the operator saw it terminated); earlier attempts' Pods go once a later one
    # started (cleanup.py).
    finished_pod_retention_seconds: float = 600.0  # AGENTRUN_FINISHED_POD_RETENTION_SECONDS
    # A worker role's Postgres session that keeps any other session waiting on a lock this long is ended
    # (agent_operator.act.lockwatch; 0 = never): a tenant may LOCK a shared table it can UPDATE.
    tenant_lock_wait_seconds: float = 10.0  # AGENTRUN_TENANT_LOCK_WAIT_SECONDS


@dataclasses.dataclass(frozen=True)
class NotifySettings:
    """Run notifications (``spec.approval.notify``): one call's timeout, the retry budget and its backoff, and
    where notifications may go."""

    timeout_seconds: float = 5.0  # AGENTRUN_NOTIFY_TIMEOUT_SECONDS: one delivery call
    max_attempts: int = 8  # AGENTRUN_NOTIFY_MAX_ATTEMPTS: calls of one notification before it fails
    backoff_seconds: float = 1.0  # AGENTRUN_NOTIFY_BACKOFF_SECONDS: delay before the first retry (doubles)
    max_backoff_seconds: float = 60.0  # AGENTRUN_NOTIFY_MAX_BACKOFF_SECONDS: the delay's cap
    # Where notifications may go (agent_operator.act.outbound): URLs are written by tenants and POSTed from
    # inside
    # the cluster. Loopback, link-local, private and other non-public addresses are refused unless in
    # allowed_networks; denied_networks refuses more (a Service or Pod CIDR in public address space) and wins.
    # AGENTRUN_NOTIFY_ALLOWED_NETWORKS: comma list of CIDRs (e.g. a receiver inside the cluster); default none
    allowed_networks: tuple[str, ...] = ()
    # AGENTRUN_NOTIFY_DENIED_NETWORKS: comma list of CIDRs; in a cluster, KUBERNETES_SERVICE_HOST is added
    denied_networks: tuple[str, ...] = ()
    # AGENTRUN_NOTIFY_ALLOWED_HOSTS: comma list of host patterns (``hooks.slack.com``, ``*.example.com``)
    allowed_hosts: tuple[str, ...] = ("*",)


@dataclasses.dataclass(frozen=True)
class ReadApiSettings:
    """The read API (agent_operator.serve.readapi): a run's trace, effects and approvals served over HTTPS to
    the
    API server's aggregation layer (APIService ``v1alpha1.read.agentrun.dev``)."""

    port: int = 0  # AGENTRUN_READ_API_PORT: 0 = not served
    address: str = "0.0.0.0"  # AGENTRUN_READ_API_ADDRESS: the address to listen on
    cert: str = ""  # AGENTRUN_READ_API_CERT: serving certificate file (PEM), required with a port
    key: str = ""  # AGENTRUN_READ_API_KEY: its private key file (PEM)


@dataclasses.dataclass(frozen=True)
class Settings:
    dsn: str  # AGENTRUN_DSN: Postgres DSN (required)
    namespaces: tuple[str, ...] = ()  # AGENTRUN_WATCH_NAMESPACES: comma list; empty = cluster-wide
    metrics_port: int = 0  # AGENTRUN_METRICS_PORT: 0 = no /metrics endpoint
    kubeconfig: str = ""  # KUBECONFIG (else in-cluster service account)
    # AGENTRUN_MIGRATE (true/false): the leader applies the schema migrations at start-up, before it admits
    # any run — the same files and lock as `agentrun migrate` (idempotent; a concurrent migrator waits).
    # false: only the migrate Job (deploy/migrate) or a DBA changes the schema, and the operator refuses to
    # start on a schema not migrated for it (agent_operator.serve.main.schema_problem; docs/upgrading.md).
    migrate: bool = True
    leader: LeaderSettings = dataclasses.field(default_factory=LeaderSettings)
    worker: WorkerDefaults = dataclasses.field(default_factory=WorkerDefaults)
    reconcile: ReconcileSettings = dataclasses.field(default_factory=ReconcileSettings)
    notify: NotifySettings = dataclasses.field(default_factory=NotifySettings)
    read_api: ReadApiSettings = dataclasses.field(default_factory=ReadApiSettings)
    # AGENTRUN_SCHEDULE_CLOCK_OFFSET_SECONDS: added to the wall clock the schedules tick by (may be negative).
    # For tests only: it lets a test stand just before a tick instead of waiting for one.
    schedule_clock_offset_seconds: float = 0.0

    @property
    def worker_dsn(self) -> str:
        return self.worker.dsn or self.dsn


class SettingsError(ValueError):
    """The environment does not describe a runnable operator."""


def _number(env: Mapping[str, str], name: str, default: float) -> float:
    """Every number the operator reads is a non-negative count or duration (agentrun_core.envconf)."""
    return envconf.number(env, name, default, minimum=0, error=SettingsError)


def _networks(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    """A comma list of CIDRs (an address alone is a /32 or /128), normalised; a bad one stops the operator."""
    found: list[str] = []
    for raw in env.get(name, "").split(","):
        if not raw.strip():
            continue
        try:
            found.append(str(ipaddress.ip_network(raw.strip(), strict=False)))
        except ValueError as exc:
            raise SettingsError(f"{name}: {raw.strip()!r} is not an IP network (CIDR): {exc}") from exc
    return tuple(found)


def _api_server(env: Mapping[str, str]) -> tuple[str, ...]:
    """In a cluster, the API server's Service address (KUBERNETES_SERVICE_HOST) is never a notification
    target, even where the Service CIDR is public address space (GKE's 34.118.224.0/20)."""
    host = env.get("KUBERNETES_SERVICE_HOST", "").strip()
    try:
        return (str(ipaddress.ip_network(host)),) if host else ()
    except ValueError:
        return ()


def default_identity() -> str:
    return f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}"


def from_env(env: Mapping[str, str] | None = None) -> Settings:
    env = os.environ if env is None else env
    dsn = env.get("AGENTRUN_DSN", "").strip()
    if not dsn:
        raise SettingsError("AGENTRUN_DSN is not set (the Postgres DSN of the run store)")
    namespaces = tuple(n.strip() for n in env.get("AGENTRUN_WATCH_NAMESPACES", "").split(",") if n.strip())
    leader_ns = env.get("AGENTRUN_LEADER_NAMESPACE", "").strip() or (
        namespaces[0] if len(namespaces) == 1 else LeaderSettings.namespace
    )
    leader = LeaderSettings(
        enabled=envconf.flag(env, "AGENTRUN_LEADER_ELECTION", True, error=SettingsError),
        namespace=leader_ns,
        name=env.get("AGENTRUN_LEADER_LEASE", "").strip() or LeaderSettings.name,
        duration_seconds=_number(env, "AGENTRUN_LEADER_DURATION_SECONDS", LeaderSettings.duration_seconds),
        identity=env.get("AGENTRUN_LEADER_IDENTITY", "").strip() or default_identity(),
    )
    if leader.duration_seconds < 1:
        raise SettingsError("AGENTRUN_LEADER_DURATION_SECONDS must be at least 1")
    command = tuple(env.get("AGENTRUN_WORKER_COMMAND", "").split()) or WorkerDefaults.command
    worker = WorkerDefaults(
        image=env.get("AGENTRUN_WORKER_IMAGE", "").strip() or WorkerDefaults.image,
        service_account=env.get("AGENTRUN_WORKER_SERVICE_ACCOUNT", "").strip()
        or WorkerDefaults.service_account,
        command=command,
        dsn=env.get("AGENTRUN_WORKER_DSN", "").strip(),
        dsn_secret=env.get("AGENTRUN_WORKER_DSN_SECRET", "").strip(),
        termination_grace_seconds=int(
            _number(env, "AGENTRUN_WORKER_GRACE_SECONDS", WorkerDefaults.termination_grace_seconds)
        ),
        image_pull_policy=env.get("AGENTRUN_WORKER_IMAGE_PULL_POLICY", "").strip()
        or WorkerDefaults.image_pull_policy,
        ca_secret=env.get("AGENTRUN_WORKER_CA_SECRET", "").strip(),
    )
    if worker.dsn_secret and "/" not in worker.dsn_secret:
        raise SettingsError("AGENTRUN_WORKER_DSN_SECRET must be secret-name/key")
    if worker.ca_secret and not re.fullmatch(
        r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[-._a-zA-Z0-9]+", worker.ca_secret
    ):
        raise SettingsError(
            f"AGENTRUN_WORKER_CA_SECRET must be secret-name/key (e.g. agentrun-postgres-ca/ca.crt), "
            f"got {worker.ca_secret!r}"
        )
    reconcile = ReconcileSettings(
        poll_seconds=_number(env, "AGENTRUN_POLL_SECONDS", ReconcileSettings.poll_seconds),
        idle_poll_seconds=_number(env, "AGENTRUN_IDLE_POLL_SECONDS", ReconcileSettings.idle_poll_seconds),
        idle_poll_max_seconds=_number(
            env, "AGENTRUN_IDLE_POLL_MAX_SECONDS", ReconcileSettings.idle_poll_max_seconds
        ),
        pod_cache_grace_seconds=_number(
            env, "AGENTRUN_POD_CACHE_GRACE_SECONDS", ReconcileSettings.pod_cache_grace_seconds
        ),
        start_timeout_seconds=_number(
            env, "AGENTRUN_START_TIMEOUT_SECONDS", ReconcileSettings.start_timeout_seconds
        ),
        retention_seconds=_number(env, "AGENTRUN_RETENTION_SECONDS", ReconcileSettings.retention_seconds),
        purge_interval_seconds=_number(
            env, "AGENTRUN_PURGE_INTERVAL_SECONDS", ReconcileSettings.purge_interval_seconds
        ),
        purge_batch=max(1, int(_number(env, "AGENTRUN_PURGE_BATCH", ReconcileSettings.purge_batch))),
        max_workers_per_namespace=int(
            _number(env, "AGENTRUN_MAX_WORKERS_PER_NAMESPACE", ReconcileSettings.max_workers_per_namespace)
        ),
        finished_pod_retention_seconds=_number(
            env, "AGENTRUN_FINISHED_POD_RETENTION_SECONDS", ReconcileSettings.finished_pod_retention_seconds
        ),
        tenant_lock_wait_seconds=_number(
            env, "AGENTRUN_TENANT_LOCK_WAIT_SECONDS", ReconcileSettings.tenant_lock_wait_seconds
        ),
    )
    notify = NotifySettings(
        timeout_seconds=_number(env, "AGENTRUN_NOTIFY_TIMEOUT_SECONDS", NotifySettings.timeout_seconds),
        max_attempts=envconf.integer(
            env, "AGENTRUN_NOTIFY_MAX_ATTEMPTS", NotifySettings.max_attempts, minimum=1, error=SettingsError
        ),
        backoff_seconds=_number(env, "AGENTRUN_NOTIFY_BACKOFF_SECONDS", NotifySettings.backoff_seconds),
        max_backoff_seconds=_number(
            env, "AGENTRUN_NOTIFY_MAX_BACKOFF_SECONDS", NotifySettings.max_backoff_seconds
        ),
        allowed_networks=_networks(env, "AGENTRUN_NOTIFY_ALLOWED_NETWORKS"),
        denied_networks=_networks(env, "AGENTRUN_NOTIFY_DENIED_NETWORKS") + _api_server(env),
        allowed_hosts=tuple(
            h.strip() for h in env.get("AGENTRUN_NOTIFY_ALLOWED_HOSTS", "").split(",") if h.strip()
        )
        or NotifySettings.allowed_hosts,
    )
    metrics_port = int(_number(env, "AGENTRUN_METRICS_PORT", 0))
    read_api = ReadApiSettings(
        port=envconf.integer(env, "AGENTRUN_READ_API_PORT", 0, minimum=0, error=SettingsError),
        address=env.get("AGENTRUN_READ_API_ADDRESS", "").strip() or ReadApiSettings.address,
        cert=env.get("AGENTRUN_READ_API_CERT", "").strip(),
        key=env.get("AGENTRUN_READ_API_KEY", "").strip(),
    )
    if read_api.port and not (read_api.cert and read_api.key):
        raise SettingsError(
            "AGENTRUN_READ_API_PORT needs AGENTRUN_READ_API_CERT and AGENTRUN_READ_API_KEY (the serving "
            "certificate the API server's aggregation layer verifies)"
        )
    return Settings(
        dsn=dsn,
        namespaces=namespaces,
        metrics_port=metrics_port,
        kubeconfig=env.get("KUBECONFIG", ""),
        migrate=envconf.flag(env, "AGENTRUN_MIGRATE", True, error=SettingsError),
        leader=leader,
        worker=worker,
        reconcile=reconcile,
        notify=notify,
        read_api=read_api,
        schedule_clock_offset_seconds=envconf.number(
            env, "AGENTRUN_SCHEDULE_CLOCK_OFFSET_SECONDS", 0.0, error=SettingsError
        ),
    )
