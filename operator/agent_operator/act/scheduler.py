"""The AgentRunSchedule reconciler's I/O: read the schedule and its runs, act on ``schedule_plan.decide``.

One reconcile: list the runs the schedule owns (label ``agentrun.dev/schedule``, and its uid among their
ownerReferences), decide, then act in an order a crash anywhere cannot turn into a second run of a tick:

1. cancel (Replace) - a patch of ``spec.cancel``, as ``agentrun cancel``;
2. create the tick's run, named for the tick: AlreadyExists means an earlier reconcile (this process before
   a crash, or another replica) created it, and that is success;
3. delete runs past the history limits;
4. write ``status`` (lastScheduleTime last: until it is written, the next reconcile finds the run by name).

The clock is the operator's wall clock plus ``AGENTRUN_SCHEDULE_CLOCK_OFFSET_SECONDS`` (0; tests move it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import logging
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from agent_operator.decide import schedule_plan
from agentrun_core import faults, kube
from agentrun_core.api import meta
from agentrun_core.api import schedules as names

logger = logging.getLogger(__name__)
TIMEOUT = 10.0
COMPONENT = "agentrun-operator"
POSTED_LIMIT = 10_000


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def view(body: Mapping[str, Any]) -> schedule_plan.View:
    metadata, spec, status = body.get("metadata") or {}, body.get("spec") or {}, body.get("status") or {}
    created = names.parse_time(metadata.get("creationTimestamp")) or datetime.datetime.now(datetime.UTC)
    successful, failed = (
        _int(spec.get("successfulRunsHistoryLimit")),
        _int(spec.get("failedRunsHistoryLimit")),
    )
    return schedule_plan.View(
        name=str(metadata.get("name") or ""),
        schedule=str(spec.get("schedule") or ""),
        created=created,
        time_zone=str(spec.get("timeZone") or ""),
        policy=str(spec.get("concurrencyPolicy") or "Allow"),
        starting_deadline=_int(spec.get("startingDeadlineSeconds")),
        successful_limit=3 if successful is None else successful,
        failed_limit=1 if failed is None else failed,
        suspend=bool(spec.get("suspend")),
        last_schedule=names.parse_time(status.get("lastScheduleTime")),
        last_skipped=names.parse_time(status.get("lastSkippedTime")),
        last_successful=names.parse_time(status.get("lastSuccessfulTime")),
    )


def owned(body: Mapping[str, Any], runs: list[kube.Body]) -> list[schedule_plan.OwnedRun]:
    """The runs among ``runs`` this schedule (this uid, not an earlier one of the same name) owns."""
    uid = (body.get("metadata") or {}).get("uid")
    out: list[schedule_plan.OwnedRun] = []
    for run in runs:
        metadata, status = run.get("metadata") or {}, run.get("status") or {}
        if not any(ref.get("uid") == uid for ref in metadata.get("ownerReferences") or ()):
            continue
        out.append(
            schedule_plan.OwnedRun(
                name=str(metadata.get("name")),
                phase=str(status.get("phase") or ""),
                created=names.parse_time(metadata.get("creationTimestamp"))
                or datetime.datetime.now(datetime.UTC),
                finished=names.parse_time(status.get("completionTime")),
                cancel_requested=bool((run.get("spec") or {}).get("cancel")),
            )
        )
    return out


@dataclasses.dataclass
class Scheduler:
    api: kube.ApiClient
    clock_offset_seconds: float = 0.0
    now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC)
    # Events posted by this process (a waiting tick is looked at often: say so once); the oldest go first.
    posted: dict[tuple[str, str], None] = dataclasses.field(default_factory=dict)
    me: str = ""  # this process's own username (creator), once a SelfSubjectReview has said it

    def creator(self) -> str:
        """The operator's own username: the created-by a VAP-only install (Kubernetes 1.34/1.35,
        deploy/admission-vap-only) requires of every AgentRun created; where a MutatingAdmissionPolicy
        stamps it, it writes this same name. "" when the API server cannot say (no stamp then)."""
        if not self.me:
            with contextlib.suppress(kube.KubeError):
                review = kube.objects.whoami(self.api, timeout=TIMEOUT)
                self.me = str(((review.get("status") or {}).get("userInfo") or {}).get("username") or "")
        return self.me

    def clock(self) -> datetime.datetime:
        return self.now() + datetime.timedelta(seconds=self.clock_offset_seconds)

    def reconcile(self, body: Mapping[str, Any]) -> float:
        """One look at the schedule; returns the seconds until the next look is due."""
        metadata = body.get("metadata") or {}
        namespace, name = str(metadata.get("namespace")), str(metadata.get("name"))
        if metadata.get("deletionTimestamp"):
            return schedule_plan.MAX_SLEEP_SECONDS  # the garbage collector deletes its runs
        listing = kube.runs.listing(
            self.api, namespace, label_selector=f"{names.LABEL_SCHEDULE}={name}", timeout=TIMEOUT
        )
        now = self.clock()
        decision = schedule_plan.decide(view(body), now, owned(body, listing.get("items") or []))
        for event in decision.events:
            self._event(body, event.type, event.reason, event.message, event.key)
        for run in decision.cancel:
            with contextlib.suppress(kube.NotFound):
                kube.runs.patch(self.api, namespace, run, {"spec": {"cancel": True}}, timeout=TIMEOUT)
            self._event(body, "Normal", "CancelledRun", f"cancelled {run} (concurrencyPolicy Replace)", run)
        if decision.create and decision.tick:
            self._create(body, decision.create, decision.tick)
        for run in decision.delete:
            with contextlib.suppress(kube.NotFound):
                kube.runs.delete(self.api, namespace, run, timeout=TIMEOUT)
        self._status(body, decision)
        return decision.wake_after

    def _create(self, body: Mapping[str, Any], run: str, tick: datetime.datetime) -> None:
        namespace = str((body.get("metadata") or {}).get("namespace"))
        try:
            # With the schedule's author (names.ANN_AUTHOR), which the API server takes on a run only from
            # a holder of the RBAC verb `tick` on agentrunschedules: this operator.
            created = names.run_body(body, run, tick)
            if self.creator():
                metadata = created.setdefault("metadata", {})
                annotations = metadata.get("annotations") or {}
                metadata["annotations"] = {**annotations, meta.CREATED_BY: self.creator()}
            kube.runs.create(self.api, namespace, created, timeout=TIMEOUT)
        except kube.AlreadyExists:
            logger.info("run %s/%s of tick %s exists already: recorded", namespace, run, names.rfc3339(tick))
            return
        except kube.KubeError as exc:
            if exc.status in (400, 403, 422):  # refused for good (template, admission): say so, retry later
                self._event(body, "Warning", "FailedCreate", f"{run}: {exc.detail}", f"failed:{run}")
            raise
        faults.hit("schedule_after_create")
        self._event(body, "Normal", "SuccessfulCreate", f"created {run} for tick {names.rfc3339(tick)}", run)

    def _status(self, body: Mapping[str, Any], d: schedule_plan.Decision) -> None:
        metadata, status = body.get("metadata") or {}, dict(body.get("status") or {})
        patch: dict[str, Any] = {
            "observedGeneration": metadata.get("generation"),
            "active": [{"name": n} for n in d.active],
            "activeCount": len(d.active),
            "nextScheduleTime": names.rfc3339(d.next_tick) if d.next_tick and not d.invalid else None,
        }
        if d.record:
            patch["lastScheduleTime"] = names.rfc3339(d.record)
        if d.skipped:
            patch["lastSkippedTime"] = names.rfc3339(d.skipped)
        if d.last_successful:
            patch["lastSuccessfulTime"] = names.rfc3339(d.last_successful)
        ready = (
            {"status": "False", "reason": "InvalidSchedule", "message": d.invalid}
            if d.invalid
            else {"status": "True", "reason": "Scheduled", "message": "ticks are computed and runs started"}
        )
        old: Mapping[str, Any] = next(
            (c for c in status.get("conditions") or () if c.get("type") == "Ready"), {}
        )
        same = all(old.get(k) == v for k, v in ready.items())
        when = old.get("lastTransitionTime") if same else names.rfc3339(datetime.datetime.now(datetime.UTC))
        patch["conditions"] = [
            {
                "type": "Ready",
                **ready,
                "observedGeneration": metadata.get("generation"),
                "lastTransitionTime": when,
            }
        ]
        if all(status.get(k) == v for k, v in patch.items()):
            return
        with contextlib.suppress(kube.NotFound):
            kube.schedules.patch_status(
                self.api,
                str(metadata.get("namespace")),
                str(metadata.get("name")),
                {"status": patch},
                timeout=TIMEOUT,
            )

    def _event(self, body: Mapping[str, Any], type_: str, reason: str, message: str, key: str) -> None:
        metadata = body.get("metadata") or {}
        uid = str(metadata.get("uid"))
        if (uid, f"{reason}:{key}") in self.posted:
            return
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event: kube.Body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{metadata.get('name')}.{uuid.uuid4().hex[:16]}",
                "namespace": metadata.get("namespace"),
            },
            "involvedObject": {
                "apiVersion": names.API_VERSION,
                "kind": names.KIND,
                "name": metadata.get("name"),
                "namespace": metadata.get("namespace"),
                "uid": uid,
            },
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": COMPONENT,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            kube.objects.create_event(self.api, str(metadata.get("namespace")), event, timeout=TIMEOUT)
        except kube.KubeError as exc:  # an Event is a courtesy: never a reason to fail the reconcile
            logger.warning("event %s on schedule %s not posted: %s", reason, metadata.get("name"), exc)
            return
        self.posted[(uid, f"{reason}:{key}")] = None
        while len(self.posted) > POSTED_LIMIT:
            del self.posted[next(iter(self.posted))]
