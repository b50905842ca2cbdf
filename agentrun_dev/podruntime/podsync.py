"""One pod worker's side of the API server: the pod object it holds, and all it writes back there.

Rule: the worker holds the newest pod object it has seen (a watch event, or the response to its own status
patch, whichever is newer) and writes three things: the pod's status, patched only when it differs from
what the API holds (terminal is forever); events, best effort (never worth failing a pod over); and the
kubeconfig carrying the service account's token, refreshed before it expires. ``PodSync`` is the part of
``podworker.PodWorker`` that does this; the attributes it declares are set by ``PodWorker.__init__``.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from agentrun_core.api import status as api_status
from agentrun_dev.podruntime import (
    control,
    envresolve,
    kubeapi,
    model,
    podenv,
    processes,
    proctable,
    status,
)
from agentrun_dev.podruntime import settings as settings_mod

log = logging.getLogger(__name__)
Obj = dict[str, Any]


@dataclasses.dataclass
class Context:
    """What all pod workers share with the runtime."""

    kube: kubeapi.Kube
    s: settings_mod.Settings
    control: Callable[[], control.State]
    table: Callable[[], Mapping[int, proctable.Proc]]
    allocatable: dict[str, str]


def _older(a: Obj, b: Obj) -> bool:
    ra, rb = (str((x.get("metadata") or {}).get("resourceVersion", "")) for x in (a, b))
    # resourceVersion is opaque by contract, but etcd revisions are integers: compare only when both are.
    return ra.isdigit() and rb.isdigit() and int(ra) < int(rb)


class PodSync:
    """The API-facing half of a pod worker (module docstring); state set by ``PodWorker.__init__``."""

    ctx: Context
    s: settings_mod.Settings
    uid: str
    ns: str
    name: str
    key: str
    policy: str
    _pod: Obj
    _lock: threading.Lock
    gone: bool
    kubeconfig_path: Path
    inits: list[model.Container]
    mains: list[model.Container]
    procs: dict[str, processes.Process]
    start_time: float
    transitions: status.Transitions
    phase_override: str | None
    token_refresh_at: float | None
    last_written: tuple[Any, ...] | None
    last_write_at: float
    write_retry_at: float

    # --- the pod object -------------------------------------------------------------------------------------
    def update(self, pod: Obj) -> None:
        with self._lock:
            if _older(pod, self._pod):
                return  # a watch event older than the patch response we already hold
            self._pod = pod

    @property
    def pod(self) -> Obj:
        with self._lock:
            return self._pod

    # --- token ----------------------------------------------------------------------------------------------
    def _ensure_kubeconfig(self, now: float) -> None:
        if self.token_refresh_at is not None:
            return
        self._write_kubeconfig(now)

    def _refresh_token(self, now: float) -> None:
        if self.token_refresh_at is not None and now >= self.token_refresh_at and self.procs:
            try:
                self._write_kubeconfig(now)
            except Exception as e:
                log.warning("pod %s: token refresh failed: %s", self.key, e)
                self.token_refresh_at = now + 10

    def _write_kubeconfig(self, now: float) -> None:
        spec = self.pod.get("spec") or {}
        sa = spec.get("serviceAccountName") or "default"
        automount = spec.get("automountServiceAccountToken")
        token: str | None = None
        if automount is None:
            sa_obj = self.ctx.kube.get_service_account(self.ns, sa)
            if sa_obj is None:
                raise envresolve.ConfigError(f'serviceaccount "{sa}" not found')
            automount = sa_obj.get("automountServiceAccountToken", True) is not False
        if automount:
            tr = self.ctx.kube.request_token(self.ns, sa, self.name, self.uid, self.s.token_seconds)
            token = tr["status"]["token"]
            expires = model.parse_time(tr["status"].get("expirationTimestamp")) or now + self.s.token_seconds
            self.token_refresh_at = now + 0.8 * (expires - now)
        else:
            self.token_refresh_at = float("inf")
        kube = self.ctx.kube
        doc = podenv.kubeconfig(
            server=kube.server,
            ca_pem=kube.ca_pem(),
            verify_tls=kube.verify_tls,
            namespace=self.ns,
            token=token,
        )
        podenv.write_private(self.kubeconfig_path, doc)

    # --- events (best effort, for `kubectl describe pod`) ---------------------------------------------------
    def _event(self, reason: str, message: str, container: str | None = None, warning: bool = False) -> None:
        now = model.rfc3339(time.time())
        involved: Obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": self.ns,
            "name": self.name,
            "uid": self.uid,
        }
        if container:
            involved["fieldPath"] = f"spec.containers{{{container}}}"
        body = {
            "metadata": {"generateName": f"{self.name}.", "namespace": self.ns},
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "type": "Warning" if warning else "Normal",
            "count": 1,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "source": {"component": "kubelet", "host": self.s.node_name},
            "reportingComponent": "kubelet",
            "reportingInstance": self.s.node_name,
        }
        try:
            self.ctx.kube.create_event(self.ns, body)
        except Exception as e:  # an event is never worth failing a pod over (namespace may be terminating)
            log.debug("pod %s: event %s not recorded: %s", self.key, reason, e)

    # --- status ---------------------------------------------------------------------------------------------
    def _phase(self) -> str:
        return self.phase_override or status.phase(self.policy, self.inits, self.mains)

    def _sync_status(self, now: float, force: bool = False) -> bool:
        """Patch the status if it changed; True when the API holds what we last computed."""
        ph = self._phase()
        if ph in api_status.POD_TERMINAL and self.phase_override is None:
            self.phase_override = ph  # terminal is forever
        desired = status.build(
            policy=self.policy,
            inits=self.inits,
            mains=self.mains,
            start_time=self.start_time,
            now=now,
            transitions=self.transitions,
            host_ip=self.s.host_ip,
            phase_override=self.phase_override,
        )
        sig = status.signature(desired)
        observed = status.signature(self.pod.get("status") or {})
        # Someone else changed it (the node controller marks pods not ready): write ours again.
        stale = sig != observed and now - self.last_write_at > 3.0
        if not force and ((sig == self.last_written and not stale) or now < self.write_retry_at):
            return sig == self.last_written
        try:
            updated = self.ctx.kube.patch_pod_status(self.ns, self.name, self.uid, desired)
        except kubeapi.KubeError as e:
            if e.status in (404, 409):  # gone, or a new pod of the same name (uid precondition)
                self.gone = True
                return False
            log.warning("pod %s: status patch failed: %s", self.key, e)
            self.write_retry_at = now + 1.0
            return False
        self.last_written, self.last_write_at = sig, now
        self.update(updated)
        return True

    def _emergency_status(self, e: Exception) -> None:
        body = {
            "phase": api_status.POD_FAILED,
            "reason": "PodRuntimeError",
            "message": f"local pod runtime: {e!r}"[:1000],
        }
        try:
            self.ctx.kube.patch_pod_status(self.ns, self.name, self.uid, body)
        except Exception:
            log.exception("pod %s: could not report the runtime error", self.key)
