"""The load P4 puts on each part of the dev cluster: CPU from ``/proc``, transactions from Postgres.

A part's CPU is that of its process tree, so that what short-lived processes used is not lost: every live
process under the part's root (``utime + stime``) plus what its exited descendants used, which the kernel
adds to the parent that reaped them (``cutime + cstime``). The parts:
  * ``operator``: the ``agentrun operator`` process the benchmark started;
  * ``api server``: ``kube-apiserver`` and ``etcd``;
  * ``postgres``: the postmaster and its backends, one per connection (the whole server: every database);
  * ``pods``: the pod runtime and the worker processes it runs (its children), i.e. the workers' cost.
API requests are the API server's own count (``apiserver_request_total`` of its ``/metrics``), of every
client: the operator, the workers' Leases, the pod runtime, the controller-manager, the benchmark itself.
Transactions are the benchmark database's own (``pg_stat_database``: ``xact_commit + xact_rollback``; every
statement outside a transaction block is one, reads included): unlike the server's CPU, no other database
counts in them. Backends report them at most once a second, an idle one up to 10 s later, so they are read
over a whole window, not per slice.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import re
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import psycopg

from bench import stats

PARTS = ("operator", "api server", "postgres", "pods")
_TICKS = os.sysconf("SC_CLK_TCK")
_TRANSACTIONS = "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()"


def _processes() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, CPU-seconds of the process and of its reaped children)."""
    table: dict[int, tuple[int, float]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:  # gone while we looked
            continue
        fields = stat.rsplit(")", 1)[1].split()
        ticks = int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])
        table[int(entry.name)] = (int(fields[1]), ticks / _TICKS)
    return table


_REQUEST = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')
WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE")


def parse_requests(metrics: str) -> dict[str, float]:
    """``apiserver_request_total`` summed by ``"VERB resource[/subresource]"`` (codes, groups, scopes
    together) from the API server's metrics text."""
    counts: dict[str, float] = collections.defaultdict(float)
    for line in metrics.splitlines():
        match = _REQUEST.match(line)
        if match is None:
            continue
        labels = dict(_LABEL.findall(match["labels"]))
        what = labels.get("resource") or labels.get("subresource") or "-"
        if labels.get("resource") and labels.get("subresource"):
            what += "/" + labels["subresource"]
        counts[f"{labels.get('verb', '?')} {what}"] += float(match["value"])
    return dict(counts)


def metrics_text(api: Any) -> str:
    """The API server's ``/metrics``, as ``api`` (an admin ``kubernetes.client.ApiClient``) may read them."""
    method, url, headers, _, _ = api.param_serialize("GET", "/metrics", auth_settings=["BearerToken"])
    response = api.call_api(method, url, header_params=headers)
    response.read()
    return str(response.data.decode())


def api_requests(api: Any) -> dict[str, float]:
    """The API server's request counts so far (``parse_requests`` of its ``/metrics``)."""
    return parse_requests(metrics_text(api))


def tree_cpu_seconds(roots: list[int], table: Mapping[int, tuple[int, float]]) -> float:
    """CPU-seconds of the live processes under ``roots`` (themselves included) and of what they reaped."""
    children: dict[int, list[int]] = collections.defaultdict(list)
    for pid, (ppid, _) in table.items():
        children[ppid].append(pid)
    total, todo, seen = 0.0, [r for r in roots if r in table], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += table[pid][1]
        todo.extend(children.get(pid, ()))
    return total


@dataclasses.dataclass(frozen=True)
class Sample:
    at: float  # monotonic seconds
    cpu: dict[str, float]  # part -> CPU-seconds so far
    transactions: int  # of the benchmark's database so far (committed and rolled back)
    requests: dict[str, float] = dataclasses.field(default_factory=dict)  # the API server's, by kind


