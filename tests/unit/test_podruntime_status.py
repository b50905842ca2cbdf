"""Pod phase, conditions and container statuses built by the local pod runtime (kubelet's getPhase)."""

from __future__ import annotations

from typing import Any

import pytest

from agentrun_dev.podruntime import model, podworker, restarts, status

T0 = 1_800_000_000.0


def running(name: str = "main") -> model.Container:
    return model.Container(name, "img", state=model.Running(T0))


def exited(code: int, name: str = "main", reason: str | None = None) -> model.Container:
    r = reason or ("Completed" if code == 0 else "Error")
    return model.Container(name, "img", state=model.Terminated(code, r, T0 + 1, T0))


def backoff(name: str = "main") -> model.Container:
    c = model.Container(name, "img", last_state=model.Terminated(1, "Error", T0 + 1, T0))
    c.state = model.Waiting("CrashLoopBackOff")
    return c


def built(
    policy: str, main: model.Container, now: float, transitions: status.Transitions | None = None
) -> dict[str, Any]:
    """The status the runtime writes for a Pod of the one container ``main``, started at T0, on the loopback
    node."""
    return status.build(
        policy=policy,
        inits=[],
        mains=[main],
        start_time=T0,
        now=now,
        transitions=transitions or status.Transitions(),
        host_ip="127.0.0.1",
    )


@pytest.mark.parametrize(
    ("policy", "mains", "expected"),
    [
        ("Never", [model.Container("main", "img")], "Pending"),
        ("Never", [running()], "Running"),
        ("Never", [exited(0)], "Succeeded"),
        ("Never", [exited(3)], "Failed"),
        ("Never", [exited(0), exited(1, "b")], "Failed"),
        ("Never", [exited(0), running("b")], "Running"),
        ("OnFailure", [exited(0)], "Succeeded"),
        ("OnFailure", [backoff()], "Running"),
        ("Always", [exited(0)], "Running"),
        ("Always", [backoff()], "Running"),
        ("Never", [exited(137, reason="OOMKilled")], "Failed"),
    ],
)
def test_phase(policy: str, mains: list[model.Container], expected: str) -> None:
    assert status.phase(policy, [], mains) == expected


def test_init_containers_gate_the_phase() -> None:
    init_running = model.Container("init", "img", init=True, state=model.Running(T0))
    assert status.phase("Never", [init_running], [model.Container("main", "img")]) == "Pending"
    init_failed = model.Container("init", "img", init=True, state=model.Terminated(1, "Error", T0))
    assert status.phase("Never", [init_failed], [model.Container("main", "img")]) == "Failed"
    assert status.phase("OnFailure", [init_failed], [model.Container("main", "img")]) == "Pending"


def test_build_running_pod_is_ready_and_signature_ignores_times() -> None:
    tr = status.Transitions()
    st = built("Always", running(), T0 + 2, tr)
    assert st["phase"] == "Running"
    assert st["podIP"] == st["hostIP"] == "127.0.0.1"
    conds = {c["type"]: c for c in st["conditions"]}
    assert {k: c["status"] for k, c in conds.items()} == {
        "PodReadyToStartContainers": "True",
        "Initialized": "True",
        "ContainersReady": "True",
        "Ready": "True",
        "PodScheduled": "True",
    }
    cs = st["containerStatuses"][0]
    assert cs["ready"] and cs["started"] and "running" in cs["state"] and cs["restartCount"] == 0
    later = built("Always", running(), T0 + 50, tr)
    # lastTransitionTime stays put while nothing flips
    assert later["conditions"] == st["conditions"]
    assert status.signature(later) == status.signature(st)


