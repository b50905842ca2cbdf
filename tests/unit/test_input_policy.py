"""The checked-in admission policy is the generator's output for the operator's own bounds (one source
for the documented numbers: ``agent_operator.decide.phases``)."""

from __future__ import annotations

from agentrun_core.api import limits
from agentrun_dev import input_policy


def test_checked_in_policy_is_generated_from_the_operators_bounds() -> None:
    assert input_policy.PATH.read_text() == input_policy.render(), (
        "deploy/admission/input-limits-policy.yaml is stale: run `python -m agentrun_dev.input_policy`"
    )
    text = input_policy.render()
    assert f"size(variables.l{limits.INPUT_MAX_DEPTH + 1}) == 0" in text
    assert f"<= {limits.INPUT_MAX_BYTES}" in text
    assert f"name: l{limits.INPUT_MAX_DEPTH + 2}" not in text
