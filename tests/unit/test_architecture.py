"""The tree shows the architecture (docs/architecture.md): small modules, and import boundaries that hold.

The boundaries themselves are import-linter contracts in pyproject.toml (``[tool.importlinter]``);
``make lint`` and ``make test`` run them, and this test runs them too so a plain ``pytest`` run cannot miss a
broken one.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("agentrun_core", "agent_worker", "operator/agent_operator", "agentrun", "agentrun_dev",
            "agentrun_examples", "bench")
MAX_LINES = 420  # "roughly 400": a module much past that has two jobs; split it along its seam


def test_no_module_is_over_the_size_limit() -> None:
    too_long = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            lines = len(path.read_text().splitlines())
            if lines > MAX_LINES:
                too_long.append(f"{path.relative_to(ROOT)}: {lines} lines")
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
