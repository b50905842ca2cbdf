"""What the cluster stores for the benchmark's runs: API objects and their bytes, by resource.

Every resource a run, its worker or the operator may leave in the run's namespace is listed in full (pages
of 500), fresh at every sample: the API server's own ``apiserver_resource_objects`` is refreshed only once a
minute, and etcd's database size (``etcd_mvcc_db_total_size_in_use_in_bytes``) is the whole cluster's with
old revisions until a compaction, so a difference of two of its readings can even be negative (measured: it
was, when an earlier case's namespace was compacted away in between). The bytes are each object as JSON,
``managedFields`` included, the form in which etcd holds a custom resource (built-in kinds such as the
Lease it holds as protobuf, somewhat smaller): what the runs themselves make the cluster keep.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from bench import stats

# (group/version path, resource): what a run, its worker or the operator may leave in the run's namespace.
RESOURCES = (
    ("/api/v1", "pods"),
    ("/api/v1", "events"),
    ("/api/v1", "configmaps"),
    ("/api/v1", "secrets"),
    ("/api/v1", "persistentvolumeclaims"),
    ("/api/v1", "services"),
    ("/apis/coordination.k8s.io/v1", "leases"),
    ("/apis/agentrun.dev/v1alpha1", "agentruns"),
    ("/apis/batch/v1", "jobs"),
)
EXPIRING = ("events",)  # removed by the API server after its --event-ttl (1 h), whatever the runs do


@dataclasses.dataclass(frozen=True)
class Stored:
    objects: dict[str, int]  # resource -> objects stored in the namespace
    size: dict[str, int]  # resource -> their bytes as JSON


def _get(api: Any, url: str, query: list[tuple[str, Any]]) -> dict[str, Any]:
    auth = ["BearerToken"]
    method, url, headers, _, _ = api.param_serialize("GET", url, query_params=query, auth_settings=auth)
    response = api.call_api(method, url, header_params=headers)
    response.read()
    return dict(json.loads(response.data))


def listed(api: Any, namespace: str, path: str, resource: str) -> tuple[int, int]:
    """(objects, bytes as JSON) of ``resource`` in ``namespace``."""
    count = size = 0
    query: list[tuple[str, Any]] = [("limit", 500)]
    while True:
        page = _get(api, f"{path}/namespaces/{namespace}/{resource}", query)
        for item in page.get("items") or ():
            count += 1
            size += len(json.dumps(item, separators=(",", ":")))
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return count, size
        query = [("limit", 500), ("continue", token)]


def sample(api: Any, namespace: str) -> Stored:
    """What the namespace holds now (``api``: an admin ``kubernetes.client.ApiClient``)."""
    found = {resource: listed(api, namespace, path, resource) for path, resource in RESOURCES}
    return Stored({k: v[0] for k, v in found.items()}, {k: v[1] for k, v in found.items()})


def per_run(a: Stored, b: Stored, n: int, label: str) -> list[stats.Row]:
    """API objects and their bytes per run (``EXPIRING`` kinds apart: they go after their TTL), the
    resources in the notes."""

    def delta(counts: dict[str, int], before: dict[str, int]) -> dict[str, float]:
        return {k: (v - before.get(k, 0)) / n for k, v in counts.items()}

    objects, size = delta(b.objects, a.objects), delta(b.size, a.size)
    kept = [k for k in objects if k not in EXPIRING and (objects[k] or size[k])]
    expiring = ", ".join(f"{k} {objects.get(k, 0.0):.2f} ({size.get(k, 0.0):,.0f} B)" for k in EXPIRING)
    by_count = sorted(kept, key=lambda k: -objects[k])
    return [
        stats.Row(
            f"{label}: API objects stored per run ({', '.join(EXPIRING)} apart)",
            [sum(objects[k] for k in kept)],
            unit="objects",
            note=", ".join(f"{k} {objects[k]:.2f}" for k in by_count) + f"; expiring: {expiring}",
        ),
        stats.Row(
            f"{label}: bytes stored per run, as JSON ({', '.join(EXPIRING)} apart)",
            [sum(size[k] for k in kept)],
            unit="B",
            note=", ".join(f"{k} {size[k]:,.0f}" for k in by_count),
        ),
    ]
