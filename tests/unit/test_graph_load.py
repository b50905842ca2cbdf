"""Graph references: a transient import failure is retried, SystemExit is a load error (never exit 0)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_worker import graphs
from agentrun_core import errors


@pytest.fixture
def modules(tmp_path: Path) -> Iterator[Path]:
    sys.path.insert(0, str(tmp_path))
    yield tmp_path
    sys.path.remove(str(tmp_path))
    for name in [m for m in sys.modules if m.startswith("gl_")]:
        del sys.modules[name]


def test_system_exit_at_import_is_a_graph_load_error(modules: Path) -> None:
    (modules / "gl_exits.py").write_text("raise SystemExit(0)\n")
    with pytest.raises(errors.GraphLoadError, match="SystemExit"):
        graphs.load("gl_exits:graph")


def test_system_exit_in_a_factory_is_a_graph_load_error(modules: Path) -> None:
    (modules / "gl_factory.py").write_text("def graph():\n    raise SystemExit(3)\n")
    with pytest.raises(errors.GraphLoadError, match="SystemExit"):
        graphs.compile_graph(graphs.load("gl_factory:graph"), None, ref="gl_factory:graph")


def test_a_transient_import_error_is_retried(modules: Path) -> None:
    marker = modules / "gl_marker"
    (modules / "gl_flaky.py").write_text(
        "import pathlib\n"
        f"m = pathlib.Path({str(marker)!r})\n"
        "if not m.exists():\n"
        "    m.write_text('x')\n"
        "    raise ConnectionRefusedError('dependency not up yet')\n"
        "graph = 'loaded'\n"
    )
    slept: list[float] = []
    module = graphs._import("gl_flaky:graph", "gl_flaky", sleep=slept.append)
    assert module.graph == "loaded" and slept == [graphs.IMPORT_RETRY_DELAYS[0]]


def test_a_persistent_import_error_fails_after_the_retries(modules: Path) -> None:
    (modules / "gl_down.py").write_text("raise TimeoutError('never up')\n")
    slept: list[float] = []
    with pytest.raises(errors.GraphLoadError, match="kept failing"):
        graphs._import("gl_down:graph", "gl_down", sleep=slept.append)
    assert slept == list(graphs.IMPORT_RETRY_DELAYS)
