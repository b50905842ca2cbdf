"""The reconciler's world for the pure ``decide`` tests: a run, its Postgres row, its Pods, at a fixed now."""

from __future__ import annotations

import datetime
from typing import Any

from agent_operator import settings
from agent_operator.decide import actions, model
from agentrun_core import store
from agentrun_core.api import meta, protocol
from tests.support import rowmaker

NOW = datetime.datetime(2026, 1, 1, 12, 0, 0, tzinfo=datetime.UTC)


def world(
    *,
    db: str | store.Run | None = "admitted",
    status: dict[str, Any] | None = None,
    pods: list[model.PodInfo] | None = None,
    spec: dict[str, Any] | None = None,
    finalizers: tuple[str, ...] = (meta.FINALIZER,),
    deleting: bool = False,
    annotations: dict[str, str] | None = None,
    approvals: tuple[store.Approval, ...] = (),
    generation: int = 1,
    **extra: Any,
) -> model.World:
    """``db``: the run row's status (a row is made) or the row itself; ``extra``: other World fields."""
    return model.World(
        run=model.RunRef(
            namespace="ns",
            name="r",
            uid="uid-1",
            resource_version="7",
            generation=generation,
            annotations=annotations or {},
            finalizers=finalizers,
            deleting=deleting,
        ),
        spec=model.RunSpec.from_body({"graph": "pkg.mod:graph", **(spec or {})}),
        status=status or {},
        now=NOW,
        db=rowmaker.run(status=db) if isinstance(db, str) else db,
        pods={p.attempt: p for p in pods or ()},
        approvals=approvals,
        **extra,
    )


def pod(attempt: int = 1, **kw: Any) -> model.PodInfo:
    return model.PodInfo(name=f"r-{attempt}", attempt=attempt, **kw)


def parked(
    *approvals: store.Approval,
    status: dict[str, Any] | None = None,
    pods: list[model.PodInfo] | None = None,
    **kw: Any,
) -> model.World:
    """A run parked for ``approvals`` after its first attempt, whose worker exited as parked; ``kw``: other
    ``world`` arguments."""
    parked_pod = pod(phase="Succeeded", exit_code=protocol.EXIT_PARKED)
    return world(
        db="parked",
        status=status or {"attempts": 1},
        pods=[parked_pod] if pods is None else pods,
        approvals=approvals,
        **kw,
    )


def drained(status: dict[str, Any] | None = None, **kw: Any) -> model.World:
    """A running run whose attempt's worker stopped at a step boundary (SIGTERM), as a suspend leaves it;
    ``kw``: other ``world`` arguments."""
    stopped = pod(phase="Failed", exit_code=protocol.EXIT_DRAINED)
    return world(db="running", status=status or {"attempts": 1}, pods=[stopped], **kw)


def effective(plan: actions.Plan) -> list[actions.Action]:
    """The actions that change the world (RecordLoss only closes an attempt row; PinImage records the image
    pin, tests/unit/test_imagepin.py)."""
    return [a for a in plan.actions if not isinstance(a, actions.RecordLoss | actions.PinImage)]


def kinds(plan: actions.Plan) -> list[type]:
    return [type(a) for a in plan.actions if not isinstance(a, actions.PinImage)]


def tuned(**fields: Any) -> settings.ReconcileSettings:
    return settings.ReconcileSettings(**fields)
