"""Build a Pod's ``status`` from the runtime's container records — pure.

Phase follows kubelet's ``getPhase``; conditions are the five kubelet owns (``PodReadyToStartContainers``,
``Initialized``, ``ContainersReady``, ``Ready``, and ``PodScheduled`` which binding already set). Conditions
written by others (``DisruptionTarget`` from an eviction, the node controller's ``Ready=False``) are merged by
type on the server: status is sent as a strategic merge patch, like kubelet does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from agentrun_core.api import status as api_status
from agentrun_dev.podruntime import model

Obj = Mapping[str, Any]

OWNED_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready", "PodScheduled")


def init_done(inits: Sequence[model.Container]) -> bool:
    return all(isinstance(c.state, model.Terminated) and c.state.exit_code == 0 for c in inits)


def init_failed_for_good(policy: str, inits: Sequence[model.Container]) -> bool:
    return policy == "Never" and any(
        isinstance(c.state, model.Terminated) and c.state.exit_code != 0 for c in inits
    )


def phase(policy: str, inits: Sequence[model.Container], mains: Sequence[model.Container]) -> str:
    """kubelet's getPhase for one pod (no sidecars)."""
    if init_failed_for_good(policy, inits):
        return api_status.POD_FAILED
    if not init_done(inits):
        return api_status.POD_PENDING
    running = waiting = stopped = succeeded = 0
    for c in mains:
        if isinstance(c.state, model.Running):
            running += 1
        elif isinstance(c.state, model.Terminated):
            stopped += 1
            succeeded += c.state.exit_code == 0
        elif c.last_state is not None:  # waiting to restart: counts as having run
            stopped += 1
        else:
            waiting += 1
    if waiting:
        return api_status.POD_PENDING
    if running:
        return api_status.POD_RUNNING
    if stopped:
        if policy == "Always":
            return api_status.POD_RUNNING
        if stopped == succeeded:
            return api_status.POD_SUCCEEDED
        if policy == "Never":
            return api_status.POD_FAILED
        return api_status.POD_RUNNING  # OnFailure: the failed ones restart
    return api_status.POD_PENDING


def final_phase(mains: Sequence[model.Container]) -> str:
    """Phase of a pod whose containers were all stopped for deletion (kubelet ≥1.27 makes it terminal)."""
    ok = all(isinstance(c.state, model.Terminated) and c.state.exit_code == 0 for c in mains)
    return api_status.POD_SUCCEEDED if ok and mains else api_status.POD_FAILED


def _cond(
    type_: str, ok: bool, since: float, reason: str | None = None, message: str | None = None
) -> dict[str, Any]:
    c: dict[str, Any] = {
        "type": type_,
        "status": "True" if ok else "False",
        "lastProbeTime": None,
        "lastTransitionTime": model.rfc3339(since),
    }
    if reason:
        c["reason"] = reason
    if message:
        c["message"] = message
    return c


@dataclasses.dataclass
class Transitions:
    """Remembers when each condition last flipped, so ``lastTransitionTime`` stays put between writes."""

    seen: dict[str, tuple[bool, float]] = dataclasses.field(default_factory=dict)

    def since(self, type_: str, ok: bool, now: float) -> float:
        prev = self.seen.get(type_)
        if prev is None or prev[0] != ok:
            self.seen[type_] = (ok, now)
            return now
        return prev[1]


def build(
    *,
    policy: str,
    inits: Sequence[model.Container],
    mains: Sequence[model.Container],
    start_time: float,
    now: float,
    transitions: Transitions,
    host_ip: str,
    phase_override: str | None = None,
    sandbox_ready: bool = True,
) -> dict[str, Any]:
    """The ``status`` body to patch. ``phase_override`` is for terminal phases after deletion/recovery."""
    ph = phase_override or phase(policy, inits, mains)
    initialized = init_done(inits)
    unready = [c.name for c in mains if not c.ready]
    incomplete = [
        c.name for c in inits if not (isinstance(c.state, model.Terminated) and c.state.exit_code == 0)
    ]
    ready = initialized and not unready and ph not in api_status.POD_TERMINAL
    conds = [
        _cond(
            "PodReadyToStartContainers",
            sandbox_ready and ph not in api_status.POD_TERMINAL,
            transitions.since(
                "PodReadyToStartContainers", sandbox_ready and ph not in api_status.POD_TERMINAL, now
            ),
        ),
        _cond(
            "Initialized",
            initialized,
            transitions.since("Initialized", initialized, now),
            None if initialized else "ContainersNotInitialized",
            None if initialized else f"containers with incomplete status: [{' '.join(incomplete)}]",
        ),
        *(  # the kubelet reports the Pod Ready exactly when all its containers are
            _cond(
                type_,
                ready,
                transitions.since(type_, ready, now),
                None
                if ready
                else ("PodCompleted" if ph in api_status.POD_TERMINAL else "ContainersNotReady"),
                None
                if ready or ph in api_status.POD_TERMINAL
                else f"containers with unready status: [{' '.join(unready)}]",
            )
            for type_ in ("ContainersReady", "Ready")
        ),
        _cond("PodScheduled", True, transitions.since("PodScheduled", True, now)),
    ]
    out: dict[str, Any] = {
        "phase": ph,
        "conditions": conds,
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": host_ip,
        "podIPs": [{"ip": host_ip}],
        "startTime": model.rfc3339(start_time),
        "containerStatuses": [model.container_status(c) for c in mains],
    }
    if inits:
        out["initContainerStatuses"] = [model.container_status(c) for c in inits]
    return out


def signature(status: Obj) -> tuple[Any, ...]:
    """What must match between the desired and the observed status (times and others' conditions excluded)."""

    def cs(items: Sequence[Obj] | None) -> tuple[Any, ...]:
        out = []
        for c in items or []:
            state = c.get("state") or {}
            key = next(iter(state), "")
            detail = state.get(key) or {}
            last = c.get("lastState") or {}
            lkey = next(iter(last), "")
            out.append(
                (
                    c.get("name"),
                    key,
                    detail.get("reason"),
                    detail.get("exitCode"),
                    lkey,
                    (last.get(lkey) or {}).get("exitCode"),
                    c.get("restartCount"),
                    bool(c.get("ready")),
                )
            )
        return tuple(out)

    conds = tuple(
        sorted(
            (str(c.get("type")), str(c.get("status")))
            for c in status.get("conditions") or []
            if c.get("type") in OWNED_CONDITIONS
        )
    )
    return (
        status.get("phase"),
        status.get("podIP"),
        conds,
        cs(status.get("containerStatuses")),
        cs(status.get("initContainerStatuses")),
    )
