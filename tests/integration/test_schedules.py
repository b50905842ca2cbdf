"""AgentRunSchedules on the real API server, with the real operator (issue 39, Schedules).

Time: the operator ticks by its wall clock plus AGENTRUN_SCHEDULE_CLOCK_OFFSET_SECONDS. Each test picks a
tick B (a minute boundary about two hours ahead; the schedule fires only at that minute of the day) and an
offset that puts the operator ``LEAD`` seconds before B when it starts: the tick comes in seconds of real
time, and the operator decides everything else (which tick is due, the run's name, late or not) from its own
clock, as in production. The runs' workers are stand-ins that sleep (their graphs never matter here).
"""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from agentrun_core.api import schedules
from tests.support.kube import events, get_run, kubectl
from tests.support.operator_proc import REPO, OperatorHandle, Operators
from tests.support.waiting import wait_for, wait_phase

GROUP, VERSION, PLURAL = "agentrun.dev", "v1alpha1", "agentrunschedules"
UTC = datetime.UTC
SLEEPER = {
    "graph": "pkg.mod:graph",
    "worker": {"command": ["python", "-c", "import time; time.sleep(600)"]},
}
LEAD = 20.0  # seconds of real time from the operator's start to the tick: its start-up fits in them


def clock(lead: float = LEAD, late: float = 0.0) -> tuple[dict[str, str], datetime.datetime, float]:
    """(operator env, the tick B, the real time.time() at which the operator's clock reads B). ``late``: the
    operator starts that many seconds after B instead (it was down across the tick)."""
    now = time.time()
    b = (int(now + 7200) // 60 + 1) * 60
    while datetime.datetime.fromtimestamp(b, UTC).minute == 59:  # keep B+1min in the same hour
        b += 60
    start_reads = b - lead + late
    offset = start_reads - now
    env = {"AGENTRUN_SCHEDULE_CLOCK_OFFSET_SECONDS": f"{offset:.3f}"}
    return env, datetime.datetime.fromtimestamp(b, UTC), b - offset


def cron_at(*ticks: datetime.datetime) -> str:
    """The expression firing at these minutes (same hour) of every day, in UTC."""
    return f"{','.join(str(t.minute) for t in ticks)} {ticks[0].hour} * * *"


def custom(api: kubernetes.client.ApiClient) -> kubernetes.client.CustomObjectsApi:
    return kubernetes.client.CustomObjectsApi(api)


def create_schedule(api: kubernetes.client.ApiClient, ns: str, name: str, **spec: Any) -> dict[str, Any]:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "AgentRunSchedule",
        "metadata": {"name": name},
        "spec": {"runTemplate": {"spec": SLEEPER}, **spec},
    }
    result: dict[str, Any] = custom(api).create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)
    return result


