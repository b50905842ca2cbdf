"""Lease calls (``coordination.k8s.io/v1``): the run Leases of workers, the operator's leadership Lease and
the dev node's heartbeat Lease.

Rule: Leases travel as JSON dicts, never as ``V1Lease``: the model re-serialises ``renewTime`` with
``datetime.isoformat()``, which drops the fraction when it is zero, while ``MicroTime`` wants RFC 3339 with
exactly six digits. Dicts also match what the operator gets from kopf, so
``lease_math.LeaseSummary.from_body`` serves both. ``NotFound`` / ``Conflict`` / ``AlreadyExists`` /
``Unavailable`` are for the Lease engine to judge.
"""

from __future__ import annotations

import contextlib
import datetime
from typing import Any

from agentrun_core.kube import api as api_
from agentrun_core.kube import errors

LeaseBody = dict[str, Any]

LEASES = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
LEASE = LEASES + "/{name}"


def micro_time(when: datetime.datetime | None = None) -> str:
    """A ``MicroTime`` string (RFC 3339, UTC, exactly six fractional digits). Informative only."""
    when = when or datetime.datetime.now(datetime.UTC)
    return when.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def get_lease(api: api_.ApiClient, namespace: str, name: str, *, timeout: float | None = None) -> LeaseBody:
    """The Lease as JSON. Raises ``NotFound``, ``Unavailable``, ``KubeError``."""
    return api_.request(api, "GET", LEASE, {"namespace": namespace, "name": name}, timeout=timeout)


def create_lease(
    api: api_.ApiClient, namespace: str, body: LeaseBody, *, timeout: float | None = None
) -> LeaseBody:
    """Create a Lease (``body`` is its JSON). Raises ``AlreadyExists`` if one by that name exists."""
    body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", **body}
    return api_.request(api, "POST", LEASES, {"namespace": namespace}, body, timeout=timeout)


def replace_lease(
    api: api_.ApiClient,
    namespace: str,
    name: str,
    body: LeaseBody,
    *,
    timeout: float | None = None,
) -> LeaseBody:
    """PUT the Lease. With ``metadata.resourceVersion`` set this is a compare-and-swap: ``Conflict`` when
    anyone wrote since that version, ``NotFound`` when it was deleted."""
    body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", **body}
    return api_.request(api, "PUT", LEASE, {"namespace": namespace, "name": name}, body, timeout=timeout)


def delete_lease(api: api_.ApiClient, namespace: str, name: str, *, timeout: float | None = None) -> None:
    """Delete the Lease (tests and cleanup). Raises ``NotFound``."""
    api_.request(api, "DELETE", LEASE, {"namespace": namespace, "name": name}, timeout=timeout)


def delete_exact(
    api: api_.ApiClient, namespace: str, name: str, uid: str, *, timeout: float | None = None
) -> None:
    """Delete the Lease only while it is still the object with ``uid`` (a precondition): never the Lease of
    a run recreated under the same name meanwhile. Gone or replaced already: nothing to do."""
    options: LeaseBody = {"propagationPolicy": "Background", "preconditions": {"uid": uid}}
    with contextlib.suppress(errors.NotFound, errors.Conflict):
        api_.request(api, "DELETE", LEASE, {"namespace": namespace, "name": name}, options, timeout=timeout)
