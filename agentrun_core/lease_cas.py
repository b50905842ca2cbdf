"""The Lease engine's writes: each function is one compare-and-swap step on a ``coordination.k8s.io/v1``
Lease.

Rule: nothing here keeps state, starts a thread or sleeps, and every function makes a bounded number of
requests (``release`` at most ``RELEASE_TRIES`` PUTs; ``renew`` one PUT and at most one re-read, never a
retry of its own). Timing, retries and the question "may I act?" belong to the keeper
(``agentrun_core.lease``) that calls these steps; what is written belongs here.

Every write is a PUT carrying the ``resourceVersion`` last read (or a POST that fails if the Lease exists),
so the API server refuses it (409) if anyone else wrote in between: two writers can never both believe their
write took the Lease. See docs/leases.md.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from typing import Any

import kubernetes.client

from agentrun_core import kube, lease_math

logger = logging.getLogger(__name__)

RELEASE_TRIES = 3  # PUTs of one release: a 409 from a write that kept us as holder is re-read and retried


@dataclasses.dataclass(frozen=True)
class LeaseConfig:
    """One Lease and the identity that holds it: everything the writes put into the object."""

    namespace: str
    name: str  # agentrun-<run name> for a run; the operator's leader Lease for leadership
    holder: str  # holderIdentity: must be unique per process that may hold the Lease (the pod name)
    duration_seconds: float = 15  # leaseDurationSeconds; renew every 1/3, stop acting at 2/3
    owner: dict[str, Any] | None = None  # an ownerReference (the AgentRun), set on create
    labels: dict[str, str] | None = None  # e.g. {"agentrun.dev/run": name}, set on create

    @property
    def written_duration(self) -> int:
        """``leaseDurationSeconds`` is an integer in the API; a fractional setting is rounded, at least 1."""
        return max(1, round(self.duration_seconds))


@dataclasses.dataclass(frozen=True)
class Renewal:
    """What one renewal step found. Exactly one of ``written``/``lost``/``error`` is set."""

    written: kube.LeaseBody | None = None  # renewed: the version now stored
    lost: str | None = None  # deposed or deleted: why
    error: str | None = None  # could not tell (transient): try again while the deadline allows
    adopt: kube.LeaseBody | None = None  # with ``error``: still ours, retry on this newer version
    # with ``error``: the renewTime this step sent without learning whether the write took (its answer
    # lost: a timeout). Should a later re-read show it, that write renewed the Lease when it was sent.
    sent: str | None = None


def read(cfg: LeaseConfig, api: kubernetes.client.ApiClient, timeout: float) -> kube.LeaseBody | None:
    """The Lease as stored, None when it does not exist. Raises ``KubeError`` (unreachable, ...)."""
    try:
        return kube.get_lease(api, cfg.namespace, cfg.name, timeout=timeout)
    except kube.NotFound:
        return None


def spec(cfg: LeaseConfig, transitions: int, acquire_time: str, renew_time: str) -> dict[str, Any]:
    return {
        "holderIdentity": cfg.holder,
        "leaseDurationSeconds": cfg.written_duration,
        "acquireTime": acquire_time,
        "renewTime": renew_time,
        "leaseTransitions": transitions,
    }


def take(
    cfg: LeaseConfig,
    api: kubernetes.client.ApiClient,
    current: kube.LeaseBody | None,
    transitions: int,
    timeout: float,
) -> kube.LeaseBody | None:
    """Write ``cfg.holder`` as holder over ``current`` (the version just read; None: create). The written
    Lease, or None when it was deleted between read and write. Raises ``Conflict`` (``AlreadyExists`` on
    create) when somebody else wrote first, ``KubeError`` otherwise."""
    now_text = kube.micro_time()
    if current is None:
        metadata: dict[str, Any] = {"name": cfg.name}
        if cfg.labels:
            metadata["labels"] = dict(cfg.labels)
        if cfg.owner:
            metadata["ownerReferences"] = [dict(cfg.owner)]
        body = {"metadata": metadata, "spec": spec(cfg, transitions, now_text, now_text)}
        return kube.create_lease(api, cfg.namespace, body, timeout=timeout)
    body = copy.deepcopy(current)  # keeps metadata.resourceVersion: the CAS
    old = body.get("spec") or {}
    ours = str(old.get("holderIdentity") or "") == cfg.holder
    acquire_time = old.get("acquireTime") if ours else None
    body["spec"] = {**old, **spec(cfg, transitions, acquire_time or now_text, now_text)}
    try:
        return kube.replace_lease(api, cfg.namespace, cfg.name, body, timeout=timeout)
    except kube.NotFound:
        return None  # deleted between our read and write: the caller starts over


def renew(
    cfg: LeaseConfig,
    api: kubernetes.client.ApiClient,
    body: kube.LeaseBody,
    epoch: int | None,
    timeout: float,
) -> Renewal:
    """One CAS renewal of ``body`` (our last version): a new ``renewTime``, nothing else changed."""
    body = copy.deepcopy(body)
    renew_time = body.setdefault("spec", {})["renewTime"] = kube.micro_time()
    try:
        return Renewal(written=kube.replace_lease(api, cfg.namespace, cfg.name, body, timeout=timeout))
    except kube.NotFound:
        return Renewal(lost="the Lease was deleted")
    except kube.Conflict:
        # Somebody wrote since our version. Still ours (a label edit?) -> adopt, the keeper retries; else
        # deposed. One re-read and no retry here: the keeper's schedule bounds how often this happens.
        try:
            current = kube.get_lease(api, cfg.namespace, cfg.name, timeout=timeout)
        except kube.NotFound:
            return Renewal(lost="the Lease was deleted")
        except kube.KubeError as exc:
            return Renewal(error=f"conflict, then re-read failed: {exc}")
        summary = lease_math.LeaseSummary.from_body(current)
        if summary.holder == cfg.holder and summary.transitions == epoch:
            return Renewal(error="conflict with a write that kept us as holder; retrying", adopt=current)
        return Renewal(lost=f"the Lease is now held by {summary.holder!r} at epoch {summary.transitions}")
    except kube.KubeError as exc:
        logger.warning("lease %s/%s renewal failed: %s", cfg.namespace, cfg.name, exc)
        return Renewal(error=str(exc), sent=renew_time)


def release(
    cfg: LeaseConfig,
    api: kubernetes.client.ApiClient,
    body: kube.LeaseBody,
    epoch: int | None,
    timeout: float,
) -> bool:
    """Clear ``holderIdentity`` by CAS, only while the Lease is still ours at ``epoch``. True if released.

    ``leaseTransitions`` is kept, so the next holder's epoch is higher than ours. Best effort: on any error
    other than a conflict that kept us as holder it gives up and the Lease simply expires.
    """
    body = copy.deepcopy(body)
    for _ in range(RELEASE_TRIES):
        spec_ = body.setdefault("spec", {})
        spec_["holderIdentity"] = ""
        spec_["renewTime"] = kube.micro_time()
        try:
            kube.replace_lease(api, cfg.namespace, cfg.name, body, timeout=timeout)
        except kube.Conflict:
            try:
                body = kube.get_lease(api, cfg.namespace, cfg.name, timeout=timeout)
            except kube.KubeError:
                return False
            summary = lease_math.LeaseSummary.from_body(body)
            if summary.holder != cfg.holder or summary.transitions != epoch:
                return False  # somebody else's now: nothing of ours to release
            continue
        except kube.KubeError as exc:
            logger.warning("lease %s/%s release failed: %s", cfg.namespace, cfg.name, exc)
            return False
        logger.info("lease %s/%s released by %s", cfg.namespace, cfg.name, cfg.holder)
        return True
    return False
