"""The tree shows the architecture (docs/architecture.md): small modules, and import boundaries that hold.

The boundaries themselves are import-linter contracts in pyproject.toml (``[tool.importlinter]``);
``make lint`` and ``make test`` run them, and this test runs them too so a plain ``pytest`` run cannot miss a
broken one.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp

from tests.support import source_tree

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 420  # "roughly 400": a module much past that has two jobs; split it along its seam


def test_no_module_is_over_the_size_limit() -> None:
    sizes = ((path, len(text.splitlines())) for path, text in source_tree.python_sources())
    too_long = [f"{path}: {lines} lines" for path, lines in sizes if lines > MAX_LINES]
    assert not too_long, "modules over {} lines:\n{}".format(MAX_LINES, "\n".join(too_long))


def test_import_contracts_hold() -> None:
    lint_imports = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    proc = subprocess.run([lint_imports, "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Eleven contracts: core at the bottom; worker and operator independent; neither imports CLI or dev
    # tooling; the CLI imports neither; only the core talks SQL and HTTP to the API server; the operator's
    # roles in layers (serve > act > observe > decide); decide pure; the API package values only; and three
    # opened import circles stay open (respond_cli -/-> approve_cli, ledger_shell -/-> effects,
    # the dev cluster -/-> the real node's lifecycle).
    assert proc.stdout.count(" KEPT") == 11, proc.stdout


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_modules_import_each_other() -> None:
    """No import circle between modules. An import inside a function, one under TYPE_CHECKING and one by
    name (``importlib.import_module("...")`` with a literal) count too: each of them once hid a circle."""
    roots = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["root_packages"]
    graph = grimp.build_graph(*roots, cache_dir=None)
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    by_name = re.compile(r"import_module\(\s*[\"']([\w.]+)[\"']\s*\)")
    for module in graph.modules:
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.origin and spec.origin.endswith(".py"):
            named = by_name.findall(Path(spec.origin).read_text())
            edges[module] |= {target for target in named if target in edges}
    assert not _circles(edges)
