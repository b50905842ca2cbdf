"""The freeze/thaw file channel between tests and the pod runtime (no runtime running here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrun_dev.podruntime import control


def test_changes_accumulate_with_rising_generation(tmp_path: Path) -> None:
    a = control.freeze(tmp_path, wait_s=None)
    b = control.freeze_pod("ns", "p1", tmp_path, wait_s=None)
    c = control.freeze_pod("ns", "p2", tmp_path, wait_s=None)
    d = control.thaw_pod("ns", "p1", tmp_path, wait_s=None)
    e = control.thaw(tmp_path, wait_s=None)
    assert [s.generation for s in (a, b, c, d, e)] == [1, 2, 3, 4, 5]
    assert control.read(tmp_path) == control.State(5, False, frozenset({"ns/p2"}))
    assert control.reset(tmp_path, wait_s=None).frozen_pods == frozenset()


def test_waiting_needs_the_runtime_ack(tmp_path: Path) -> None:
    with pytest.raises(control.NotRunning):
        control.freeze(tmp_path, wait_s=0.2)
    control.write_ack(tmp_path / "podruntime", 2)  # as the runtime would, once applied
    assert control.thaw(tmp_path, wait_s=1.0).generation == 2


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert control.main(["--state-dir", str(tmp_path), "--no-wait", "freeze-pod", "ns/p"]) == 0
    assert control.main(["--state-dir", str(tmp_path), "--no-wait", "freeze-pod", "bad"]) == 2
    assert (
        control.main(["--state-dir", str(tmp_path), "--timeout", "0.2", "freeze"]) == 1
    )  # no runtime acknowledges
    capsys.readouterr()
    assert control.main(["--state-dir", str(tmp_path), "status"]) == 0
    assert '"frozen_pods": ["ns/p"]' in capsys.readouterr().out
