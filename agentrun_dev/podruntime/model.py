"""What the runtime knows about a pod's containers — plain data, no I/O.

Times are Unix seconds (``float``); :func:`rfc3339` renders them for the API. A container's
``state`` is one of :class:`Waiting`, :class:`Running`, :class:`Terminated`, as in ``v1.ContainerState``.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from typing import Any

Obj = Mapping[str, Any]


def rfc3339(t: float) -> str:
    return datetime.datetime.fromtimestamp(int(t), tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_micro(t: float) -> str:
    """``MicroTime`` (Lease ``renewTime``/``acquireTime``)."""
    return datetime.datetime.fromtimestamp(t, tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str | None) -> float | None:
    if not text:
        return None
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@dataclasses.dataclass(frozen=True)
class Waiting:
    reason: str
    message: str | None = None


@dataclasses.dataclass(frozen=True)
class Running:
    started_at: float


@dataclasses.dataclass(frozen=True)
class Terminated:
    exit_code: int
    reason: str
    finished_at: float
    started_at: float | None = None
    signal: int | None = None
    message: str | None = None
    container_id: str | None = None


State = Waiting | Running | Terminated


@dataclasses.dataclass
class Container:
    """One container (or init container) of a pod, as this runtime runs it."""

    name: str
    image: str
    init: bool = False
    state: State = dataclasses.field(default_factory=lambda: Waiting("ContainerCreating"))
    last_state: Terminated | None = None
    restart_count: int = 0
    # Consecutive failures since the last long-enough run: the backoff exponent.
    crash_streak: int = 0
    # When a container in backoff may start again (None = not waiting for a restart).
    restart_at: float | None = None
    container_id: str | None = None

    @property
    def ready(self) -> bool:
        # No probes: a running container is ready (documented limitation).
        return isinstance(self.state, Running)

    @property
    def started(self) -> bool:
        return isinstance(self.state, Running)

    @property
    def ever_ran(self) -> bool:
        return self.last_state is not None or isinstance(self.state, (Running, Terminated))


def state_dict(state: State) -> dict[str, Any]:
    if isinstance(state, Waiting):
        w: dict[str, Any] = {"reason": state.reason}
        if state.message:
            w["message"] = state.message
        return {"waiting": w}
    if isinstance(state, Running):
        return {"running": {"startedAt": rfc3339(state.started_at)}}
    t: dict[str, Any] = {
        "exitCode": state.exit_code,
        "reason": state.reason,
        "finishedAt": rfc3339(state.finished_at),
    }
    if state.started_at is not None:
        t["startedAt"] = rfc3339(state.started_at)
    if state.signal is not None:
        t["signal"] = state.signal
    if state.message:
        t["message"] = state.message
    if state.container_id:
        t["containerID"] = state.container_id
    return {"terminated": t}


def container_status(c: Container) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": c.name,
        "image": c.image,
        "imageID": "",
        "state": state_dict(c.state),
        "lastState": state_dict(c.last_state) if c.last_state else {},
        "ready": c.ready,
        "started": c.started,
        "restartCount": c.restart_count,
    }
    if c.container_id:
        out["containerID"] = c.container_id
    return out


def terminated_from_api(d: Obj) -> Terminated:
    return Terminated(
        exit_code=int(d.get("exitCode", 0)),
        reason=str(d.get("reason") or ""),
        finished_at=parse_time(d.get("finishedAt")) or 0.0,
        started_at=parse_time(d.get("startedAt")),
        signal=d.get("signal"),
        message=d.get("message"),
        container_id=d.get("containerID"),
    )
