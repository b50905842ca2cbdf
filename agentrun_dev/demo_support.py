"""Helpers of the demo (:mod:`agentrun_dev.demo`): printing, commands, the dev cluster's environment, and
the demo's operator process (pid and log under ``$AGENTRUN_DEV_HOME/demo/``).
"""

from __future__ import annotations

import json
import os
import pathlib
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agentrun_dev import state, waiting  # the demo runs only beside the dev cluster

REPO = pathlib.Path(__file__).resolve().parents[1]

_T0 = time.monotonic()


def say(message: str) -> None:
    print(f"\033[1;36m[demo {time.monotonic() - _T0:6.1f}s]\033[0m {message}", flush=True)


def step(title: str) -> None:
    print(f"\n\033[1m== {title}\033[0m", flush=True)


class DemoError(RuntimeError):
    pass


def run(cmd: Sequence[str], env: Mapping[str, str], *, show: bool = True, check: bool = True) -> str:
    """Run a command the user could type, echoing it and its output."""
    print(f"  $ {shlex.join(cmd)}", flush=True)
    result = subprocess.run(list(cmd), env=dict(env), capture_output=True, text=True, check=False)
    if show and result.stdout.strip():
        print("    " + result.stdout.rstrip().replace("\n", "\n    "), flush=True)
    if result.returncode != 0 and check:
        raise DemoError(f"{shlex.join(cmd)} failed ({result.returncode}): {result.stderr.strip()}")
    return result.stdout


def dev_env() -> dict[str, str]:
    """``agentrun dev env`` parsed: KUBECONFIG, AGENTRUN_DSN, AGENTRUN_SMTP_*, AGENTRUN_DEV_HOME."""
    out = subprocess.run(
        [*_agentrun(), "dev", "env"], capture_output=True, text=True, check=True, env=dict(os.environ)
    ).stdout
    values: dict[str, str] = {}
    for line in out.splitlines():
        if line.startswith("export ") and "=" in line:
            key, _, value = line[len("export ") :].partition("=")
            values[key] = shlex.split(value)[0] if value else ""
    for key in (
        "KUBECONFIG",
        "AGENTRUN_DSN",
        "AGENTRUN_SMTP_HOST",
        "AGENTRUN_SMTP_PORT",
        "AGENTRUN_DEV_HOME",
    ):
        if not values.get(key):
            raise DemoError(
                f"`agentrun dev env` did not print {key}: is the dev cluster up (agentrun dev up)?"
            )
    return values


def _agentrun() -> list[str]:
    found = shutil.which("agentrun", path=str(pathlib.Path(sys.executable).parent))
    return (
        [found] if found else [sys.executable, "-c", "import sys; from agentrun import cli; cli.entrypoint()"]
    )


def _state_dir(env: Mapping[str, str]) -> pathlib.Path:
    path = pathlib.Path(env["AGENTRUN_DEV_HOME"]) / "demo"
    path.mkdir(parents=True, exist_ok=True)
    return path


def wait_until(what: str, check: Callable[[], Any], timeout: float, interval: float = 0.5) -> Any:
    value = waiting.poll(check, timeout, interval)
    if not value:
        raise DemoError(f"timed out after {timeout:.0f}s waiting for {what}")
    return value


# --- the operator, as a background process --------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def operator_pid(env: Mapping[str, str]) -> int | None:
    pid_file = _state_dir(env) / "operator.pid"
    try:
        pid = int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pid if state.pid_alive(pid) else None


def metrics_url(env: Mapping[str, str]) -> str:
    port = (_state_dir(env) / "operator.port").read_text().strip()
    return f"http://127.0.0.1:{port}/metrics"


# Service-account tokens are short-lived; a demo operator older than this is restarted with a fresh one.
TOKEN_SECONDS = 12 * 3600
REUSE_SECONDS = 6 * 3600


