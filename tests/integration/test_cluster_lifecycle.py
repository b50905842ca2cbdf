"""`agentrun dev up` is idempotent and recovers a stale state (processes gone, as after a reboot).

Runs a second, private dev cluster in a temporary state directory (same cached binaries), so the shared
cluster other sessions use is never disturbed.
"""

from __future__ import annotations

import dataclasses
import io
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import kubernetes
import psycopg
import pytest

from agentrun_dev import cluster, postgres, procs, state
from agentrun_dev import settings as dev_settings

# serial: a second whole cluster (etcd, API server, controller-manager) started and killed: the CPU it takes
# would slow every test beside it past its deadlines (scripts/test runs it alone, after the rest).
pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.serial]


@pytest.fixture
def private() -> Iterator[dev_settings.Settings]:
    # Not pytest's tmp_path: concurrent pytest sessions (other engineers) prune old /tmp/pytest-of-<user>/
    # dirs, which could delete this cluster's state while it runs.
    root = Path(tempfile.mkdtemp(prefix="agentrun-dev-lifecycle-"))
    s = dataclasses.replace(dev_settings.from_env(), state_dir=root / "dev")
    try:
        yield s
    finally:
        cluster.down(s, purge=True, out=io.StringIO())
        shutil.rmtree(root, ignore_errors=True)


def _pids(s: dev_settings.Settings) -> dict[str, int | None]:
    return {p.name: p.pid for p in cluster.status(s)}


def _namespaces(s: dev_settings.Settings) -> set[str]:
    with kubernetes.config.new_client_from_config(config_file=str(s.kubeconfig)) as api:
        return {n.metadata.name for n in kubernetes.client.CoreV1Api(api).list_namespace().items}


def test_up_is_idempotent_and_recovers_after_processes_die(private: dev_settings.Settings) -> None:
    s = private
    ports = cluster.up(s, out=io.StringIO())
    assert all(p.healthy for p in cluster.status(s)), cluster.status(s)
    assert "kube-system" in _namespaces(s)
    before = _pids(s)

    t0 = time.monotonic()
    assert cluster.up(s, out=io.StringIO()) == ports
    assert time.monotonic() - t0 < 5
    assert _pids(s) == before  # nothing restarted

    # "Reboot": every process dies without cleaning up; one pid file now names an unrelated live process.
    for name, pid in before.items():
        if pid is not None:
            os.killpg(pid, signal.SIGKILL) if name != "postgres" else os.kill(pid, signal.SIGKILL)
    for pid in before.values():
        if pid is not None:
            while state.pid_alive(pid):
                time.sleep(0.05)
    state.write_pid(s, "kube-apiserver", os.getpid())
    assert not any(p.healthy for p in cluster.status(s))

    assert cluster.up(s, out=io.StringIO()) == ports  # same ports, so old kubeconfigs and DSNs stay valid
    assert all(p.healthy for p in cluster.status(s)), cluster.status(s)
    assert "kube-system" in _namespaces(s)  # etcd data and the CA survived
    assert postgres.healthy(s)

    env = {**os.environ, "AGENTRUN_DEV_HOME": str(s.state_dir)}
    cli = [str(Path(sys.executable).parent / "agentrun"), "dev"]  # the console script
    status = subprocess.run([*cli, "status"], env=env, capture_output=True, text=True, timeout=60)
    assert status.returncode == 0, status.stdout + status.stderr
    assert "kube-apiserver" in status.stdout
    exports = subprocess.run(
        [*cli, "env"], env=env, capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert f"export KUBECONFIG={s.kubeconfig}" in exports
    assert f"export AGENTRUN_DSN=postgresql://postgres@127.0.0.1:{ports.postgres}/agentrun" in exports

    # The product CRD (applied by `up`) is restored by the next `up` if someone deleted it.
    crd = "agentruns.agentrun.dev"
    cluster.kubectl(s, "delete", "crd", crd, "--wait=true")
    cluster.up(s, out=io.StringIO())
    assert (
        cluster.kubectl(s, "get", "crd", crd, "-o", "name").strip()
        == f"customresourcedefinition.apiextensions.k8s.io/{crd}"
    )

    # A daemon whose pid file is lost (deleted by hand, overwritten by a racing `up`) is still stopped by
    # `down`: it is found by its command line (its marker and this state directory).
    lost = {name: pid for name, pid in _pids(s).items() if name in {"smtp-sink", "kube-controller-manager"}}
    assert all(lost.values()), lost
    for name in lost:
        state.clear_pid(s, name)
    said = io.StringIO()
    cluster.down(s, out=said)
    assert not any(p.healthy or p.pid for p in cluster.status(s))
    for name, pid in lost.items():
        assert pid is not None and not state.pid_alive(pid), (name, said.getvalue())
        assert f"stopped {name} (pid {pid}, not in its pid file)" in said.getvalue()
    assert not [pid for part in cluster.parts(s) for pid in procs.strays(s, part.marker)]


def test_down_stops_the_durable_postgres_the_benchmark_left(private: dev_settings.Settings) -> None:
    """The benchmark's durable server (every commit flushed) runs beside the dev cluster's; a benchmark killed
    before its own teardown leaves it running, and ``down`` stops it."""
    s = private
    durable = postgres.durable(s)
    postgres.ensure_durable(s)
    assert postgres.healthy(durable)
    with psycopg.connect(postgres.dsn(durable, "postgres"), autocommit=True) as conn:
        assert conn.execute("SHOW fsync").fetchone() == ("on",)
    pid = postgres.info(durable).pid
    assert pid is not None and state.pid_alive(pid)

    said = io.StringIO()
    cluster.down(s, out=said)
    assert "stopped the durable postgres" in said.getvalue()
    assert not postgres.healthy(durable) and not state.pid_alive(pid)
