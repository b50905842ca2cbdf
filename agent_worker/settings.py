"""The worker's settings, built from the environment in one place (docs/design.md, worker pod contract).

Numbers and flags are parsed by ``agentrun_core.envconf``; a bad value is an ``errors.ConfigError`` (exit 2).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

from agentrun_core import envconf, errors
from agentrun_core.api import protocol


@dataclasses.dataclass(frozen=True)
class WorkerSettings:
    run_id: str  # AGENTRUN_RUN_ID: AgentRun metadata.uid = LangGraph thread_id
    dsn: str  # AGENTRUN_DSN
    pod_name: str  # AGENTRUN_POD_NAME: the Lease holderIdentity
    attempt: int = 1  # AGENTRUN_ATTEMPT
    run_name: str = ""  # AGENTRUN_RUN_NAME
    namespace: str = "default"  # AGENTRUN_NAMESPACE
    lease_name: str = ""  # AGENTRUN_LEASE_NAME, default agentrun-<run name>
    lease_duration_seconds: int = 15  # AGENTRUN_LEASE_DURATION_SECONDS
    # AGENTRUN_LEASE_MODE: "kube" (default; a real Lease) or "none" (tests/dev without an API server: the
    # epoch is the stored one + 1 and nothing excludes a second worker — never in a cluster).
    lease_mode: str = "kube"
    lease_wait_seconds: float = 60.0  # AGENTRUN_LEASE_WAIT_SECONDS: how long to wait for a held Lease
    # AGENTRUN_DRAIN_SECONDS: after SIGTERM, exit 11 at the next step boundary, or after this long anyway
    # (the step re-runs on the next attempt; the ledger keeps its effects single). Inside the 30 s grace.
    drain_seconds: float = 20.0
    kubeconfig: str | None = None  # KUBECONFIG (else in-cluster)
    pool_max_size: int = 4  # AGENTRUN_PG_POOL_SIZE: checkpointer + ledger + heartbeat threads
    # AGENTRUN_LEASE_OWNER ("true" default): give the Lease an ownerReference to the AgentRun (uid = run id)
    # so it is garbage-collected with the run. Tests without an AgentRun object set "false".
    lease_owner: bool = True
    # AGENTRUN_BUDGET: spec.budget as JSON (agentrun_core.budget); empty: no budget, model calls not counted
    budget: str = ""

    @property
    def effective_lease_name(self) -> str:
        return self.lease_name or protocol.lease_name(self.run_name or self.run_id)


def from_env(env: Mapping[str, str] | None = None) -> WorkerSettings:
    env = os.environ if env is None else env
    missing = [n for n in (protocol.ENV_RUN_ID, protocol.ENV_DSN) if not env.get(n)]
    if missing:
        raise errors.ConfigError(f"missing environment: {', '.join(missing)}")
    mode = env.get("AGENTRUN_LEASE_MODE", "kube") or "kube"
    if mode not in ("kube", "none"):
        raise errors.ConfigError(f"AGENTRUN_LEASE_MODE must be kube or none, not {mode!r}")
    bad = errors.ConfigError
    settings = WorkerSettings(
        run_id=env[protocol.ENV_RUN_ID],
        dsn=env[protocol.ENV_DSN],
        pod_name=env.get(protocol.ENV_POD_NAME) or f"worker-{os.getpid()}",
        attempt=envconf.integer(env, protocol.ENV_ATTEMPT, 1, error=bad),
        run_name=env.get(protocol.ENV_RUN_NAME, ""),
        namespace=env.get(protocol.ENV_NAMESPACE) or "default",
        lease_name=env.get(protocol.ENV_LEASE_NAME, ""),
        lease_duration_seconds=envconf.integer(env, protocol.ENV_LEASE_DURATION_SECONDS, 15, error=bad),
        lease_mode=mode,
        lease_wait_seconds=envconf.number(env, "AGENTRUN_LEASE_WAIT_SECONDS", 60.0, error=bad),
        drain_seconds=envconf.number(env, "AGENTRUN_DRAIN_SECONDS", 20.0, error=bad),
        kubeconfig=env.get("KUBECONFIG") or None,
        pool_max_size=envconf.integer(env, "AGENTRUN_PG_POOL_SIZE", 4, error=bad),
        lease_owner=envconf.flag(env, "AGENTRUN_LEASE_OWNER", True, error=bad),
        budget=env.get(protocol.ENV_BUDGET, ""),
    )
    if settings.lease_duration_seconds < 3:
        raise errors.ConfigError("AGENTRUN_LEASE_DURATION_SECONDS must be >= 3")
    return settings
