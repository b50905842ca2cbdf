"""The AgentRunSchedule CRD is generated (agentrun_core.api.schedule_crd); its template is an AgentRun
spec."""

from __future__ import annotations

import datetime
import re

import yaml

from agentrun_core import cron
from agentrun_core.api import schedule_crd, schedules, spec_schema


def test_the_checked_in_crd_is_the_rendering() -> None:
    assert schedule_crd.PATH.read_text() == schedule_crd.render(), (
        "crds/agentrun.dev_agentrunschedules.yaml is stale: run `make crd`"
    )
    assert schedule_crd.main(["--check"]) == 0


def test_the_template_spec_is_the_agentrun_spec_without_its_transition_rules() -> None:
    template = schedule_crd.SPEC["properties"]["runTemplate"]["properties"]["spec"]
    assert template["properties"] == spec_schema.SPEC["properties"]
    assert template["required"] == ["graph"]
    assert all("oldSelf" not in r["rule"] for r in template.get("x-kubernetes-validations", []))
    assert any("oldSelf" in r["rule"] for r in spec_schema.SPEC["x-kubernetes-validations"])


def _cel_regex(rule: str) -> str:
    """The regex inside ``self.matches('...')`` as RE2 sees it (CEL unescapes \\\\ to \\)."""
    found = re.fullmatch(r"self\.matches\('(.*)'\)", rule)
    assert found is not None
    return found.group(1).replace("\\\\", "\\")


def test_the_shape_rule_accepts_every_valid_cron_and_refuses_the_obviously_wrong() -> None:
    shape = re.compile(
        _cel_regex(schedule_crd.SPEC["properties"]["schedule"]["x-kubernetes-validations"][0]["rule"])
    )
    for good in ("* * * * *", "*/15 9-17 * * MON-FRI", " 0 0 1 jan,jul ? ", "@daily", "@hourly", "0 0 L * *"):
        assert shape.search(good), good
    for bad in ("* * * *", "* * * * * *", "", "hello", "0 0 * * * ; rm", "@every 5m"):
        assert not shape.search(bad), bad
    # the shape admits what only the operator can refuse: that is the InvalidSchedule condition
    assert shape.search("61 * * * *")
    assert not _valid("61 * * * *")


def _valid(expr: str) -> bool:
    try:
        cron.parse(expr)
    except cron.CronError:
        return False
    return True


def test_the_zone_rule() -> None:
    zone = re.compile(
        _cel_regex(schedule_crd.SPEC["properties"]["timeZone"]["x-kubernetes-validations"][0]["rule"])
    )
    for good in ("UTC", "Europe/Berlin", "America/Argentina/Buenos_Aires", "Etc/GMT+5"):
        assert zone.search(good), good
    for bad in ("", "../etc/passwd", "/UTC", "Europe//Berlin", "Europe/Berlin "):
        assert not zone.search(bad), bad


def test_envelope() -> None:
    doc = yaml.safe_load(schedule_crd.PATH.read_text())
    assert doc["metadata"]["name"] == "agentrunschedules.agentrun.dev"
    version = doc["spec"]["versions"][0]
    names = [c["name"] for c in version["additionalPrinterColumns"]]
    assert names[:6] == ["Schedule", "TimeZone", "Suspend", "Active", "Last Schedule", "Next"]
    rule = version["schema"]["openAPIV3Schema"]["x-kubernetes-validations"][0]["rule"]
    assert str(schedules.MAX_NAME) in rule
    # the longest schedule name still gives run names an AgentRun accepts (at most 50)
    long = "s" * schedules.MAX_NAME
    assert len(schedules.manual_run_name(long)) <= 50
    assert len(schedules.tick_run_name(long, datetime.datetime(2150, 1, 1, tzinfo=datetime.UTC))) <= 50
