"""Waiting on a condition: polled, with a generous deadline (the machine is loaded), never a fixed sleep.

The deadline only bounds a hang; every wait returns as soon as its condition holds.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import kubernetes

from agentrun_dev import waiting as dev_waiting
from tests.support import kube

if TYPE_CHECKING:
    from tests.support.operator_proc import OperatorHandle

T = TypeVar("T")


def wait_for(
    predicate: Callable[[], T],
    timeout: float,
    what: str = "a condition",
    interval: float = 0.2,
    on_timeout: Callable[[], str] | None = None,
) -> T:
    """The first truthy value of ``predicate()``, polled every ``interval`` s; fails the test after
    ``timeout`` s, saying what it waited for, the last value seen and ``on_timeout()``."""
    value = dev_waiting.poll(predicate, timeout, interval)
    if value:
        return value
    detail = on_timeout() if on_timeout else ""
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {value!r})\n{detail}")


def wait_phase(
    api: kubernetes.client.ApiClient,
    namespace: str,
    name: str,
    phases: str | tuple[str, ...],
    timeout: float = 90.0,
    handle: OperatorHandle | None = None,
) -> dict[str, Any]:
    """The AgentRun's status once its phase is one of ``phases``; on timeout the failure shows its status,
    its events and (given the ``handle``) the operator's logs."""
    wanted = (phases,) if isinstance(phases, str) else phases

    def check() -> dict[str, Any] | None:
        status = kube.run_status(api, namespace, name)
        return status if status.get("phase") in wanted else None

    def explain() -> str:
        text = json.dumps(kube.run_status(api, namespace, name), indent=1, default=str)[-4000:]
        text += "\nEVENTS:\n" + "\n".join(
            f"{e.type} {e.reason}: {e.message}" for e in kube.events(api, namespace, name)
        )
        if handle is not None:
            text += "\n" + handle.logs()[-8000:]
        return text

    status = wait_for(check, timeout, f"{name} phase in {wanted}", on_timeout=explain)
    assert status is not None
    return status
