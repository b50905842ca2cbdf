"""What the cluster stores for the benchmark's runs: API objects by resource and etcd's bytes and keys.

Objects are counted in the benchmark's namespace by listing each resource a run may leave there (one
``limit=1`` list each: the API server's ``remainingItemCount`` says how many more), fresh at every sample
(the API server's own ``apiserver_resource_objects`` is refreshed only once a minute). Bytes are etcd's
database logically in use (``etcd_mvcc_db_total_size_in_use_in_bytes`` of the dev cluster's etcd metrics
listener): old revisions count in it until the API server compacts them (every 5 minutes), so a difference
per run says something only well after the runs stopped changing (P4's settled sample, 11 minutes after the
last parked); the whole cluster's, so the benchmark runs alone on its dev cluster.
"""

from __future__ import annotations

import dataclasses
import json
import urllib.request
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
_ETCD = {
    "bytes": "etcd_mvcc_db_total_size_in_use_in_bytes",
    "keys": "etcd_debugging_mvcc_keys_total",
}
EXPIRING = ("events",)  # removed by the API server after its --event-ttl (1 h), whatever the runs do


@dataclasses.dataclass(frozen=True)
class Stored:
    objects: dict[str, float]  # resource -> objects stored in the namespace
    etcd_bytes: float
    etcd_keys: float


def count(api: Any, namespace: str, path: str, resource: str) -> int:
    """Objects of ``resource`` in ``namespace``: one item and the API server's count of the rest."""
    url = f"{path}/namespaces/{namespace}/{resource}"
    method, url, headers, _, _ = api.param_serialize(
        "GET", url, query_params=[("limit", 1)], auth_settings=["BearerToken"]
    )
    response = api.call_api(method, url, header_params=headers)
    response.read()
    body = json.loads(response.data)
    return len(body.get("items") or ()) + int((body.get("metadata") or {}).get("remainingItemCount") or 0)


def parse_etcd(metrics: str, name: str) -> float:
    for line in metrics.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise ValueError(f"{name} not in etcd's metrics")


def sample(api: Any, namespace: str, etcd_metrics_port: int) -> Stored:
    """What is stored now: ``api`` an admin ``kubernetes.client.ApiClient``, etcd's metrics on loopback."""
    with urllib.request.urlopen(f"http://127.0.0.1:{etcd_metrics_port}/metrics", timeout=10) as response:
        etcd = response.read().decode()
    objects = {resource: float(count(api, namespace, path, resource)) for path, resource in RESOURCES}
    return Stored(objects, parse_etcd(etcd, _ETCD["bytes"]), parse_etcd(etcd, _ETCD["keys"]))


def per_run(a: Stored, b: Stored, n: int, label: str) -> list[stats.Row]:
    """API objects per run (``EXPIRING`` kinds apart: they go after their TTL) and etcd bytes per run, the
    resources and keys in the notes."""
    delta = {k: (v - a.objects.get(k, 0.0)) / n for k, v in b.objects.items()}
    kept = {k: v for k, v in delta.items() if k not in EXPIRING and abs(v) >= 0.005}
    expiring = ", ".join(f"{k} {delta.get(k, 0.0):.2f}" for k in EXPIRING)
    return [
        stats.Row(
            f"{label}: API objects stored per run ({', '.join(EXPIRING)} apart)",
            [sum(kept.values())],
            unit="objects",
            note=", ".join(f"{k} {v:.2f}" for k, v in sorted(kept.items(), key=lambda kv: -kv[1]))
            + f"; expiring after the event TTL: {expiring}",
        ),
        stats.Row(
            f"{label}: etcd bytes in use per run",
            [(b.etcd_bytes - a.etcd_bytes) / n],
            unit="B",
            note=f"{(b.etcd_keys - a.etcd_keys) / n:.2f} etcd keys per run",
        ),
    ]
