"""The shipped manifests are found through importlib.resources: the wheel's copy when installed, else the
checkout (agentrun_dev/manifests.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from agentrun_dev import manifests

REPO = Path(__file__).resolve().parents[2]


def test_an_editable_install_reads_the_checkout() -> None:
    assert manifests.root() == REPO
    crd = REPO / "crds" / "agentrun.dev_agentruns.yaml"
    assert manifests.path("crds", "agentrun.dev_agentruns.yaml") == crd
    assert manifests.path("deploy", "admission").is_dir()


def test_the_wheel_carries_every_shipped_directory_where_the_reader_looks() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    force = config["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]
    assert force == {d: f"agentrun_dev/{manifests.PACKAGED}/{d}" for d in manifests.SHIPPED}


def test_an_installed_package_reads_its_own_copy_not_a_checkout(tmp_path: Path) -> None:
    # The wheel's layout: agentrun_dev/ with _manifests/ inside, first on sys.path (before the editable .pth).
    pkg = tmp_path / "site" / "agentrun_dev"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    shutil.copy(REPO / "agentrun_dev" / "manifests.py", pkg / "manifests.py")
    (pkg / "_manifests" / "deploy" / "base").mkdir(parents=True)
    (pkg / "_manifests" / "deploy" / "base" / "rbac-worker.yaml").write_text("kind: ClusterRole\n")
    code = (
        "from agentrun_dev import manifests; "
        "print(manifests.path('deploy', 'base', 'rbac-worker.yaml').read_text().strip())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(tmp_path / "site")},
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout
    assert out.strip() == "kind: ClusterRole"


@pytest.mark.parametrize("parts", [(), ("operator",), ("../etc", "passwd")])
def test_only_shipped_directories_are_manifests(parts: tuple[str, ...]) -> None:
    with pytest.raises(ValueError, match="not a shipped manifest"):
        manifests.path(*parts)