def operator_kubeconfig(env: Mapping[str, str], token: str) -> pathlib.Path:
    """A kubeconfig for the operator's own ServiceAccount (deploy/base RBAC), not the admin: the demo's
    operator runs with exactly the permissions a real cluster gives it."""
    import yaml

    admin = yaml.safe_load(pathlib.Path(env["KUBECONFIG"]).read_text())
    cluster = admin["clusters"][0]["cluster"]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "dev", "cluster": cluster}],
        "users": [{"name": "agentrun-operator", "user": {"token": token}}],
        "contexts": [{"name": "operator", "context": {"cluster": "dev", "user": "agentrun-operator"}}],
        "current-context": "operator",
    }
    path = _state_dir(env) / "operator.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def start_operator(env: Mapping[str, str], namespace: str, kubeconfig: pathlib.Path) -> tuple[int, bool]:
    """(pid, started now). Reuses a running demo operator unless its token is getting old; else starts
    ``agentrun operator`` detached, with ``kubeconfig``."""
    state = _state_dir(env)
    pid = operator_pid(env)
    started_file = state / "operator.started"
    if pid is not None:
        try:
            age = time.time() - float(started_file.read_text())
        except (OSError, ValueError):
            age = float("inf")
        if age < REUSE_SECONDS:
            return pid, False
        stop_operator(env)
    port = _free_port()
    op_env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTRUN_")}
    op_env.update(
        {
            "KUBECONFIG": str(kubeconfig),
            "AGENTRUN_DSN": env["AGENTRUN_DSN"],
            "AGENTRUN_WATCH_NAMESPACES": namespace,
            "AGENTRUN_LEADER_NAMESPACE": namespace,
            "AGENTRUN_LEADER_DURATION_SECONDS": "5",
            "AGENTRUN_METRICS_PORT": str(port),
            "AGENTRUN_WORKER_SERVICE_ACCOUNT": "agentrun-worker",
            "AGENTRUN_POLL_SECONDS": "1",
            # Notification receivers of the dev cluster listen on loopback, which the operator refuses unless
            # allowed (README "Notifications"): allow 127.0.0.1 only.
            "AGENTRUN_NOTIFY_ALLOWED_NETWORKS": "127.0.0.1/32",
            "AGENTRUN_WORKER_GRACE_SECONDS": "20",
            "PYTHONUNBUFFERED": "1",
        }
    )
    log = (state / "operator.log").open("ab")
    proc = subprocess.Popen(
        [*_agentrun(), "operator"],
        env=op_env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # outlives the demo; `agentrun demo stop` ends it
        cwd=str(state),
    )
    (state / "operator.pid").write_text(f"{proc.pid}\n")
    (state / "operator.port").write_text(f"{port}\n")
    started_file.write_text(f"{time.time()}\n")
    return proc.pid, True


def wait_operator_healthy(env: Mapping[str, str], pid: int, timeout: float = 60) -> None:
    url = metrics_url(env).replace("/metrics", "/healthz")

    def healthy() -> bool:
        if not state.pid_alive(pid):
            log = (_state_dir(env) / "operator.log").read_text(errors="replace")[-3000:]
            raise DemoError(f"the operator exited; the end of its log:\n{log}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    wait_until(f"the operator's {url}", healthy, timeout)


def stop_operator(env: Mapping[str, str], timeout: float = 20) -> int | None:
    pid = operator_pid(env)
    if pid is None:
        return None
    os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while state.pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if state.pid_alive(pid):
        os.killpg(pid, signal.SIGKILL)
    (_state_dir(env) / "operator.pid").unlink(missing_ok=True)
    return pid


def migrate(dsn: str) -> list[str]:
    """Apply agentrun's migrations (and LangGraph's checkpoint tables); returns what was applied."""
    import psycopg

    from agentrun_core import store

    with psycopg.connect(dsn, autocommit=True) as conn:
        return list(store.migrate(conn))


def http_json(url: str, method: str = "GET") -> Any:
    request = urllib.request.Request(url, method=method)
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)
