"""Daemon processes of the dev cluster: start detached, record pid, check health, stop.

Each daemon runs in its own session (so ``agentrun dev up``, a terminal or a pytest session can exit without
taking it along), with stdin closed and output appended to ``<state>/logs/<name>.log``. A pid is trusted only
if that process is alive *and* its command line still names the program we started: after a reboot pid files
point at nothing or at unrelated processes, and ``up`` must then start afresh.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from agentrun_dev import settings as settings_mod
from agentrun_dev import state

# Popen handles of daemons started by this process: kept so they are not reported as leaked and can be reaped.
_children: dict[int, subprocess.Popen[bytes]] = {}


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def running_pid(s: settings_mod.Settings, name: str, marker: str) -> int | None:
    """The pid of daemon ``name`` if alive and its command line contains ``marker``."""
    for child_pid, child in list(_children.items()):
        if child.poll() is not None:  # reap our own exited children so they do not linger as zombies
            del _children[child_pid]
    pid = state.read_pid(s, name)
    if pid is None:
        return None
    # Not ours (a reused pid after a reboot) -> None. The pid file is left alone: `start` overwrites it, and a
    # transiently unreadable command line must not make a live daemon look gone for good.
    if not any(marker in arg for arg in _cmdline(pid)):
        return None
    return pid


def log_path(s: settings_mod.Settings, name: str) -> Path:
    return s.log_dir / f"{name}.log"


def start(
    s: settings_mod.Settings,
    name: str,
    argv: list[str],
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> int:
    s.log_dir.mkdir(parents=True, exist_ok=True)
    log = log_path(s, name)
    with open(log, "ab") as fh:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        fh.write(f"\n=== {stamp} starting: {' '.join(argv)}\n".encode())
        fh.flush()
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env if env is not None else dict(os.environ),
            cwd=cwd or s.state_dir,
            close_fds=True,
        )
    _children[proc.pid] = proc
    state.write_pid(s, name, proc.pid)
    _argv_file(s, name).write_text(json.dumps(argv))
    return proc.pid


def _argv_file(s: settings_mod.Settings, name: str) -> Path:
    return s.pid_dir / f"{name}.argv.json"


def recorded_argv(s: settings_mod.Settings, name: str) -> list[str] | None:
    """The command line daemon ``name`` was last started with (None if unknown)."""
    try:
        data = json.loads(_argv_file(s, name).read_text())
    except (FileNotFoundError, ValueError):
        return None
    return [str(a) for a in data] if isinstance(data, list) else None


def stop(s: settings_mod.Settings, name: str, marker: str, grace_s: float = 10.0) -> bool:
    """Stop daemon ``name`` (its whole process group). True if something was running."""
    pid = running_pid(s, name, marker)
    if pid is not None:
        state.stop_pid(pid, grace_s=grace_s)
        child = _children.pop(pid, None)
        if child is not None:
            child.wait(timeout=5)
    state.clear_pid(s, name)
    return pid is not None


def _names_dir(arg: str, roots: tuple[str, ...]) -> bool:
    # "--data-dir=/x/dev/etcd", "/x/dev/pki/ca.crt": the state directory as a whole path prefix.
    return any(p == r or p.startswith(r + "/") for p in arg.split("=") for r in roots)


def strays(s: settings_mod.Settings, marker: str) -> list[int]:
    """Live processes of this user whose command line holds ``marker`` and names this state directory.

    A daemon whose pid file was lost or overwritten (a second ``up`` racing on the same state, a pid file
    deleted by hand) is invisible to :func:`stop`; ``down`` sweeps these too, so whatever ``up`` started is
    gone afterwards. Both conditions must hold, so a user's ``tail -f <state>/logs/...`` or another state
    directory's daemon is never touched.
    """
    roots = tuple({str(s.state_dir), str(s.state_dir.resolve())})
    me, uid = os.getpid(), os.getuid()
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
        except OSError:
            continue
        argv = _cmdline(int(entry.name))
        if any(marker in a for a in argv) and any(_names_dir(a, roots) for a in argv):
            found.append(int(entry.name))
    return found


def sweep(s: settings_mod.Settings, marker: str, grace_s: float = 10.0) -> list[int]:
    """Stop every :func:`strays` process (its process group if it leads one); returns their pids."""
    found = strays(s, marker)
    for pid in found:
        state.stop_pid(pid, grace_s=grace_s)
        child = _children.pop(pid, None)
        if child is not None:
            child.wait(timeout=5)
    return found


def log_tail(s: settings_mod.Settings, name: str, lines: int = 20) -> str:
    try:
        text = log_path(s, name).read_text(errors="replace")
    except FileNotFoundError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def http_ok(url: str, ctx: ssl.SSLContext | None = None, timeout_s: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s, context=ctx) as resp:
            return 200 <= int(resp.status) < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


def insecure_context() -> ssl.SSLContext:
    """For the controller-manager's self-signed health endpoint on loopback."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def wait_until(
    what: str,
    check: Callable[[], bool],
    timeout_s: float,
    s: settings_mod.Settings,
    name: str,
    alive: Callable[[], bool] | None = None,
) -> None:
    """Poll ``check`` until true; fail early (with the log tail) if the process died."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if alive is not None and not alive():
            raise RuntimeError(
                f"{what}: the process exited. Last lines of {log_path(s, name)}:\n{log_tail(s, name)}"
            )
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{what}: not healthy after {timeout_s:.0f}s. Last lines of {log_path(s, name)}:\n"
                f"{log_tail(s, name)}"
            )
        time.sleep(0.25)
