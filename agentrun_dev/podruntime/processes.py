"""Container processes: start, signal, log files, and the on-disk records that outlive a runtime crash.

Each container runs in its own session (``start_new_session``), so its leader's pid is also its process group
and session id; signals go to the group and to every process of its tree (see :mod:`proctable`). Each live
process has a record under ``<state>/podruntime/procs/<pod uid>/<container>.json`` (pid + start ticks, so PID
reuse is detected): a runtime that was SIGKILLed kills what the previous instance left before it resumes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from agentrun_dev.podruntime import proctable

log = logging.getLogger(__name__)
KEEP_OLD_LOGS = 5


@dataclasses.dataclass
class Process:
    popen: subprocess.Popen[bytes]
    start_ticks: int
    started_at: float
    record: Path
    known: set[int] = dataclasses.field(default_factory=set)
    """Tree members seen at the last scan: still signalled once the leader is gone."""

    @property
    def pid(self) -> int:
        return self.popen.pid


def log_path(pod_dir: Path, container: str) -> Path:
    return pod_dir / f"{container}.log"


def rotate_log(pod_dir: Path, container: str, restart_count: int) -> None:
    """Before run ``restart_count`` (0 = first), the last run's log becomes ``<c>.log.<restart_count-1>``."""
    cur = log_path(pod_dir, container)
    if restart_count == 0 or not cur.exists():
        return
    cur.rename(pod_dir / f"{container}.log.{restart_count - 1}")
    old = pod_dir / f"{container}.log.{restart_count - 1 - KEEP_OLD_LOGS}"
    old.unlink(missing_ok=True)


def prepare_pod_dir(pod_dir: Path, uid: str) -> None:
    """A pod dir is keyed by namespace/name (``agentrun dev logs``); a new pod of that name wipes it."""
    marker = pod_dir / ".uid"
    if pod_dir.exists() and (not marker.exists() or marker.read_text().strip() != uid):
        shutil.rmtree(pod_dir, ignore_errors=True)
    pod_dir.mkdir(parents=True, exist_ok=True)
    marker.write_text(uid + "\n")


def launch(
    *,
    argv: list[str],
    env: Mapping[str, str],
    cwd: Path,
    log_file: Path,
    record: Path,
    meta: Mapping[str, str],
) -> Process:
    """Start one container process. Raises ``OSError`` when the executable cannot be run."""
    with open(log_file, "ab") as out:
        popen = subprocess.Popen(
            argv,
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    info = proctable.read_one(popen.pid)
    ticks = info.start_ticks if info else 0
    record.parent.mkdir(parents=True, exist_ok=True)
    tmp = record.with_suffix(".tmp")
    tmp.write_text(json.dumps({"pid": popen.pid, "start_ticks": ticks, "argv": argv, **meta}))
    tmp.replace(record)
    return Process(popen=popen, start_ticks=ticks, started_at=time.time(), record=record, known={popen.pid})


def signal_group(pids: Iterable[int], leader: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(leader, sig)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def signal_process(p: Process, sig: int) -> None:
    signal_group(p.known | {p.pid}, p.pid, sig)


def forget(p: Process) -> None:
    p.record.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        p.record.parent.rmdir()


def kill_orphans(procs_dir: Path) -> int:
    """Kill container processes a previous runtime left running; returns how many groups it killed."""
    killed = 0
    if not procs_dir.exists():
        return 0
    table = proctable.scan()
    for rec in procs_dir.glob("*/*.json"):
        try:
            data = json.loads(rec.read_text())
            pid, ticks = int(data["pid"]), int(data["start_ticks"])
        except (OSError, ValueError, KeyError):
            rec.unlink(missing_ok=True)
            continue
        p = table.get(pid)
        if p is not None and p.start_ticks == ticks:
            log.warning("killing orphaned container process %s (%s)", pid, data.get("pod", "?"))
            signal_group(proctable.tree(table, pid), pid, signal.SIGKILL)
            killed += 1
        rec.unlink(missing_ok=True)
    for d in procs_dir.iterdir():
        with contextlib.suppress(OSError):
            d.rmdir()
    return killed


def exit_code(returncode: int) -> tuple[int, int | None]:
    """Popen's ``-N`` (killed by signal N) becomes the container convention ``128+N``: (code, signal)."""
    if returncode < 0:
        return 128 - returncode, -returncode
    return returncode, None
