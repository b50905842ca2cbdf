"""The admission policies are rendered from their templates and the API's values
(agentrun_core.api.policygen): the checked-in files are current, a changed value or a hand edit makes them
stale, and the CEL names what the CLI and the operator use."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from agent_operator.decide import admission
from agentrun_core.api import limits, meta, policygen
from agentrun_core.api import status as api_status

EDITS = policygen.TEMPLATES / "admission" / "edits-policy.yaml"
STEER = policygen.TEMPLATES / "admission" / "steer-validating-policy.yaml"


def _policy(text: str, kind: str = "ValidatingAdmissionPolicy") -> dict:
    return next(d for d in yaml.safe_load_all(text) if d and d["kind"] == kind)


def test_the_checked_in_policies_are_current() -> None:
    assert len(policygen.templates()) >= 7  # six policy files and the VAP-only component
    assert policygen.stale() == [], "run: python -m agentrun_core.api.policygen (make policies)"
    assert policygen.main(["--check"]) == 0


def test_a_hand_edit_or_a_missing_file_is_stale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(policygen.OUT, tmp_path, dirs_exist_ok=True)
    monkeypatch.setattr(policygen, "OUT", tmp_path)
    assert policygen.stale() == []
    edited = tmp_path / "admission" / "edits-policy.yaml"
    edited.write_text(edited.read_text().replace("<= 16384", "<= 20000"))
    gone = tmp_path / "components" / "admission-vap-only" / "kustomization.yaml"
    gone.unlink()
    assert policygen.stale() == [edited, gone]
    assert policygen.main(["--check"]) == 1
    assert policygen.main([]) == 0 and policygen.stale() == []


def test_a_changed_value_changes_the_policy_and_its_fingerprint(monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = _policy(policygen.render(EDITS))
    monkeypatch.setattr(limits, "EDIT_MAX_CHARS", 100)
    changed = _policy(policygen.render(EDITS))
    assert any("<= 100)" in v["expression"] for v in changed["spec"]["validations"])
    assert policygen.output(EDITS) in policygen.stale()
    # The operator would refuse steering with it until agent_operator.decide.admission is re-fingerprinted.
    key = ("validatingadmissionpolicies", "agentrun-decision-payload")
    assert admission.problem(*key, shipped) is None
    assert admission.problem(*key, changed) == admission.DIFFERS


def test_the_cel_names_what_the_cli_and_the_operator_use() -> None:
    # The CLI and the operator read these same values from agentrun_core.api (no copies: test_vocabulary).
    payload = _policy(policygen.output(EDITS).read_text())
    cel = " ".join(v["expression"] for v in payload["spec"]["validations"])
    cel += " ".join(v["expression"] for v in payload["spec"]["variables"])
    assert f"k.startsWith('{meta.EDIT_PREFIX}')" in cel
    assert f"k.substring({len(meta.EDIT_PREFIX)})" in cel
    assert f"size(variables.editKeys) <= {limits.EDIT_MAX_FIELDS}" in cel
    assert f"<= {limits.EDIT_MAX_CHARS})" in cel
    assert f"<= {limits.RESPONSE_MAX_CHARS})" in cel
    assert f"'{meta.DECISIONS}'" in cel and f"<= {limits.DECISIONS_MAX_CHARS}" in cel
    steer = _policy(policygen.output(STEER).read_text())
    cel = " ".join(v["expression"] for v in steer["spec"]["validations"])
    assert f"<= {limits.RESOLVE_RESULT_MAX_BYTES}" in cel
    assert f"in ['{api_status.FAILED}', '{api_status.CANCELLED}']" in cel
    assert tuple(api_status.RETRYABLE_PHASES) == (api_status.FAILED, api_status.CANCELLED)


def test_placeholders() -> None:
    assert (
        policygen.render_text("x {{meta.APPROVE}} {{ len(meta.EDIT_PREFIX) }}") == "x agentrun.dev/approve 18"
    )
    assert policygen.render_text("{{status.RETRYABLE_PHASES}} <= {{limits.EDIT_MAX_FIELDS}}") == (
        "['Failed', 'Cancelled'] <= 16"
    )
    for bad in ("{{meta.NOPE}}", "{{other.APPROVE}}", "{{meta.approve}}", "{{len(limits.EDIT_MAX_FIELDS)}}"):
        with pytest.raises(policygen.TemplateError):
            policygen.render_text(f"a: {bad}\n")
