"""agent_operator.act.scheduler's reading of objects (pure parts): the schedule's view, the runs it owns, and
the
AgentRun a tick creates (agentrun_core.api.schedules.run_body)."""

from __future__ import annotations

import copy
import datetime

from agent_operator.act import scheduler
from agentrun_core.api import schedules

UTC = datetime.UTC
SCHEDULE = {
    "metadata": {
        "name": "nightly",
        "namespace": "team-a",
        "uid": "u-1",
        "creationTimestamp": "2026-01-01T00:00:00Z",
    },
    "spec": {
        "schedule": "@daily",
        "runTemplate": {
            "metadata": {
                "labels": {"team": "a", schedules.LABEL_SCHEDULE: "spoofed"},
                "annotations": {"n": "1"},
            },
            "spec": {"graph": "pkg.mod:graph", "input": {"q": 1}},
        },
    },
    "status": {"lastScheduleTime": "2026-01-02T00:00:00Z"},
}


def test_view_defaults_as_the_crd_does() -> None:
    view = scheduler.view(SCHEDULE)
    assert (view.policy, view.successful_limit, view.failed_limit, view.suspend) == ("Allow", 3, 1, False)
    assert view.starting_deadline is None and view.time_zone == ""
    assert view.created == datetime.datetime(2026, 1, 1, tzinfo=UTC)
    assert view.last_schedule == datetime.datetime(2026, 1, 2, tzinfo=UTC)
    spec = {**SCHEDULE["spec"], "successfulRunsHistoryLimit": 0, "startingDeadlineSeconds": 0}  # type: ignore[dict-item]
    zero = scheduler.view({**SCHEDULE, "spec": spec})
    assert (zero.successful_limit, zero.starting_deadline) == (0, 0)


def _run(name: str, owner_uid: str, phase: str = "Running") -> dict[str, object]:
    return {
        "metadata": {
            "name": name,
            "creationTimestamp": "2026-01-02T00:00:01Z",
            "ownerReferences": [{"kind": "AgentRunSchedule", "name": "nightly", "uid": owner_uid}],
        },
        "spec": {"cancel": True},
        "status": {"phase": phase, "completionTime": "2026-01-02T00:05:00Z"},
    }


def test_owned_are_the_runs_of_this_schedule_not_of_an_earlier_one_of_the_same_name() -> None:
    found = scheduler.owned(SCHEDULE, [_run("mine", "u-1", "Succeeded"), _run("old", "u-0")])
    assert [r.name for r in found] == ["mine"]
    assert found[0].phase == "Succeeded" and found[0].cancel_requested and not found[0].active
    assert found[0].finished == datetime.datetime(2026, 1, 2, 0, 5, tzinfo=UTC)


def test_the_run_of_a_tick() -> None:
    tick = datetime.datetime(2026, 1, 3, tzinfo=UTC)
    body = schedules.run_body(SCHEDULE, schedules.tick_run_name("nightly", tick), tick)
    meta = body["metadata"]
    assert meta["name"] == "nightly-29456640" and meta["namespace"] == "team-a"
    # the schedule's own label wins over a template that tries to claim another schedule
    assert meta["labels"] == {"team": "a", schedules.LABEL_SCHEDULE: "nightly"}
    assert meta["annotations"] == {"n": "1", schedules.ANN_SCHEDULED_AT: "2026-01-03T00:00:00Z"}
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "agentrun.dev/v1alpha1",
            "kind": "AgentRunSchedule",
            "name": "nightly",
            "uid": "u-1",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert body["spec"] == {"graph": "pkg.mod:graph", "input": {"q": 1}}
    body["spec"]["input"]["q"] = 2  # a copy: the template is not touched
    assert SCHEDULE["spec"]["runTemplate"]["spec"]["input"] == {"q": 1}  # type: ignore[index]
    manual = schedules.run_body(SCHEDULE, schedules.manual_run_name("nightly"), None)
    assert manual["metadata"]["annotations"][schedules.ANN_TRIGGERED_BY] == "manual"
    assert schedules.ANN_SCHEDULED_AT not in manual["metadata"]["annotations"]
    assert manual["metadata"]["name"].startswith("nightly-manual-") and len(manual["metadata"]["name"]) == 19


def test_a_ticks_run_carries_the_schedules_stamped_author_and_a_manual_run_none() -> None:
    """The author is the schedule's stamp (written by the API server), never the template's text; only the
    operator's tick carries it (the API server lets nobody else write it on a run)."""
    tick = datetime.datetime(2026, 1, 3, tzinfo=UTC)
    stamped = copy.deepcopy(SCHEDULE)
    stamped["metadata"]["annotations"] = {schedules.ANN_AUTHOR: "carol"}  # type: ignore[index]
    stamped["spec"]["runTemplate"]["metadata"]["annotations"] = {schedules.ANN_AUTHOR: "forged"}  # type: ignore[index]
    body = schedules.run_body(stamped, schedules.tick_run_name("nightly", tick), tick)
    assert body["metadata"]["annotations"][schedules.ANN_AUTHOR] == "carol"
    manual = schedules.run_body(stamped, schedules.manual_run_name("nightly"), None)
    assert schedules.ANN_AUTHOR not in manual["metadata"]["annotations"]
    unstamped = copy.deepcopy(SCHEDULE)
    unstamped["spec"]["runTemplate"]["metadata"]["annotations"] = {schedules.ANN_AUTHOR: "forged"}  # type: ignore[index]
    body = schedules.run_body(unstamped, schedules.tick_run_name("nightly", tick), tick)
    assert schedules.ANN_AUTHOR not in body["metadata"]["annotations"]