def get_schedule(api: kubernetes.client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    result: dict[str, Any] = custom(api).get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
    return result


def runs_of(api: kubernetes.client.ApiClient, ns: str, schedule: str) -> dict[str, dict[str, Any]]:
    found = custom(api).list_namespaced_custom_object(
        GROUP, VERSION, ns, "agentruns", label_selector=f"{schedules.LABEL_SCHEDULE}={schedule}"
    )
    return {r["metadata"]["name"]: r for r in found["items"]}


def created_at(run: dict[str, Any]) -> float:
    return datetime.datetime.fromisoformat(
        run["metadata"]["creationTimestamp"].replace("Z", "+00:00")
    ).timestamp()


def reasons(api: kubernetes.client.ApiClient, ns: str, name: str) -> list[str]:
    return [f"{e.reason}: {e.message}" for e in events(api, ns, name)]


def cli(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    code = "import sys; from agentrun import cli; sys.exit(cli.main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60, env=env, cwd=REPO
    )


def trigger(kubeconfig: Path, ns: str, name: str) -> str:
    done = cli(kubeconfig, "schedule", "trigger", name, "-n", ns)
    assert done.returncode == 0, done.stderr
    run = done.stdout.split()[0].removeprefix("agentrun/")
    assert run.startswith(f"{name}-manual-"), done.stdout
    return run


@pytest.fixture
def ops(operators: Operators) -> OperatorHandle:
    """Operator replicas of the test's own, started by the test (with its clock)."""
    return operators()


def test_ticks_at_their_times_and_a_manual_trigger(
    kube: kubernetes.client.ApiClient, ops: OperatorHandle, admin_kubeconfig: Path
) -> None:
    ns = ops.namespace
    env, b, b_real = clock()
    b2 = b + datetime.timedelta(minutes=1)
    sched = create_schedule(
        kube,
        ns,
        "every",
        schedule=cron_at(b, b2),
        runTemplate={"metadata": {"labels": {"team": "a"}, "annotations": {"note": "x"}}, "spec": SLEEPER},
    )
    ops.start(extra_env=env)
    ops.wait_leader(kube, timeout=60)
    first, second = schedules.tick_run_name("every", b), schedules.tick_run_name("every", b2)
    wait_for(lambda: first in runs_of(kube, ns, "every"), LEAD + 60, f"run {first}")
    run = get_run(kube, ns, first)
    # never early: created at or after the real moment the operator's clock read B (seconds resolution)
    assert created_at(run) >= int(b_real) - 1, (created_at(run), b_real)
    assert run["metadata"]["annotations"][schedules.ANN_SCHEDULED_AT] == schedules.rfc3339(b)
    assert run["metadata"]["annotations"]["note"] == "x"
    assert run["metadata"]["labels"] == {"team": "a", schedules.LABEL_SCHEDULE: "every"}
    owner = run["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == (
        "AgentRunSchedule",
        sched["metadata"]["uid"],
        True,
    )
    assert run["spec"]["worker"] == SLEEPER["worker"]

    def recorded(tick: datetime.datetime) -> dict[str, Any] | None:
        status = get_schedule(kube, ns, "every").get("status") or {}
        return status if status.get("lastScheduleTime") == schedules.rfc3339(tick) else None

    status = wait_for(lambda: recorded(b), 30, "lastScheduleTime = B")
    assert status["nextScheduleTime"] == schedules.rfc3339(b2)
    if time.time() < b_real + 59:  # (on a machine slow enough to be past B + 1 min, the check below says it)
        assert set(runs_of(kube, ns, "every")) == {first}  # the minute between the ticks starts nothing
    wait_for(lambda: second in runs_of(kube, ns, "every"), 60 + 60, f"run {second}")
    assert created_at(get_run(kube, ns, second)) >= int(b_real + 60) - 1
    status = wait_for(lambda: recorded(b2), 30, "lastScheduleTime = B + 1 min")
    assert status["nextScheduleTime"] == schedules.rfc3339(b + datetime.timedelta(days=1))
    # a manual tick: kubectl agentrun schedule trigger
    manual = trigger(admin_kubeconfig, ns, "every")
    body = get_run(kube, ns, manual)
    assert body["metadata"]["annotations"][schedules.ANN_TRIGGERED_BY] == "manual"
    assert body["metadata"]["ownerReferences"][0]["uid"] == sched["metadata"]["uid"]
    assert set(runs_of(kube, ns, "every")) == {first, second, manual}
    wait_for(
        lambda: (get_schedule(kube, ns, "every").get("status") or {}).get("activeCount") == 3, 30, "3 active"
    )
    shown = kubectl(admin_kubeconfig, "get", "agentrunschedules", "-n", ns)
    assert shown.returncode == 0, shown.stderr
    header, line = shown.stdout.splitlines()[:2]
    assert header.split()[:6] == ["NAME", "SCHEDULE", "SUSPEND", "ACTIVE", "LAST", "SCHEDULE"], header
    assert (
        cron_at(b, b2) in line and " 3 " in line and schedules.rfc3339(b + datetime.timedelta(days=1)) in line
    )
    listed = cli(admin_kubeconfig, "schedule", "list", "-n", ns)
    assert listed.returncode == 0 and "every" in listed.stdout, listed.stderr
    missing = cli(admin_kubeconfig, "schedule", "trigger", "nosuch", "-n", ns)
    assert missing.returncode == 1
    assert f'AgentRunSchedule "nosuch" not found in namespace "{ns}"' in missing.stderr


def test_forbid_waits_and_replace_cancels(
    kube: kubernetes.client.ApiClient, ops: OperatorHandle, admin_kubeconfig: Path
) -> None:
    ns = ops.namespace
    env, b, b_real = clock(lead=LEAD + 10)
    create_schedule(kube, ns, "forbid", schedule=cron_at(b), concurrencyPolicy="Forbid")
    create_schedule(kube, ns, "replace", schedule=cron_at(b), concurrencyPolicy="Replace")
    busy_f, busy_r = trigger(admin_kubeconfig, ns, "forbid"), trigger(admin_kubeconfig, ns, "replace")
    ops.start(extra_env=env)
    ops.wait_leader(kube, timeout=60)
    # the manual runs are active when the tick comes (admitted, starting or running: which does not matter)
    tick_r, tick_f = schedules.tick_run_name("replace", b), schedules.tick_run_name("forbid", b)
    # Replace: the running run is cancelled (as agentrun cancel does) and the tick's run starts
    wait_for(lambda: tick_r in runs_of(kube, ns, "replace"), LEAD + 70, f"run {tick_r}")
    assert get_run(kube, ns, busy_r)["spec"].get("cancel") is True
    wait_phase(kube, ns, busy_r, "Cancelled", 60, ops)
    assert set(runs_of(kube, ns, "replace")) == {busy_r, tick_r}
    # Forbid: the tick waits while the manual run is active; the schedule says why
    wait_for(
        lambda: any(r.startswith("RunAlreadyActive") for r in reasons(kube, ns, "forbid")),
        30,
        "RunAlreadyActive event",
    )
    assert time.time() >= b_real
    assert set(runs_of(kube, ns, "forbid")) == {busy_f}
    assert (get_schedule(kube, ns, "forbid").get("status") or {}).get("lastScheduleTime") is None
    # ...and starts once it ended (no startingDeadlineSeconds: late, as a CronJob's Forbid tick does)
    done = cli(admin_kubeconfig, "cancel", busy_f, "-n", ns)
    assert done.returncode == 0, done.stderr
    ended = wait_phase(kube, ns, busy_f, "Cancelled", 60, ops)
    wait_for(lambda: tick_f in runs_of(kube, ns, "forbid"), 60, f"run {tick_f}")
    finished = datetime.datetime.fromisoformat(ended["completionTime"].replace("Z", "+00:00")).timestamp()
    assert created_at(get_run(kube, ns, tick_f)) >= int(finished) - 1
    assert set(runs_of(kube, ns, "forbid")) == {busy_f, tick_f}
    # history: with failedRunsHistoryLimit 0 the cancelled run goes, the running one stays
    custom(kube).patch_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, "replace", {"spec": {"failedRunsHistoryLimit": 0}}
    )
    wait_for(
        lambda: set(runs_of(kube, ns, "replace")) == {tick_r}, 60, f"{busy_r} deleted by the history limit"
    )


