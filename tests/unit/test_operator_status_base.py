"""The status a round decides from (``memory.status_base``): what this replica wrote last until the watch
delivers it, then the body's alone (a quiet run's status is held once: P4's memory per parked run)."""

from __future__ import annotations

from typing import Any

from agent_operator.observe import memory as memory_


def _body(phase: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"resourceVersion": rv}, "status": {"phase": phase, "attempts": 1}}


def test_a_write_the_watch_has_not_delivered_is_the_base() -> None:
    memory = memory_.RunMemory(last_status={"phase": "Running", "attempts": 1})
    assert memory_.status_base(memory, _body("Pending", "5")) == {"phase": "Running", "attempts": 1}
    assert memory.last_status == {"phase": "Running", "attempts": 1}  # kept until the watch shows it


def test_once_the_body_shows_the_write_the_copy_is_dropped() -> None:
    memory = memory_.RunMemory(last_status={"phase": "Running", "attempts": 1})
    assert memory_.status_base(memory, _body("Running", "6")) == {"phase": "Running", "attempts": 1}
    assert memory.last_status is None
    # from then on the body is the base, whatever it shows next (another replica's write, say)
    assert memory_.status_base(memory, _body("Succeeded", "9")) == {"phase": "Succeeded", "attempts": 1}


def test_without_a_write_the_body_is_the_base() -> None:
    memory = memory_.RunMemory()
    assert memory_.status_base(memory, {"metadata": {}}) == {}
    assert memory_.status_base(memory, _body("Suspended", "3")) == {"phase": "Suspended", "attempts": 1}
