"""Which approval id `agentrun approve/reject` annotates (deciding.choose): the one the human saw."""

from __future__ import annotations

import pytest

from agentrun import cluster, deciding

PENDING = {"id": "a-222222222222", "prompt": {"question": "send?"}, "deadline": "2030-01-01T00:00:00Z"}


def test_no_pending_approval_is_refused() -> None:
    with pytest.raises(cluster.CliError, match="has no pending approval"):
        deciding.choose({"phase": "Running"}, "ns/r", None, interactive=False)


def test_first_and_only_approval_may_be_meant_without_id() -> None:
    assert deciding.choose({"pendingApproval": PENDING}, "ns/r", None, False) == PENDING["id"]


def test_non_interactive_without_id_refused_once_several_were_asked() -> None:
    status = {"pendingApproval": PENDING, "approvals": [{"id": "a-111111111111", "decision": "approved"}]}
    with pytest.raises(cluster.CliError, match=r"asked 2 approvals: say which one you decide with --id"):
        deciding.choose(status, "ns/r", None, interactive=False)
    assert deciding.choose(status, "ns/r", PENDING["id"], interactive=False) == PENDING["id"]


def test_an_id_that_is_not_pending_is_refused() -> None:
    with pytest.raises(cluster.CliError, match="a-111111111111 is not the pending approval"):
        deciding.choose({"pendingApproval": PENDING}, "ns/r", "a-111111111111", interactive=False)


def test_interactive_shows_the_prompt_and_annotates_what_was_shown() -> None:
    shown: list[str] = []
    status = {"pendingApproval": PENDING, "approvals": [{"id": "a-111111111111"}]}

    def ask(text: str) -> str:
        shown.append(text)
        return "y"

    assert deciding.choose(status, "ns/r", None, True, ask=ask, decision="reject") == PENDING["id"]
    assert "send?" in shown[0] and "reject a-222222222222? [y/N]" in shown[0] and "2030-01-01" in shown[0]
    with pytest.raises(cluster.CliError, match="nothing decided"):
        deciding.choose(status, "ns/r", None, True, ask=lambda _: "")