def test_missed_tick_past_its_deadline_is_skipped_and_bad_schedules_refused(
    kube: kubernetes.client.ApiClient, ops: OperatorHandle
) -> None:
    ns = ops.namespace
    # What CEL can tell is refused by the API server, with the field's message.
    for name, spec, says in [
        ("shape", {"schedule": "0 0 * *"}, "must be 5 cron fields"),
        ("zone", {"schedule": "@daily", "timeZone": "../etc/passwd"}, "IANA time zone"),
        ("policy", {"schedule": "@daily", "concurrencyPolicy": "Sometimes"}, "Unsupported value"),
        (
            "deadline",
            {"schedule": "@daily", "startingDeadlineSeconds": -1},
            "should be greater than or equal to 0",
        ),
        ("s" * 39, {"schedule": "@daily"}, "at most 38 characters"),
    ]:
        with pytest.raises(kubernetes.client.ApiException) as info:
            create_schedule(kube, ns, name, **spec)
        assert info.value.status == 422 and says in str(info.value.body), (name, info.value.body)
    with pytest.raises(kubernetes.client.ApiException) as info:
        create_schedule(kube, ns, "template", schedule="@daily", runTemplate={"spec": {"graph": "no"}})
    assert info.value.status == 422 and "package.module:attribute" in str(info.value.body)

    env, b, _ = clock(late=40.0)  # the operator was down across B and comes back 40 s after it
    create_schedule(kube, ns, "strict", schedule=cron_at(b), startingDeadlineSeconds=20)
    create_schedule(kube, ns, "lenient", schedule=cron_at(b), startingDeadlineSeconds=300)
    # What only the operator can tell: a condition and a Warning, and nothing starts.
    create_schedule(kube, ns, "range", schedule="61 * * * *")
    create_schedule(kube, ns, "mars", schedule="@hourly", timeZone="Mars/Olympus_Mons")
    ops.start(extra_env=env)
    ops.wait_leader(kube, timeout=60)
    late = schedules.tick_run_name("lenient", b)
    wait_for(lambda: late in runs_of(kube, ns, "lenient"), 60, f"late run {late}")

    def skipped() -> dict[str, Any] | None:
        status = get_schedule(kube, ns, "strict").get("status") or {}
        return status if status.get("lastSkippedTime") == schedules.rfc3339(b) else None

    status = wait_for(skipped, 60, "strict: lastSkippedTime = B")
    assert "lastScheduleTime" not in status
    assert runs_of(kube, ns, "strict") == {}
    wait_for(
        lambda: any("past startingDeadlineSeconds 20" in r for r in reasons(kube, ns, "strict")),
        30,
        "Warning",
    )
    for name, says in (("range", "minute field: 61 is out of range"), ("mars", "not an IANA time zone")):

        def refused(name: str = name) -> dict[str, Any] | None:
            conds = (get_schedule(kube, ns, name).get("status") or {}).get("conditions") or []
            return next((c for c in conds if c["type"] == "Ready" and c["status"] == "False"), None)

        cond = wait_for(refused, 60, f"{name}: Ready=False")
        assert cond["reason"] == "InvalidSchedule" and says in cond["message"]
        assert any(r.startswith("InvalidSchedule") for r in reasons(kube, ns, name))
        assert runs_of(kube, ns, name) == {}


