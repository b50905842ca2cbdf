import os
import subprocess
import sys

import pytest

from agentrun_core import faults


def test_parse_names_and_counts() -> None:
    plan = faults.parse("after_reserve, after_call@3")
    assert plan.targets == {"after_reserve": 1, "after_call": 3}


def test_parse_empty() -> None:
    assert faults.parse(None).targets == {}
    assert faults.parse(" , ").targets == {}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("after_reserv", "unknown fault point 'after_reserv'"),
        ("after_call@x", "expected name@N"),
        ("after_call@0", "counts hits from 1"),
        ("after_call,after_call@2", "listed twice"),
    ],
)
def test_parse_refuses(value: str, message: str) -> None:
    with pytest.raises(faults.FaultConfigError, match=message):
        faults.parse(value)


def test_hit_unknown_point_is_a_programming_error() -> None:
    with pytest.raises(KeyError):
        faults.hit("nope")


def _run(code: str, points: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, faults.ENV_VAR: points}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)


def test_hit_kills_on_the_nth_hit() -> None:
    code = (
        "from agentrun_core import faults\n"
        "faults.configure()\n"
        "for i in range(5):\n"
        "    print(i, flush=True)\n"
        "    faults.hit('after_call')\n"
    )
    proc = _run(code, "after_call@3")
    assert proc.returncode == -9
    assert proc.stdout.split() == ["0", "1", "2"]
    assert "after_call hit #3" in proc.stderr


def test_hit_other_point_does_not_kill() -> None:
    code = "from agentrun_core import faults\nfaults.configure()\nfaults.hit('after_call')\n"
    proc = _run(code, "after_reserve")
    assert proc.returncode == 0