class Meter:
    """Samples of the parts' CPU and the database's transactions (``cpu_percent``,
    ``transactions_per_second``: rates between two)."""

    def __init__(
        self, roots: Mapping[str, list[int]], conn: psycopg.Connection[tuple[int]], api: Any = None
    ) -> None:
        self.roots = dict(roots)
        self.conn = conn
        self.api = api  # an admin ApiClient: the API server's request counts are sampled too

    def sample(self) -> Sample:
        table = _processes()
        row = self.conn.execute(_TRANSACTIONS).fetchone()
        return Sample(
            time.monotonic(),
            {part: tree_cpu_seconds(pids, table) for part, pids in self.roots.items()},
            int(row[0]) if row else 0,
            api_requests(self.api) if self.api is not None else {},
        )

    def cpu_slices(self, seconds: float, slices: int = 5) -> tuple[dict[str, list[float]], float]:
        """Percent of one core each part used in each of ``slices`` consecutive windows, and the
        database's transactions per second over all of them."""
        out: dict[str, list[float]] = {part: [] for part in self.roots}
        first = prev = self.sample()
        for _ in range(slices):
            time.sleep(seconds / slices)
            now = self.sample()
            for part, pct in cpu_percent(prev, now).items():
                out[part].append(pct)
            prev = now
        return out, transactions_per_second(first, prev)


def cpu_percent(a: Sample, b: Sample) -> dict[str, float]:
    elapsed = max(b.at - a.at, 1e-9)
    return {part: 100.0 * (b.cpu[part] - a.cpu[part]) / elapsed for part in b.cpu}


def transactions_per_second(a: Sample, b: Sample) -> float:
    return (b.transactions - a.transactions) / max(b.at - a.at, 1e-9)


def cluster_roots(operator_pid: int) -> dict[str, list[int]]:
    """Each part's root pids on the dev cluster (``agentrun dev status``'s pids)."""
    from agentrun_dev import cluster

    pids = {part.name: part.pid for part in cluster.status() if part.pid is not None}
    return {
        "operator": [operator_pid],
        "api server": [pids[name] for name in ("kube-apiserver", "etcd") if name in pids],
        "postgres": [pids["postgres"]] if "postgres" in pids else [],
        "pods": [pids["pod-runtime"]] if "pod-runtime" in pids else [],
    }


# The figures' names of the parts other than the operator (P4 reports the operator's apart).
LABELS = {
    "api server": "API server CPU (kube-apiserver + etcd)",
    "postgres": "Postgres CPU (the whole server)",
    "pods": "pod runtime + worker Pods CPU",
}


def cpu_per_run(a: Sample, b: Sample, n: int) -> stats.Row:
    """CPU-seconds per run between two samples, all parts together; each part in the note."""
    parts = {part: (b.cpu[part] - a.cpu[part]) / n for part in PARTS}
    return stats.Row(
        "CPU-seconds per run (operator + API server + Postgres + Pods)",
        [sum(parts.values())],
        unit="CPU-s",
        note=", ".join(f"{part} {v:.3f}" for part, v in parts.items())
        + f"; {(b.transactions - a.transactions) / n:.1f} transactions per run",
    )


def requests_per_run(a: Sample, b: Sample, n: int) -> stats.Row:
    """API writes per run between two samples (what a run makes the cluster store); the kinds in the note,
    with all requests (reads, lists and watches too, the benchmark's own polling included)."""
    delta = {k: v - a.requests.get(k, 0.0) for k, v in b.requests.items()}
    writes = {k: v for k, v in delta.items() if k.split(" ")[0] in WRITE_VERBS and v > 0}
    kinds = sorted(writes.items(), key=lambda kv: -kv[1])[:6]
    return stats.Row(
        "API writes per run (all clients)",
        [sum(writes.values()) / n],
        unit="req",
        note=", ".join(f"{k} {v / n:.1f}" for k, v in kinds)
        + f"; {sum(delta.values()) / n:.0f} requests per run in all",
    )


@contextlib.contextmanager
def meter(dsn: str, operator_pid: int, api: Any = None) -> Iterator[Meter]:
    """A meter of the dev cluster's parts, of the database ``dsn`` (one connection held open, so that
    sampling starts no backend of its own) and, given an admin ``api``, of the API server's requests."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        yield Meter(cluster_roots(operator_pid), conn, api)