def test_killed_as_it_creates_the_run_one_run_per_tick(
    kube: kubernetes.client.ApiClient, ops: OperatorHandle
) -> None:
    """The leader SIGKILLs itself right after creating the tick's run, before the schedule's status records
    it; the standby replica takes over, then a restarted one: the tick has exactly one run."""
    ns = ops.namespace
    ops.env["AGENTRUN_LEADER_DURATION_SECONDS"] = "8"
    env, b, _ = clock(lead=LEAD + 10)
    create_schedule(kube, ns, "once", schedule=cron_at(b), startingDeadlineSeconds=300)
    first = ops.start("doomed", extra_env={**env, "AGENTRUN_FAULT_POINTS": "schedule_after_create"})
    ops.wait_leader(kube, timeout=60)
    ops.start("standby", extra_env=env)
    tick = schedules.tick_run_name("once", b)
    wait_for(lambda: not first.alive(), LEAD + 70, "the leader killed at schedule_after_create")
    assert "fault point schedule_after_create hit #1: SIGKILL" in first.logs()
    assert set(runs_of(kube, ns, "once")) == {tick}
    assert "lastScheduleTime" not in (get_schedule(kube, ns, "once").get("status") or {})
    ops.wait_leader(kube, timeout=60, not_="doomed")

    def recorded() -> bool:
        status = get_schedule(kube, ns, "once").get("status") or {}
        return status.get("lastScheduleTime") == schedules.rfc3339(b)

    wait_for(recorded, 60, "the standby records the tick")
    assert set(runs_of(kube, ns, "once")) == {tick}
    # a hard restart of the new leader: its successor looks at the schedule again and creates nothing
    ops.kill(ops.replica("standby"))
    ops.start("restarted", extra_env=env)
    ops.wait_leader(kube, timeout=60, not_="standby")
    custom(kube).patch_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, "once", {"spec": {"successfulRunsHistoryLimit": 5}}
    )
    generation = get_schedule(kube, ns, "once")["metadata"]["generation"]
    wait_for(
        lambda: (get_schedule(kube, ns, "once").get("status") or {}).get("observedGeneration") == generation,
        60,
        "the restarted operator reconciled the schedule",
    )
    assert set(runs_of(kube, ns, "once")) == {tick}
    assert [r for r in reasons(kube, ns, "once") if r.startswith("SuccessfulCreate")] == []  # died before it
