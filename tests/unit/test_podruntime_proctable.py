"""/proc parsing and per-container process-tree RSS accounting of the local pod runtime."""

from __future__ import annotations

import os

from agentrun_dev.podruntime import processes, proctable


def proc(pid: int, ppid: int, pgid: int, sid: int, rss: int, state: str = "S") -> proctable.Proc:
    return proctable.Proc(pid, ppid, pgid, sid, state, start_ticks=pid * 10, rss_bytes=rss)


def test_parse_stat_handles_spaces_and_parens_in_comm() -> None:
    line = "4242 (my (odd) proc) S 1 4242 4242 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0 777 3133440 5 18446744 0"
    p = proctable.parse_stat(line)
    assert (p.pid, p.ppid, p.pgid, p.sid, p.state, p.start_ticks) == (4242, 1, 4242, 4242, "S", 777)
    assert p.rss_bytes == 5 * proctable.PAGE_SIZE


def test_tree_covers_session_group_and_escaped_descendants() -> None:
    table = {
        p.pid: p
        for p in [
            proc(100, 1, 100, 100, 10),  # leader
            proc(101, 100, 100, 100, 20),  # child
            proc(102, 101, 102, 100, 30),  # own process group, same session
            proc(103, 102, 103, 103, 40),  # setsid() but still a descendant
            proc(104, 1, 100, 100, 50),  # reparented to init, still in the group
            proc(105, 103, 103, 103, 1000, state="Z"),  # zombie: no memory, not counted
            proc(200, 1, 200, 200, 999),  # another container
        ]
    }
    members = proctable.tree(table, 100)
    assert members == {100, 101, 102, 103, 104}
    assert proctable.rss(table, members) == 150


def test_scan_sees_this_process_with_real_rss() -> None:
    table = proctable.scan()
    me = table[os.getpid()]
    assert me.ppid == os.getppid() and me.rss_bytes > 1_000_000
    assert proctable.read_one(os.getpid()) is not None


def test_exit_code_convention() -> None:
    assert processes.exit_code(0) == (0, None)
    assert processes.exit_code(3) == (3, None)
    assert processes.exit_code(-9) == (137, 9)
    assert processes.exit_code(-15) == (143, 15)
