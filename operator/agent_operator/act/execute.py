"""Carry out a plan's actions, one at a time, in order: the Kubernetes calls and the SQL of a reconcile.

Rule: every action is idempotent (deterministic Pod names, exactly-once decisions in Postgres, deletes of
missing objects are no-ops); when one fails, the runner stops and the next reconcile decides again. An object
of the run's name that belongs to an earlier run of the same name (``memory.owned``) is never taken for the
run's own. Only Postgres knows whether a decision, retry or resolve applied: the Event says what it said.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from agent_operator import kube
from agent_operator import settings as settings_
from agent_operator.act import tenants
from agent_operator.decide import actions, edits, forks, model, pods, steering
from agent_operator.observe import memory as memory_
from agent_operator.observe import metrics
from agentrun_core import store
from agentrun_core.api import meta as api_meta
from agentrun_core.api import protocol
from agentrun_core.store import connect

logger = logging.getLogger(__name__)


def spec_hash(spec: model.RunSpec) -> str:
    doc = {"graph": spec.graph, "input": spec.input, "durability": spec.durability}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:32]



class Unstorable(Exception):
    """The run's admission row cannot be stored, and never will be (the same spec, the same refusal)."""


class StaleObject(kube.KubeError):
    """A Pod or Lease of the name this run needs belongs to an earlier run of the same name."""


