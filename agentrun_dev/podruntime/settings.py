"""Settings of the pod runtime: one dataclass, built from the command line and the environment here only."""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from agentrun_core import envconf
from agentrun_dev import settings as dev_settings
from agentrun_dev.podruntime import restarts

ENV_PREFIX = "AGENTRUN_PODRUNTIME_"


def machine_memory_bytes() -> int:
    with open("/proc/meminfo", encoding="ascii") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    return 0


def default_repo() -> Path:
    # agentrun_dev/podruntime/settings.py → the checkout root (what `pip install -e` points at).
    return Path(__file__).resolve().parents[2]


@dataclasses.dataclass(frozen=True)
class Settings(dev_settings.StateLayout):
    """``state_dir`` (the dev cluster's): pods live under ``pods_dir``, the runtime's own files under
    ``podruntime_dir``."""

    kubeconfig: Path
    """Admin kubeconfig the runtime itself uses."""
    node_name: str = "agentrun-dev-node"
    repo: Path = dataclasses.field(default_factory=default_repo)
    """Put on every container's ``PYTHONPATH``."""
    python_prefix: Path = Path(sys.prefix)
    """Virtualenv whose ``bin/`` goes first on every container's ``PATH``."""
    host_ip: str = "127.0.0.1"
    bind: bool = True
    """Bind unscheduled pods to this node (no scheduler runs). Off for a second, test-only runtime."""
    cpu: str = "2"
    """Node capacity ``cpu`` (cores)."""
    memory_bytes: int = dataclasses.field(default_factory=machine_memory_bytes)
    pods: int = 110
    tick_s: float = 0.1
    """Seconds between polls of processes, RSS, the control channel (the memory limit's reaction time)."""
    lease_duration_s: int = 40
    lease_renew_s: float = 10.0
    node_status_s: float = 30.0
    """Seconds between node status heartbeats (kubelet: 5 min with leases; ours is cheap and helps thaw)."""
    kubelet_port: int = 0
    """Port of the runtime's log endpoint (logserver), published as the node's kubeletEndpoint; 0: none."""
    token_seconds: int = 3600
    """Lifetime asked for pod service-account tokens; the kubeconfig is rewritten at 80 % of it."""
    watch_timeout_s: int = 240
    backoff: restarts.Backoff = dataclasses.field(default_factory=restarts.Backoff)
    kill_wait_s: float = 10.0
    """After SIGKILL, seconds to wait for a process to vanish before reporting it gone anyway."""

    @property
    def procs_dir(self) -> Path:
        """One JSON record per live container process, so a restarted runtime can kill what it left."""
        return self.podruntime_dir / "procs"


def build(
    *,
    kubeconfig: str,
    state_dir: str,
    node_name: str,
    repo: str | None,
    bind: bool = True,
    env: Mapping[str, str] | None = None,
) -> Settings:
    e = os.environ if env is None else env

    def num(name: str, default: float) -> float:
        return envconf.number(e, ENV_PREFIX + name, default)

    base = restarts.Backoff()
    return Settings(
        kubeconfig=Path(kubeconfig).resolve(),
        state_dir=Path(state_dir).resolve(),
        node_name=node_name,
        repo=Path(repo).resolve() if repo else default_repo(),
        bind=bind,
        backoff=restarts.Backoff(
            initial_s=num("BACKOFF_INITIAL_S", base.initial_s),
            max_s=num("BACKOFF_MAX_S", base.max_s),
            reset_after_s=num("BACKOFF_RESET_S", base.reset_after_s),
        ),
        tick_s=num("TICK_S", 0.1),
        token_seconds=int(num("TOKEN_SECONDS", 3600)),
    )
