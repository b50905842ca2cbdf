import os
import subprocess
import sys

import pytest

from agentrun_core import canonical, keys

_ARGS = {"to": "a@example.org", "tags": ["x", "y"], "n": 3, "meta": {"b": 1, "a": None}}


def _key(occurrence: int = 0, step: keys.StepId | None = None) -> str:
    return keys.derive(
        "run-1",
        step or keys.StepId("send", 3),
        "send_email",
        occurrence,
        version=1,
        args_hash=canonical.digest(_ARGS),
    )


def _v2(occurrence: int = 0, step: str = "send:3", run: str = "run-1", action: str = "send_email") -> str:
    return keys.derive(run, step, action, occurrence, version=2)


def test_deterministic_and_shaped() -> None:
    assert _key() == _key()
    assert _key().startswith("ak-") and len(_key()) == 43
    assert set(_key()[3:]) <= set("0123456789abcdef")


def test_every_component_matters() -> None:
    base = _key()
    assert _key(occurrence=1) != base
    assert _key(step=keys.StepId("send", 4)) != base
    assert _key(step=keys.StepId("other", 3)) != base
    h = canonical.digest(_ARGS)
    assert keys.derive("run-2", keys.StepId("send", 3), "send_email", 0, version=1, args_hash=h) != base
    assert keys.derive("run-1", keys.StepId("send", 3), "other", 0, version=1, args_hash=h) != base
    other = canonical.digest({})
    assert keys.derive("run-1", keys.StepId("send", 3), "send_email", 0, version=1, args_hash=other) != base


def test_v2_is_position_only_and_differs_from_v1() -> None:
    base = _v2()
    assert base.startswith("ak-") and len(base) == 43 and base == _v2()
    assert _v2(occurrence=1) != base
    assert _v2(step="send:4") != base and _v2(step="sub:2/send:3") != base
    assert _v2(run="run-2") != base and _v2(action="other") != base
    assert keys.derive("run-1", "send:3", "send_email", 0, version=2, args_hash="ignored") == base
    assert base != _key()
    with pytest.raises(ValueError):
        keys.derive("run-1", "send:3", "send_email", 0, version=1)
    with pytest.raises(ValueError):
        keys.derive("run-1", "send:3", "send_email", 0, version=4)


def test_v3_is_the_default_and_never_equals_a_v2_key() -> None:
    """A run admitted under v2 keeps v2; a v3 run's identity may read like a v2 one (no tool call, nothing
    nested), and its key still differs: the formats never share a key."""
    assert keys.KEY_VERSION == 3 and keys.KEY_VERSIONS == (1, 2, 3)
    v3 = keys.derive("run-1", "send:3", "send_email", 0)
    assert v3 == keys.derive("run-1", "send:3", "send_email", 0, version=3) != _v2()
    assert keys.derive("run-1", "tools:2/call:call_a", "send_email", 0) != v3


def test_step_part() -> None:
    md = {"langgraph_node": "sub", "langgraph_step": 2, "langgraph_path": ("__pregel_pull", "sub")}
    assert keys.step_part(md) == "sub:2"
    assert keys.step_part({**md, "langgraph_path": ("__pregel_push", 1, False)}) == "sub:2:push1"
    nested = ("__pregel_push", ("__pregel_pull", "fan"), 3, True)
    assert keys.step_part({**md, "langgraph_path": nested}) == "sub:2:push__pregel_pull.fan.3"
    with pytest.raises(LookupError):
        keys.step_part({})


def test_parts_are_length_prefixed() -> None:
    assert keys.derive("a:b", "c", "x", 0) != keys.derive("a", "b:c", "x", 0)
    v1 = {"version": 1, "args_hash": "h"}
    assert keys.derive("a:b", "c", "x", 0, **v1) != keys.derive("a", "b:c", "x", 0, **v1)  # type: ignore[arg-type]


def test_equal_across_hash_seeds() -> None:
    code = (
        "from agentrun_core import canonical, keys\n"
        f"args = {_ARGS!r}\n"
        "print(keys.derive('run-1', keys.StepId('send', 3), 'send_email', 0, version=1,"
        " args_hash=canonical.digest(args)))\n"
    )
    seen = set()
    for seed in ("0", "1", "12345", "random"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        seen.add(out.stdout.strip())
    assert seen == {_key()}


def test_step_from_metadata() -> None:
    md = {
        "langgraph_node": "send",
        "langgraph_step": 3,
        "langgraph_path": ("__pregel_pull", "send"),
        "langgraph_checkpoint_ns": "send:0b1e",
    }
    assert str(keys.step_from_metadata(md)) == "send:3"
    nested = {**md, "langgraph_checkpoint_ns": "outer:123|send:456"}
    assert str(keys.step_from_metadata(nested)) == "outer/send:3"
    pushed = {**md, "langgraph_path": ("__pregel_push", 2, False)}
    assert str(keys.step_from_metadata(pushed)) == "send:3:push2"
    with pytest.raises(LookupError):
        keys.step_from_metadata({})


def test_approval_id_contract() -> None:
    import hashlib

    expected = "a-" + hashlib.sha256(b"run-1:int-9").hexdigest()[:12]
    assert keys.approval_id("run-1", "int-9") == expected
