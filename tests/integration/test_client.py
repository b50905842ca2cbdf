"""``agentrun.client`` against the real operator, a real worker and real identities: a run created from
Python by one person parks on its approval, another person's client lists and approves it (the admission
policies judge it exactly as for the CLI: a stranger's approval is refused with the server's message), the
run finishes, and the client reads the effects and step events from the ledger."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrun import client
from tests.support.kube import Team
from tests.support.operator_proc import OperatorHandle
from tests.support.specs import APPROVAL


@pytest.fixture
def people(team: Team) -> dict[str, Path]:
    return team(
        {
            "manager": ("managers", "agentrun-approver"),
            "alice": ("devs", "agentrun-editor"),
            "mallory": ("devs", "agentrun-editor"),
        }
    )


def test_create_wait_approve_and_read_the_ledger_from_python(
    operator: OperatorHandle, people: dict[str, Path], pg_dsn: str, tmp_path: Path
) -> None:
    ns, out = operator.namespace, tmp_path / "effects.txt"
    alice = client.Client(kubeconfig=str(people["alice"]), namespace=ns, dsn=pg_dsn)
    created = alice.create(
        "py-1",
        graph=APPROVAL,
        input={"path": str(out), "line": "approved-line"},
        labels={"team": "support"},
        lease={"durationSeconds": 8},
        retry={"backoffSeconds": 0},
    )
    assert (created.name, created.namespace, created.phase) == ("py-1", ns, "Pending") and created.uid

    parked = alice.wait("py-1", until={"WaitingApproval", *client.FINAL_PHASES}, timeout=240)
    assert parked.phase == "WaitingApproval" and parked.pending_approval is not None, parked.message
    assert parked.pending_approval.prompt["question"] == "append the line?"
    with pytest.raises(client.Timeout) as late:
        alice.wait("py-1", timeout=1, interval=0.2)
    assert late.value.run.phase == "WaitingApproval"
    assert [r.name for r in alice.list(selector="team=support", phases=["WaitingApproval"])] == ["py-1"]

    mallory = client.Client(kubeconfig=str(people["mallory"]), namespace=ns)
    with pytest.raises(client.Error, match="may not approve"):
        mallory.approve("py-1")
    manager = client.Client(kubeconfig=str(people["manager"]), namespace=ns)
    (pending,) = manager.pending_approvals()
    assert pending.run.name == "py-1" and pending.approval == parked.pending_approval
    assert manager.approve("py-1", approval_id=pending.approval.id, comment="ok") == pending.approval.id

    done = alice.wait("py-1", timeout=240)
    assert done.phase == "Succeeded" and done.finished, (done.phase, done.message, operator.logs()[-3000:])
    (effect,) = alice.effects("py-1")
    assert effect["status"] in ("sent", "confirmed")
    # the effect, performed once, under its idempotency key
    assert out.read_text().splitlines() == [f"{effect['key']} approved-line"]
    events = list(alice.steps("py-1", interval=0.2))  # ends by itself: the run finished
    assert any(e.step.startswith("act") for e in events), [e.step for e in events]
    assert len({e.id for e in events}) == len(events)  # each event once
    with pytest.raises(client.Error, match='AgentRun "nope" not found'):
        alice.get("nope")
    with pytest.raises(client.Error, match="unknown phase Done"):
        alice.wait("py-1", until={"Done"})
