"""bench/load.py's arithmetic: a part's CPU is its process tree's, exited descendants included."""

from __future__ import annotations

import os

from bench import load

# pid -> (parent pid, CPU-seconds of the process and of the children it reaped)
TABLE = {
    1: (0, 100.0),  # init: not ours
    10: (1, 2.0),  # a part's root (its reaped children's CPU is in these 2.0)
    11: (10, 0.5),
    12: (11, 0.25),  # a grandchild
    20: (1, 7.0),  # another part
    21: (20, 1.0),
}


def test_a_tree_counts_its_root_and_every_live_descendant() -> None:
    assert load.tree_cpu_seconds([10], TABLE) == 2.75
    assert load.tree_cpu_seconds([20], TABLE) == 8.0
    assert load.tree_cpu_seconds([10, 20], TABLE) == 10.75


def test_a_root_gone_counts_nothing_and_a_root_listed_twice_counts_once() -> None:
    assert load.tree_cpu_seconds([99], TABLE) == 0.0
    assert load.tree_cpu_seconds([], TABLE) == 0.0
    assert load.tree_cpu_seconds([10, 11, 10], TABLE) == 2.75


def test_rates_between_two_samples() -> None:
    a = load.Sample(at=10.0, cpu={"x": 1.0, "y": 0.0}, transactions=5)
    b = load.Sample(at=12.0, cpu={"x": 1.5, "y": 2.0}, transactions=25)
    assert load.cpu_percent(a, b) == {"x": 25.0, "y": 100.0}
    assert load.transactions_per_second(a, b) == 10.0


def test_this_process_is_in_the_table_with_its_parent() -> None:
    table = load._processes()
    ppid, cpu = table[os.getpid()]
    assert ppid == os.getppid() and cpu >= 0
    assert load.tree_cpu_seconds([os.getppid()], table) >= load.tree_cpu_seconds([os.getpid()], table)


def _metric(code: str, resource: str, subresource: str, verb: str, value: int) -> str:
    labels = (
        f'code="{code}",component="apiserver",dry_run="",group="",resource="{resource}",scope="namespace",'
        f'subresource="{subresource}",verb="{verb}",version="v1"'
    )
    return f"apiserver_request_total{{{labels}}} {value}"


METRICS = "\n".join(
    [
        "# HELP apiserver_request_total [STABLE] Counter of apiserver requests",
        _metric("201", "pods", "", "POST", 4),
        _metric("409", "pods", "", "POST", 1),  # codes together
        _metric("200", "pods", "status", "PATCH", 7),
        _metric("200", "", "/readyz", "GET", 26),  # a path: no resource
        'apiserver_request_duration_seconds_count{verb="POST"} 99',  # another family
    ]
)


def test_requests_are_summed_by_verb_and_resource() -> None:
    assert load.parse_requests(METRICS) == {"POST pods": 5.0, "PATCH pods/status": 7.0, "GET /readyz": 26.0}


def test_writes_per_run_count_only_writes_made_between_the_samples() -> None:
    a = load.Sample(0.0, {}, 0, {"POST pods": 5.0, "GET pods": 100.0})
    b = load.Sample(1.0, {}, 0, {"POST pods": 9.0, "GET pods": 140.0, "PATCH pods/status": 8.0})
    row = load.requests_per_run(a, b, 4)
    assert row.ours == [3.0]  # (4 POST + 8 PATCH) / 4 runs; the reads are in the note only
    assert row.note == "PATCH pods/status 2.0, POST pods 1.0; 13 requests per run in all"
