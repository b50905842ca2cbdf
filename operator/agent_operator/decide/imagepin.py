"""Runs keep their code: the worker image of a run is pinned, by digest when the cluster reports one. Pure.

Rule:
* When a run is admitted (and again when a retry is applied: a new retry generation), its image reference is
  recorded as admitted — ``spec.worker.image`` or the operator's default — in ``status.image.ref``.
* The first attempt's Pod runs that reference. As soon as one of the run's Pods reports the image it runs by
  digest (``status.containerStatuses[].imageID`` containing ``sha256:<64 hex>``), the digest is recorded
  (``status.image.digest``, and the ``agentrun_runs`` row) and every later attempt runs ``<repo>@<digest>``
  (``status.image.pinned``): a tag pushed again meanwhile does not change the code a run resumes with.
* A node that reports no registry digest (the dev cluster's local pod runtime reports ``imageID: ""``; a
  containerd node running an image loaded from a tarball reports only its local id ``sha256:…``, which no
  ``repo@…`` reference can name) leaves the digest unknown: later attempts run the reference as admitted,
  and ``status.image.digest`` stays absent with a note saying so. Nothing is guessed.
* ``spec.worker.image`` cannot change on an existing run except together with a retry (the CRD's CEL rule);
  even if it did, attempts of the same retry generation keep the pinned image, because the pin is read from
  status, never from the spec, once recorded.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from agent_operator.decide import actions, model

# Only a *registry* digest, ``repo@sha256:…``: a bare ``sha256:…`` imageID is the image's local id (its config
# digest), which containerd's CRI reports for an image loaded from a tarball (no registry digest); pinned as
# ``repo@<id>`` it cannot be pulled or found, and the next attempt would hang in ImagePullBackOff.
_DIGEST = re.compile(r"@(sha256:[0-9a-f]{64})")
NO_DIGEST = "the node reports no registry digest of the image: attempts run the image reference as admitted"


def digest_of(image_id: str | None) -> str | None:
    """The registry digest in a container status's imageID (``docker-pullable://repo@sha256:…`` or
    ``repo@sha256:…``), or None (empty, or a bare local image id)."""
    match = _DIGEST.search(image_id or "")
    return match.group(1) if match else None


def by_digest(ref: str, digest: str) -> str:
    """``repo@digest`` for ``repo[:tag][@digest]`` (a registry host's port is not a tag)."""
    repo = ref.split("@", 1)[0]
    last = repo.rsplit("/", 1)[-1]
    if ":" in last:
        repo = repo[: len(repo) - len(last)] + last.split(":", 1)[0]
    return f"{repo}@{digest}"


def image_for_attempt(pin: Mapping[str, Any]) -> str:
    """The image an attempt's Pod runs: the digest-pinned reference when known, else the admitted one."""
    return str(pin.get("pinned") or pin["ref"])


def observe(
    recorded: Mapping[str, Any] | None,
    wanted_ref: str,
    retry_generation: int,
    pods: Mapping[int, model.PodInfo],
) -> dict[str, Any]:
    """The run's pin after this look: ``recorded`` (status.image) kept, started for a new retry generation
    from ``wanted_ref`` (the spec's image or the operator's default), or completed with a digest that one
    of the run's Pods running the recorded reference reports."""
    pin = dict(recorded or {})
    if not pin.get("ref") and pods and retry_generation == 0:
        # A run admitted before pins existed: it is pinned to what its first Pod ran, not today's default.
        first = pods[min(pods)].image
        pin = {"ref": first or wanted_ref, "retryGeneration": 0}
    elif not pin.get("ref") or int(pin.get("retryGeneration") or 0) != retry_generation:
        pin = {"ref": wanted_ref, "retryGeneration": retry_generation}
    if pin.get("digest"):
        return pin
    seen_any = False
    for attempt in sorted(pods):
        pod = pods[attempt]
        if pod.image != pin["ref"] or not pod.started:
            continue  # another generation's Pod, or not pulled yet: its imageID says nothing
        seen_any = True
        digest = digest_of(pod.image_id)
        if digest is not None:
            pin.pop("note", None)
            return {**pin, "digest": digest, "pinned": by_digest(pin["ref"], digest), "attempt": attempt}
    if seen_any:
        pin["note"] = NO_DIGEST
    return pin


def changed(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """Whether the digest or the generation changed (the row in Postgres follows these, not the note)."""
    keys = ("ref", "digest", "retryGeneration")
    return any((old or {}).get(k) != new.get(k) for k in keys)


def _wanted(world: model.World) -> str:
    return str(world.spec.worker.get("image") or world.default_image)


def _generation(world: model.World) -> int:
    return world.db.retry_generation if world.db is not None else 0


def for_attempt(world: model.World, plan: actions.Plan, current: Mapping[str, Any] | None) -> dict[str, Any]:
    """The pin a new attempt runs; the row records it with the attempt when it is new (PinImage first)."""
    pin = observe(current, _wanted(world), _generation(world), world.pods)
    if changed(world.status.get("image"), pin):
        plan.actions.append(actions.PinImage(pin["ref"], pin.get("digest"), int(pin["retryGeneration"])))
    return pin


def keep(
    world: model.World, plan: actions.Plan, current: Mapping[str, Any] | None
) -> tuple[dict[str, Any] | None, bool]:
    """After a reconcile decided: the pin its status shows (None: none), and whether a digest was just
    reported (then recorded once: PinImage, Event ImagePinned; the status is written even when nothing
    else changed)."""
    if world.db is None or world.run.deleting:
        return None, False
    old = world.status.get("image")
    pin = observe(current, _wanted(world), _generation(world), world.pods)
    learned = bool(pin.get("digest")) and not (old or {}).get("digest")
    if learned:
        plan.actions.append(actions.PinImage(pin["ref"], pin.get("digest"), int(pin["retryGeneration"])))
        plan.info(
            "ImagePinned", f"later attempts run {pin['pinned']} (reported by attempt {pin['attempt']}'s Pod)"
        )
    return pin, learned