@dataclasses.dataclass(eq=False)  # one per process, compared by identity
class Executor:
    """Carries out actions for one process; ``event`` posts an Event (never fails a reconcile)."""

    settings: settings_.Settings
    api: kube.ApiClient
    db: store.Conn
    tenants: tenants.Tenants
    event: Callable[[model.RunRef, actions.Event], None]

    def do(self, world: model.World, action: actions.Action, memory: memory_.RunMemory) -> None:
        run = world.run
        ns, name = run.namespace, run.name
        match action:
            case actions.AddFinalizer():
                kube.add_finalizer(self.api, ns, name, run.finalizers, run.resource_version)
            case actions.Admit():
                self._admit(world, action)
            case actions.CreatePod():
                self._create_pod(world, action, memory)
            case actions.CleanupPod(name=pod, reason=why):
                logger.info("%s/%s: deleting finished worker Pod %s (%s)", ns, name, pod, why)
                kube.delete_pod(self.api, ns, pod)
                kube.release_pod(self.api, ns, pod)  # terminated, its outcome on record: nothing to hold
            case actions.DeletePod(name=pod, force=force):
                kube.delete_pod(self.api, ns, pod, force=force)
                if memory.lost_at is None:
                    memory.lost_at = time.monotonic()
            case actions.FreeLapsedLease(holder=holder):
                self._free_lapsed_lease(run, holder, memory)
            case actions.RecordLoss(attempt=attempt, reason=reason, message=message, control_plane=cp):
                store.record_attempt_loss(
                    self.db, run_id=run.uid, attempt=attempt, detail=f"{reason}: {message}", control_plane=cp
                )
            case actions.Decide():
                self._decide(run, action)
            case actions.CancelRun(reason=reason):
                store.cancel_run(self.db, run.uid, reason)
            case actions.ExpireRun(reason=reason, message=message):
                # A worker that finished first keeps its outcome. The Event is the Failed phase's own
                # (run_status.transition_events), posted once the status shows it.
                store.expire_run(self.db, run.uid, reason, message)
            case actions.SetReadOnly():
                store.set_read_only(self.db, run.uid, True)
            case actions.RemoveDecisionAnnotations():
                payload = edits.payload_annotations(run.annotations)
                self._remove_annotations(run, memory, (*api_meta.DECISION_ANNOTATIONS, *payload))
            case actions.PinImage(ref=ref, digest=digest, generation=generation):
                store.pin_image(self.db, run_id=run.uid, image=ref, digest=digest, generation=generation)
            case actions.ReopenRun():
                self._reopen(run, action)
            case actions.ResolveEffect():
                self._resolve(run, action)
            case actions.RemoveResolveAnnotations():
                self._remove_annotations(run, memory, api_meta.RESOLVE_ANNOTATIONS)
            case actions.DeleteRun():
                # TTL. Its rows are marked for purge by the finalizer (handlers.run_deleted), never here: a
                # delete that is refused or fails leaves the run and its ledger as they are.
                kube.delete_run(self.api, ns, name)

    def _remove_annotations(self, run: model.RunRef, memory: memory_.RunMemory, keys: Sequence[str]) -> None:
        """Remove those of ``keys`` the run carries, and remember this resourceVersion's annotations as
        handled (the watch may still show them after the removal)."""
        memory.handled_rvs.add(run.resource_version)
        present = tuple(k for k in keys if k in run.annotations)
        if present:
            kube.remove_annotations(self.api, run.namespace, run.name, present)

    def _admit(self, world: model.World, admit: actions.Admit) -> None:
        run, spec = world.run, world.spec
        # What admission records of any run; a fork adds where it starts (copied in one statement).
        admitted: dict[str, Any] = {
            "run_id": run.uid,
            "namespace": run.namespace,
            "name": run.name,
            "graph": spec.graph,
            "input": dict(spec.input),
            "spec_hash": spec_hash(spec),
            "durability": spec.durability,
            "approval_policy": spec.approval.as_json(),
            "retry_generation": spec.retry_generation,
        }
        source, checkpoint = admit.fork_source, admit.fork_checkpoint
        try:
            if source and checkpoint:
                fork = spec.fork_of
                assert fork is not None  # decide plans a fork's admission only for a spec with forkOf
                record = forks.admission_record(source, fork.run, checkpoint, fork.step, fork.set)
                store.admit_fork(self.db, **admitted, fork_of=record)
            else:
                store.admit_run(self.db, **admitted)
        except connect.DataError as exc:
            # Retrying would meet the same refusal every poll, with nothing on the run to say why.
            why = ": ".join(m for m in (exc.diag.message_primary, exc.diag.message_detail) if m) or str(exc)
            raise Unstorable(f"the spec cannot be stored in Postgres: {why}; nothing was admitted") from exc

    def _create_pod(self, world: model.World, create: actions.CreatePod, memory: memory_.RunMemory) -> None:
        run, ns = world.run, world.run.namespace
        attempt, reason = create.attempt, create.reason
        body = pods.manifest(
            run, world.spec, attempt, reason, self.settings, image=create.image, avoid_node=create.avoid_node
        )
        pod = str(body["metadata"]["name"])
        try:  # the namespace's worker role and DSN Secret, before its first Pod
            self.tenants.ensure(ns)
        except tenants.TenantError as exc:
            if memory.last_pod_error != str(exc):  # once per distinct cause
                memory.last_pod_error = str(exc)
                self.event(run, actions.Event("Warning", "TenantProvisioningFailed", str(exc)))
            raise
        self._clear_foreign_lease(run)
        # The attempt row first: its start reason is on record even if the worker never starts.
        store.record_attempt_start(self.db, run_id=run.uid, attempt=attempt, pod=pod, start_reason=reason)
        try:
            created = kube.create_pod(self.api, ns, body)
            if not created:
                self._check_existing_pod(run, pod)
        except kube.KubeError as exc:
            refused = exc.status is not None and 400 <= exc.status < 500 and exc.status != 409
            # Tell the user once per distinct refusal (a missing ServiceAccount, quota, ...).
            if refused and memory.last_pod_error != str(exc):
                memory.last_pod_error = str(exc)
                self.event(run, actions.Event("Warning", "PodCreateFailed", f"{pod}: {exc}"))
            if refused and exc.status is not None:
                since = memory.pod_refused[3] if memory.pod_refused else time.monotonic()
                memory.pod_refused = (attempt, exc.status, str(exc), since)
            raise
        memory.last_pod_error = None
        memory.pod_refused = None
        memory.created_pods[pod] = time.monotonic()
        if created:
            metrics.attempt_started(reason, ns)
        if create.lost_observed:
            memory.waiting_running = pod
            if memory.lost_at is None:
                memory.lost_at = time.monotonic()
            memory.lost_reason = reason
            if reason == "lease_expired":
                metrics.lease_takeover(ns)

    def _decide(self, run: model.RunRef, decide: actions.Decide) -> None:
        # Postgres judges decision vs deadline (its clock, its stored deadline) and who was first.
        outcome = store.decide_approval_detail(
            self.db,
            approval_id=decide.approval_id,
            run_id=run.uid,
            decision=decide.decision,
            decided_by=decide.decided_by,
            comment=decide.comment,
            deadline_action=decide.deadline_action,
            edits=decide.edits,
            response=decide.response,
            action=decide.action,
            decisions=decide.decisions,
        )
        if outcome.won or decide.decision != "expired":
            self.event(run, _decision_event(decide, outcome))
        elif outcome.status == "pending":
            logger.debug("%s/%s: %s not due by Postgres's clock", run.namespace, run.name, decide.approval_id)

    def _reopen(self, run: model.RunRef, reopen: actions.ReopenRun) -> None:
        generation, by = reopen.generation, reopen.by
        reopened = store.reopen_run(
            self.db, run_id=run.uid, generation=generation, by=by, reason=f"retry {generation} by {by}"
        )
        if reopened is not None:
            summary = steering.retry_summary(generation, by, reopened.rekeyed, reopened.kept)
            self.event(run, actions.Event("Normal", "Retried", summary))
        else:
            self.event(
                run,
                actions.Event(
                    "Warning",
                    "RetryNotApplied",
                    f"retry generation {generation} by {by} not applied: the run succeeded or that "
                    "generation was applied already",
                ),
            )

    def _resolve(self, run: model.RunRef, resolve: actions.ResolveEffect) -> None:
        done = store.resolve_effect(
            self.db,
            run_id=run.uid,
            key=resolve.key,
            outcome=resolve.outcome,
            by=resolve.by,
            result=resolve.result,
        )
        shown = resolve.outcome.replace("_", "-")
        if done.resolved:
            text = f"effect {resolve.key} resolved as {shown} by {resolve.by}"
            if done.reopened:
                text += "; the run continues from its checkpoint"
            self.event(run, actions.Event("Normal", "EffectResolved", text))
        else:
            self.event(
                run,
                actions.Event(
                    "Warning",
                    "ResolveRefused",
                    f"resolving effect {resolve.key} as {shown} by {resolve.by} refused: {done.refusal}",
                ),
            )

    def _clear_foreign_lease(self, run: model.RunRef) -> None:
        """Delete the run Lease if it is an earlier run's (same name, other uid) before a worker starts.

        Left in place, the new worker would adopt it and garbage collection of the old run would delete it
        under the new one (its ownerReference names the old uid). Fresh read: the cache may lag.
        """
        name = protocol.lease_name(run.name)
        try:
            body = kube.get_lease(self.api, run.namespace, name, timeout=kube.TIMEOUT)
        except kube.NotFound:
            return
        if memory_.foreign(body, run.uid):
            meta = body.get("metadata") or {}
            self.event(
                run,
                actions.Event(
                    "Normal", "StaleLease", f"deleting Lease {name} of an earlier run with this name"
                ),
            )
            kube.delete_exact(self.api, run.namespace, "lease", name, str(meta.get("uid") or ""))

    def _free_lapsed_lease(self, run: model.RunRef, holder: str, memory: memory_.RunMemory) -> None:
        """Clear ``holderIdentity`` of the run's Lease if it is still exactly the version we judged expired.

        Safe for the reason a standby may take an expired Lease (docs/leases.md): the holder's last renewal
        was sent before we first saw that version, and it stopped acting two thirds of a duration after it,
        while we waited a full duration by our own clock. The PUT carries that version's resourceVersion, so
        a renewal that landed meanwhile makes it fail (and the next worker waits, as it would anyway).
        ``leaseTransitions`` is kept: the next holder's epoch is higher, and Postgres fences the old one.
        Best effort: on any error the next worker simply waits for the Lease to expire by its own clock.
        """
        judged = memory.observer.last
        if judged is None or judged.holder != holder:
            return
        name = protocol.lease_name(run.name)
        try:
            body = kube.get_lease(self.api, run.namespace, name, timeout=kube.TIMEOUT)
            spec = body.setdefault("spec", {})
            seen = ((body.get("metadata") or {}).get("resourceVersion"), spec.get("holderIdentity"))
            if seen != (judged.resource_version, holder):
                return  # renewed or changed since we judged it (any write changes resourceVersion)
            spec["holderIdentity"] = ""
            kube.replace_lease(self.api, run.namespace, name, body, timeout=kube.TIMEOUT)
        except kube.KubeError as exc:  # Conflict (written since), NotFound, unreachable
            ns = run.namespace
            logger.info("%s/%s: Lease %s of %s left to expire: %s", ns, run.name, name, holder, exc)
            return
        logger.info("%s/%s: freed Lease %s, lapsed under %s", run.namespace, run.name, name, holder)

    def _check_existing_pod(self, run: model.RunRef, pod: str) -> None:
        """``AlreadyExists`` is "mine" only when the Pod carries this run's uid; an earlier run's Pod of the
        same name is deleted (precondition on its uid) and the attempt retried once it is gone."""
        try:
            body = kube.get_pod(self.api, run.namespace, pod)
        except kube.NotFound as exc:
            raise StaleObject(f"Pod {pod} existed and is gone now; creating it again") from exc
        if memory_.owned(body, run.uid):
            return
        meta = body.get("metadata") or {}
        self.event(
            run,
            actions.Event(
                "Warning",
                "StalePod",
                f"Pod {pod} belongs to an earlier run with this name (uid "
                f"{(meta.get('labels') or {}).get(protocol.LABEL_RUN_UID) or '?'}): deleting it first",
            ),
        )
        if not meta.get("deletionTimestamp"):
            kube.delete_exact(self.api, run.namespace, "pod", pod, str(meta.get("uid") or ""))
        if protocol.POD_FINALIZER in (meta.get("finalizers") or ()):
            # The earlier run is gone (its name is this run's now): nobody records its attempt, so its Pod
            # is not held; it goes once its kubelet has stopped it.
            kube.release_pod(self.api, run.namespace, pod)
        raise StaleObject(f"waiting for Pod {pod} of an earlier run with this name to be deleted")


