"""A finished run's result as kept and shown (agentrun_core.results)."""

from __future__ import annotations

from agentrun_core import results


def test_large_results_are_summarised() -> None:
    assert results.summarise({"ok": True}) == {"ok": True}
    big = results.summarise({"text": "x" * 20000})
    assert big["truncated"] is True and big["bytes"] > 20000


def test_a_summary_is_its_own_summary() -> None:
    """The worker stores the summary; the operator summarises what it reads again."""
    big = results.summarise({"text": "x" * 20000})
    assert results.summarise(big) == big


def test_non_json_leaves_are_given_by_default() -> None:
    """The worker passes ``repr`` (a message object in the final state), the operator ``str``."""

    class Message:
        def __repr__(self) -> str:
            return "Message(hi)"

    assert results.summarise({"m": [Message()]}, default=repr) == {"m": ["Message(hi)"]}
