import pytest

from agent_worker import graphs, heartbeat, settings
from agentrun_core import errors
from agentrun_core.store import rows


def test_settings_from_env() -> None:
    s = settings.from_env(
        {"AGENTRUN_RUN_ID": "u1", "AGENTRUN_DSN": "postgresql://x", "AGENTRUN_RUN_NAME": "n"}
    )
    assert (
        s.effective_lease_name == "agentrun-n" and s.lease_duration_seconds == 15 and s.lease_mode == "kube"
    )
    with pytest.raises(errors.ConfigError, match="AGENTRUN_DSN"):
        settings.from_env({"AGENTRUN_RUN_ID": "u1"})
    with pytest.raises(errors.ConfigError, match="not an integer"):
        settings.from_env({"AGENTRUN_RUN_ID": "u", "AGENTRUN_DSN": "d", "AGENTRUN_ATTEMPT": "x"})
    with pytest.raises(errors.ConfigError, match="kube or none"):
        settings.from_env({"AGENTRUN_RUN_ID": "u", "AGENTRUN_DSN": "d", "AGENTRUN_LEASE_MODE": "maybe"})


def test_graph_refs() -> None:
    assert graphs.parse_ref("a.b:c") == ("a.b", "c")
    with pytest.raises(errors.GraphLoadError, match="not of the form"):
        graphs.parse_ref("a.b")
    with pytest.raises(errors.GraphLoadError, match="module 'no_such_mod' not found"):
        graphs.load("no_such_mod:g")
    with pytest.raises(errors.GraphLoadError, match="has no attribute"):
        graphs.load("agent_worker.graphs:nothing_here")


def test_resume_payloads() -> None:
    assert rows.resume_payload(
        approval_id="a", decision="approved", decided_by="u", comment=None, deadline_action=None
    ) == {"approved": True, "approval_id": "a", "by": "u", "comment": None, "type": "accept", "args": None}
    assert rows.resume_payload(
        approval_id="a", decision="expired", decided_by=None, comment=None, deadline_action="readOnly"
    ) == {
        "approved": False,
        "expired": True,
        "read_only": True,
        "approval_id": "a",
        "type": "ignore",
        "args": None,
    }
    with pytest.raises(ValueError):
        rows.resume_payload(
            approval_id="a", decision="maybe", decided_by=None, comment=None, deadline_action=None
        )


def test_heartbeat_observer_uses_local_time() -> None:
    obs = heartbeat.Observer(threshold_seconds=10)
    obs.observe("worker", 1, now=100.0)
    obs.observe("worker", 1, now=105.0)
    assert not obs.stale("worker", now=109.0)
    assert obs.stale("worker", now=111.0)
    obs.observe("worker", 2, now=111.0)
    assert not obs.stale("worker", now=120.0)
    assert not obs.stale("unknown", now=1e9)


def test_agentrun_worker_usage(capsys: pytest.CaptureFixture[str]) -> None:
    from agent_worker import main

    assert main.main(["--help"]) == 0
    assert "Exit codes" in capsys.readouterr().out
    assert main.main(["extra"]) == 2