def _decision_event(decide: actions.Decide, outcome: store.Decision) -> actions.Event:
    if not outcome.won:
        if outcome.status == "pending" and outcome.past_deadline:
            why = "it arrived after the approval's deadline (onTimeout expires it)"
        elif outcome.status is None:
            why = "no such approval"
        else:
            why = f"it was {outcome.status} first"
        return actions.Event(
            "Warning",
            "ApprovalNotApplied",
            f"{decide.decision} of {decide.approval_id} by {decide.decided_by} not applied: {why}",
        )
    if decide.decisions is not None and decide.decision != "expired":  # a batch: say what each action got
        kinds = ", ".join(str(d.get("type")) for d in decide.decisions)
        text = f"approval {decide.approval_id} {decide.decision} by {decide.decided_by} (actions: {kinds})"
        reason = "Approved" if decide.decision == "approved" else "Rejected"
        return actions.Event("Normal", reason, text + (f": {decide.comment}" if decide.comment else ""))
    if decide.decision == "approved":
        text = f"approval {decide.approval_id} approved by {decide.decided_by}"
        return actions.Event("Normal", "Approved", text + (f": {decide.comment}" if decide.comment else ""))
    if decide.decision == "rejected":
        text = f"approval {decide.approval_id} rejected by {decide.decided_by}"
        return actions.Event("Normal", "Rejected", text + (f": {decide.comment}" if decide.comment else ""))
    return actions.Event(
        "Warning",
        "ApprovalExpired",
        f"approval {decide.approval_id} expired ({decide.comment}); "
        f"onTimeout action: {decide.deadline_action}",
    )
