"""``operator/`` stays a plain folder so it cannot shadow the standard library's ``operator``."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_import_operator_from_repo_root_is_the_stdlib() -> None:
    out = subprocess.run(
        [sys.executable, "-c", "import operator; print(operator.__file__, hasattr(operator, 'itemgetter'))"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split()
    assert out[1] == "True"
    assert not out[0].startswith(str(ROOT)), out[0]


def test_operator_folder_has_no_init() -> None:
    assert (ROOT / "operator" / "agent_operator").is_dir()
    assert not (ROOT / "operator" / "__init__.py").exists()


def test_test_modules_have_unique_basenames() -> None:
    """pytest imports test files by basename (rootdir-relative, no packages): two ``test_x.py`` in different
    folders stop the whole collection ("import file mismatch") on a clean checkout."""
    seen: dict[str, Path] = {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        assert path.name not in seen, f"{path} and {seen[path.name]} share a basename"
        seen[path.name] = path


def imported_modules(path: Path) -> Iterator[str]:
    """Every module the file imports, by name; ``from a import b`` names ``a`` and ``a.b`` (b may be one)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def support_imports_from_test_folders(support: Path) -> list[str]:
    """``tests.*`` imports in ``support`` that name a module outside it (``file: module``)."""
    return [
        f"{path.name}: {module}"
        for path in sorted(support.rglob("*.py"))
        for module in imported_modules(path)
        if module.startswith("tests.") and module.split(".")[1] != "support"
    ]


def test_test_support_imports_no_test_folder() -> None:
    """tests/support is what the test folders share: a helper there that imports from tests/integration or
    tests/chaos makes every user of it load that folder's test modules (and their fixtures) too."""
    assert support_imports_from_test_folders(ROOT / "tests" / "support") == []


def _has_tests(path: Path) -> bool:
    tree = ast.parse(path.read_text())
    return any(isinstance(n, ast.FunctionDef) and n.name.startswith("test_") for n in tree.body)


def imports_of_test_modules(tests: Path) -> list[str]:
    """Imports, anywhere under ``tests``, of a module that holds tests (``file: module``)."""
    found = []
    for path in sorted(tests.rglob("*.py")):
        for module in imported_modules(path):
            target = tests.parent.joinpath(*module.split(".")).with_suffix(".py")
            if module.startswith("tests.") and target.is_file() and _has_tests(target):
                found.append(f"{path.relative_to(tests)}: {module}")
    return found


def test_no_module_imports_a_test_module() -> None:
    """A helper two test modules share lives in tests/support: imported from a test module, it drags that
    module's tests and fixtures into the importer (and pytest may collect them twice)."""
    assert imports_of_test_modules(ROOT / "tests") == []
