"""``operator/`` stays a plain folder so it cannot shadow the standard library's ``operator``."""

from __future__ import annotations

import subprocess
import sys
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
