"""Small persistent facts about the running dev cluster: recorded ports, pid files, an inter-process lock.

Ports are chosen once (a free one, at first need) and recorded, so a restarted cluster keeps its addresses and
kubeconfigs, DSNs and shell exports written earlier stay valid. Several pytest sessions (several engineers)
may run ``up`` at the same time: everything that changes the state directory runs under :func:`locked`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from agentrun_dev import settings as settings_mod


@contextlib.contextmanager
def flocked(lock_file: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``lock_file`` (blocking) for the duration; its directory is made. Other
    processes (several pytest sessions, a second `agentrun dev up`) wait on the same file."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def locked(s: settings_mod.Settings) -> contextlib.AbstractContextManager[None]:
    """Hold the state directory's exclusive lock (blocking) for the duration."""
    s.state_dir.mkdir(parents=True, exist_ok=True)
    return flocked(s.lock_file)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def read_ports(s: settings_mod.Settings) -> dict[str, int]:
    try:
        data = json.loads(s.ports_file.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    return {str(k): int(v) for k, v in data.items()}


def port(s: settings_mod.Settings, name: str) -> int:
    """The recorded port for ``name``, choosing and recording a free one on first use.

    Callers that may race should hold :func:`locked`; a port is chosen once and never changes afterwards.
    """
    ports = read_ports(s)
    if name in ports:
        return ports[name]
    taken = set(ports.values())
    chosen = _free_port()
    while chosen in taken:
        chosen = _free_port()
    ports[name] = chosen
    s.state_dir.mkdir(parents=True, exist_ok=True)
    tmp = s.ports_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(ports, indent=2, sort_keys=True) + "\n")
    tmp.replace(s.ports_file)
    return chosen


def port_is_listening(port_: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port_)) == 0


# --- pid files ------------------------------------------------------------------------------------------


def pid_file(s: settings_mod.Settings, name: str) -> Path:
    return s.pid_dir / f"{name}.pid"


def read_pid(s: settings_mod.Settings, name: str) -> int | None:
    """The recorded pid of ``name`` if that process is still alive (and not a zombie), else None."""
    try:
        pid = int(pid_file(s, name).read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    return pid if pid_alive(pid) else None


def write_pid(s: settings_mod.Settings, name: str, pid: int) -> None:
    s.pid_dir.mkdir(parents=True, exist_ok=True)
    pid_file(s, name).write_text(f"{pid}\n")


def clear_pid(s: settings_mod.Settings, name: str) -> None:
    pid_file(s, name).unlink(missing_ok=True)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by its parent) answers kill(0) but is not running.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return fields[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def stop_pid(pid: int, *, grace_s: float = 10.0) -> None:
    """SIGTERM the process group led by ``pid`` (our daemons lead their own session), SIGKILL after grace."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            if not pid_alive(pid):
                return
            time.sleep(0.1)
