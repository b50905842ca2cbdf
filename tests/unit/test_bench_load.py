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
