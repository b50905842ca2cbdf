"""The freeze/thaw file channel between tests and the pod runtime (no runtime running here)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
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


def test_a_namespace_thaw_leaves_other_tests_hung_pods_hung(tmp_path: Path) -> None:
    control.freeze_pod("a", "p", tmp_path, wait_s=None)
    control.freeze_pod("ab", "q", tmp_path, wait_s=None)  # a prefix of the name is another namespace
    control.freeze_pod("b", "r", tmp_path, wait_s=None)
    assert control.thaw_namespace("a", tmp_path, wait_s=None).frozen_pods == frozenset({"ab/q", "b/r"})


def _node_wide_calls(tree: ast.Module) -> Iterator[tuple[str, ast.FunctionDef | None]]:
    """(``freeze`` | ``thaw`` | ``reset``, the function it is called in) for each node-wide control call."""
    parents: dict[ast.AST, ast.AST] = {c: p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
    for node in ast.walk(tree):
        func = node.func if isinstance(node, ast.Call) else None
        if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)):
            continue
        if func.value.id != "control" or func.attr not in {"freeze", "thaw", "reset"}:
            continue
        up: ast.AST | None = node
        while up is not None and not isinstance(up, ast.FunctionDef):
            up = parents.get(up)
        yield func.attr, up


def test_tests_touch_the_shared_node_only_alone() -> None:
    """The parallel part of ``make test`` runs two test processes against one node: a test that freezes the
    whole node stops the other process's workers (it must be ``serial``), and a teardown that resets every
    hung pod un-hangs a worker another test is waiting on (it must thaw its own namespace)."""
    wrong = []
    root = Path(__file__).resolve().parents[1]
    for path in sorted(root.rglob("*.py")):
        if path == Path(__file__).resolve():
            continue
        tree = ast.parse(path.read_text())
        module_serial = "pytestmark" in path.read_text() and "mark.serial" in path.read_text()
        for verb, function in _node_wide_calls(tree):
            where = f"{path.relative_to(root)}:{function.name if function else '<module>'}"
            if verb == "reset":
                wrong.append(f"{where}: control.reset() thaws other tests' pods; use control.thaw_namespace")
            elif verb == "freeze" and not module_serial:
                marks = [ast.unparse(d) for d in function.decorator_list] if function else []
                if not any("mark.serial" in m for m in marks):
                    wrong.append(f"{where}: control.freeze() stops every test's pods; mark the test serial")
    assert not wrong, "\n".join(wrong)