def test_build_terminated_pod_carries_exit_code_and_not_ready() -> None:
    st = built("Never", exited(137, reason="OOMKilled"), T0 + 2)
    assert st["phase"] == "Failed"
    term = st["containerStatuses"][0]["state"]["terminated"]
    assert (term["exitCode"], term["reason"]) == (137, "OOMKilled")
    ready = next(c for c in st["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "PodCompleted")


def test_signature_sees_foreign_ready_false() -> None:
    st = built("Always", running(), T0)
    observed = {
        **st,
        "conditions": [dict(c, status="False") if c["type"] == "Ready" else c for c in st["conditions"]],
    }
    assert status.signature(observed) != status.signature(st)


def test_final_phase_after_deletion() -> None:
    assert status.final_phase([exited(0)]) == "Succeeded"
    assert status.final_phase([exited(143)]) == "Failed"
    assert status.final_phase([model.Container("main", "img")]) == "Failed"


def test_restart_decisions_and_backoff() -> None:
    b = restarts.Backoff(initial_s=1, max_s=10, reset_after_s=60)
    assert [restarts.delay(n, b) for n in (1, 2, 3, 4, 5, 9)] == [1, 2, 4, 8, 10, 10]
    assert restarts.should_restart("Always", 0) and restarts.should_restart("OnFailure", 1)
    assert not restarts.should_restart("OnFailure", 0) and not restarts.should_restart("Never", 1)

    c = running()
    restarts.on_exit(c, model.Terminated(2, "Error", T0 + 1, T0), "OnFailure", T0 + 1, b)
    assert isinstance(c.state, model.Waiting) and c.state.reason == "CrashLoopBackOff"
    assert c.last_state is not None and c.last_state.exit_code == 2 and c.restart_at == T0 + 2
    c.state = model.Running(T0 + 2)
    restarts.on_exit(c, model.Terminated(2, "Error", T0 + 3, T0 + 2), "OnFailure", T0 + 3, b)
    assert c.restart_at == T0 + 5  # second crash in a row: 2 s
    c.state = model.Running(T0)
    restarts.on_exit(c, model.Terminated(2, "Error", T0 + 100, T0), "OnFailure", T0 + 100, b)
    assert c.restart_at == T0 + 101  # a long run resets the streak

    never = running()
    restarts.on_exit(never, model.Terminated(1, "Error", T0 + 1, T0), "Never", T0 + 1, b)
    assert isinstance(never.state, model.Terminated) and never.restart_at is None

    init = model.Container("init", "img", init=True, state=model.Running(T0))
    restarts.on_exit(init, model.Terminated(0, "Completed", T0 + 1, T0), "Always", T0 + 1, b)
    assert isinstance(init.state, model.Terminated)  # init containers never restart after success


def test_recovered_container_is_status_unknown_137() -> None:
    term = restarts.recovered(running(), T0 + 5)
    assert (term.exit_code, term.reason, term.started_at) == (137, "ContainerStatusUnknown", T0)


def test_recover_takes_over_a_lost_running_container() -> None:
    b = restarts.Backoff()
    api = {
        "name": "main",
        "restartCount": 2,
        "containerID": "agentrun://x-main-2",
        "state": {"running": {"startedAt": "2027-01-15T08:00:00Z"}},
    }
    always = model.Container("main", "img")
    podworker.recover(always, api, "Always", T0, b)
    assert always.restart_count == 2 and isinstance(always.state, model.Waiting)
    assert always.last_state is not None and always.last_state.reason == "ContainerStatusUnknown"
    assert always.last_state.exit_code == 137 and always.restart_at is not None

    never = model.Container("main", "img")
    podworker.recover(never, api, "Never", T0, b)
    assert isinstance(never.state, model.Terminated) and never.state.reason == "ContainerStatusUnknown"
    assert status.phase("Never", [], [never]) == "Failed"

    done = model.Container("main", "img")
    finished = {"state": {"terminated": {"exitCode": 0, "reason": "Completed"}}, "restartCount": 0}
    podworker.recover(done, finished, "OnFailure", T0, b)
    assert isinstance(done.state, model.Terminated) and done.state.exit_code == 0

    fresh = model.Container("main", "img")
    podworker.recover(fresh, None, "Always", T0, b)
    assert isinstance(fresh.state, model.Waiting) and fresh.state.reason == "ContainerCreating"
