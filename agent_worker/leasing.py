"""The attempt's hold on its run: a real Kubernetes Lease (``agentrun_core.lease``), or none (tests only).

``Holder`` is the small interface the runner needs. ``NoLease`` takes the stored epoch + 1 and excludes
nobody: it exists so Postgres-only tests and local experiments run without an API server; never use it in
a cluster (``AGENTRUN_LEASE_MODE=none``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from agent_worker import settings as settings_mod


class Holder(Protocol):
    def acquire(self, wait_seconds: float, *, min_epoch: int = 0) -> int: ...
    def start(self) -> None: ...
    def may_act(self) -> bool: ...
    def check(self) -> None: ...
    def release(self) -> bool: ...


class NoLease:
    def __init__(self) -> None:
        self.epoch = 0
        self.released = False

    def acquire(self, wait_seconds: float, *, min_epoch: int = 0) -> int:
        self.epoch = max(1, min_epoch)
        return self.epoch

    def start(self) -> None:
        return None

    def may_act(self) -> bool:
        return not self.released

    def check(self) -> None:
        if self.released:
            raise RuntimeError("released")

    def release(self) -> bool:
        self.released = True
        return True


def make_holder(
    settings: settings_mod.WorkerSettings,
    *,
    on_lost: Callable[[str], None] | None = None,
    on_renewed: Callable[[], None] | None = None,
) -> Holder:
    if settings.lease_mode == "none":
        return NoLease()
    from agentrun_core import kube, lease
    from agentrun_core.api import protocol

    api = kube.load_api_client(settings.kubeconfig)
    owner = None
    if settings.lease_owner and settings.run_name:
        owner = protocol.owner_reference(settings.run_name, settings.run_id)
    config = lease.LeaseConfig(
        namespace=settings.namespace,
        name=settings.effective_lease_name,
        holder=settings.pod_name,
        duration_seconds=settings.lease_duration_seconds,
        owner=owner,
        # The run's uid as a label too: it survives `kubectl delete --cascade=orphan` (which strips owner
        # references), so the operator can tell a recreated run's Lease from an earlier run's.
        labels=(
            protocol.run_labels(settings.run_name, settings.run_id)
            if settings.run_name
            else None
        ),
    )
    return lease.LeaseKeeper(api, config, on_lost=on_lost, on_renewed=on_renewed)
