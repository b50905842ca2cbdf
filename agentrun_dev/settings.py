"""Where the dev cluster keeps things, and which versions it runs — built from the environment in one place.

Two directories, both outside the checkout so a fresh clone reuses them:

* the **cache** (``~/.cache/agentrun``, ``$AGENTRUN_CACHE_DIR``): control-plane binaries, keyed by version;
  expensive to make (minutes), safe to share between clones, never holds state.
* the **state** (``~/.local/state/agentrun/dev``, ``$AGENTRUN_DEV_HOME``): certificates, etcd and Postgres
  data, ports, pid files, logs, pod logs. ``agentrun dev down --purge`` removes it.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path

from agentrun_core import envconf

# The newest 1.37 patch (the minor of the `kubernetes` Python client we depend on) and the newest etcd 3.6.
K8S_VERSION = "v1.37.2"
STAGING_VERSION = "v0.37.2"  # k8s.io/api, k8s.io/apiserver, … are tagged v0.<minor>.<patch>
ETCD_VERSION = "v3.6.16"
# Node name of the local pod runtime (contract in docs/design.md).
NODE_NAME = "agentrun-dev-node"


@dataclasses.dataclass(frozen=True)
class StateLayout:
    """Where each thing lives under the state directory: one place for the cluster and for the pod runtime
    (its own process, given ``--state-dir``)."""

    state_dir: Path
    """Root of all mutable dev-cluster state."""

    @property
    def ports_file(self) -> Path:
        return self.state_dir / "ports.json"

    @property
    def lock_file(self) -> Path:
        return self.state_dir / ".lock"

    @property
    def pid_dir(self) -> Path:
        return self.state_dir / "pids"

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def pki_dir(self) -> Path:
        return self.state_dir / "pki"

    @property
    def etcd_dir(self) -> Path:
        return self.state_dir / "etcd"

    @property
    def postgres_dir(self) -> Path:
        return self.state_dir / "postgres"

    @property
    def pods_dir(self) -> Path:
        return self.state_dir / "pods"

    @property
    def podruntime_dir(self) -> Path:
        """The pod runtime's own files (its control channel, its process records)."""
        return self.state_dir / "podruntime"

    @property
    def smtp_dir(self) -> Path:
        return self.state_dir / "smtp"

    @property
    def identities_dir(self) -> Path:
        return self.state_dir / "identities"


@dataclasses.dataclass(frozen=True)
class Settings(StateLayout):
    cache_dir: Path
    """Root of the build cache (control-plane binaries under ``controlplane/<key>/``)."""
    kubebuilder_assets: Path | None
    """Directory with ``etcd`` and ``kube-apiserver`` (envtest convention); overrides the build for those."""
    k8s_version: str = K8S_VERSION
    staging_version: str = STAGING_VERSION
    etcd_version: str = ETCD_VERSION
    node_name: str = NODE_NAME
    ready_timeout_s: float = 120.0
    """Seconds `up` waits for each component to report healthy."""

    # Not in the layout: the pod runtime is given the kubeconfig it uses (``--kubeconfig``).
    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (group ``system:masters``)."""
        return self.state_dir / "kubeconfig"

    # --- the build cache --------------------------------------------------------------------------------
    @property
    def build_key(self) -> str:
        return f"{self.k8s_version}-etcd{self.etcd_version.removeprefix('v')}"

    @property
    def controlplane_dir(self) -> Path:
        return self.cache_dir / "controlplane" / self.build_key


def _home() -> Path:
    return Path(os.environ.get("HOME") or Path.home())


def from_env(env: Mapping[str, str] | None = None) -> Settings:
    e = os.environ if env is None else env
    home = Path(envconf.text(e, "HOME")) if envconf.text(e, "HOME") else _home()
    state = envconf.text(e, "AGENTRUN_DEV_HOME") or str(
        Path(envconf.text(e, "XDG_STATE_HOME") or home / ".local" / "state") / "agentrun" / "dev"
    )
    cache = envconf.text(e, "AGENTRUN_CACHE_DIR") or str(
        Path(envconf.text(e, "XDG_CACHE_HOME") or home / ".cache") / "agentrun"
    )
    assets = envconf.text(e, "KUBEBUILDER_ASSETS")
    return Settings(
        state_dir=Path(state).expanduser().resolve(),
        cache_dir=Path(cache).expanduser().resolve(),
        kubebuilder_assets=Path(assets).expanduser().resolve() if assets else None,
    )
