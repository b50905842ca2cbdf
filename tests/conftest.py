"""Shared fixtures: the dev Postgres, the dev cluster, identities.

* ``pg_dsn`` — a fresh database per test, cloned (``CREATE DATABASE … TEMPLATE``, milliseconds) from a
  template migrated once per session with ``agentrun_core.store.migrate``.
* ``dev_cluster`` — session; runs ``agentrun dev up`` (idempotent) and leaves the cluster running, because
  other pytest sessions (other engineers, other terminals) use the same cluster at the same time.
* ``kube`` — admin ``kubernetes.client.ApiClient``; ``namespace`` — a fresh labelled namespace per test;
  ``identity(user, groups)`` — kubeconfig path of another real identity (client certificate from the dev CA).
* ``receiver`` — a webhook receiver on loopback (``agentrun_dev.webhook_receiver``): every request it read.

Tests using ``pg_dsn`` are marked ``postgres``; tests using the cluster fixtures are marked ``cluster``.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import secrets
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import kubernetes
import psycopg
import psycopg.sql
import pytest

from agentrun_dev import cluster, finalizers, identities, postgres, state, webhook_receiver
from agentrun_dev import settings as dev_settings

_PG_FIXTURES = {"pg_dsn", "dev_postgres", "pg_template"}
_CLUSTER_FIXTURES = {"dev_cluster", "kube", "namespace", "identity", "admin_kubeconfig"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if names & _PG_FIXTURES:
            item.add_marker(pytest.mark.postgres)
        if names & _CLUSTER_FIXTURES:
            item.add_marker(pytest.mark.cluster)


@pytest.fixture(scope="session")
def dev_settings_() -> dev_settings.Settings:
    return dev_settings.from_env()


# --- Postgres -------------------------------------------------------------------------------------------

_TPL_PREFIX = "agentrun_tpl_"
_TEST_PREFIX = "agentrun_t_"


def _drop_orphans(conn: psycopg.Connection) -> None:
    """Drop template/test databases left by pytest sessions that died (their pid is gone)."""
    rows = conn.execute(
        "SELECT datname FROM pg_database"
        " WHERE datname LIKE 'agentrun\\_tpl\\_%' OR datname LIKE 'agentrun\\_t\\_%'"
    ).fetchall()
    for (name,) in rows:
        m = re.match(r"agentrun_(?:tpl|t)_(\d+)", name)
        if m and not state.pid_alive(int(m.group(1))):
            with contextlib.suppress(psycopg.Error):
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def dev_postgres(dev_settings_: dev_settings.Settings) -> postgres.Info:
    """The dev cluster's Postgres, started if needed (it is part of ``agentrun dev up``)."""
    with state.locked(dev_settings_):
        return postgres.ensure_running(dev_settings_)


@pytest.fixture(scope="session")
def pg_template(dev_settings_: dev_settings.Settings, dev_postgres: postgres.Info) -> Iterator[str]:
    """Name of this session's template database, migrated once."""
    name = f"{_TPL_PREFIX}{os.getpid()}"
    admin = postgres.dsn(dev_settings_, "postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        _drop_orphans(conn)
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    from agentrun_core import store

    with psycopg.connect(postgres.dsn(dev_settings_, name)) as conn:
        store.migrate(conn)
        conn.commit()
    yield name
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


_db_counter = itertools.count(1)


@pytest.fixture
def pg_dsn(dev_settings_: dev_settings.Settings, pg_template: str) -> Iterator[str]:
    """DSN of a fresh database, already migrated, dropped after the test, with the tenant roles the test
    provisioned in it (roles are global to the Postgres cluster: they would outlive the database)."""
    name = f"{_TEST_PREFIX}{os.getpid()}_{next(_db_counter)}"
    admin = postgres.dsn(dev_settings_, "postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{pg_template}"')
    yield postgres.dsn(dev_settings_, name)
    roles = _tenant_roles(postgres.dsn(dev_settings_, name))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        for role in roles:
            # Refused while the role still holds privileges in another database (a test of another session
            # provisioned the same namespace, whose role name is derived from it): that one drops it.
            with contextlib.suppress(psycopg.errors.DependentObjectsStillExist):
                conn.execute(psycopg.sql.SQL("DROP ROLE IF EXISTS {}").format(psycopg.sql.Identifier(role)))


@pytest.fixture
def empty_dsn(dev_settings_: dev_settings.Settings, dev_postgres: postgres.Info) -> Iterator[str]:
    """DSN of an empty database (no agentrun table at all: what `agentrun migrate` or an old release starts
    from), dropped after the test."""
    name = f"{_TEST_PREFIX}{os.getpid()}_e{next(_db_counter)}"
    admin = postgres.dsn(dev_settings_, "postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield postgres.dsn(dev_settings_, name)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _tenant_roles(dsn: str) -> list[str]:
    """The tenant roles provisioned in the database ``dsn``, their privileges there revoked."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        roles = [
            str(r)
            for (r,) in conn.execute(  # a test may have dropped one itself
                "SELECT role_name FROM agentrun_tenants JOIN pg_roles ON rolname = role_name"
            ).fetchall()
        ]
        for role in roles:
            conn.execute(psycopg.sql.SQL("DROP OWNED BY {}").format(psycopg.sql.Identifier(role)))
    return roles


# --- the dev cluster ------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def dev_cluster(request: pytest.FixtureRequest, dev_settings_: dev_settings.Settings) -> cluster.Handle:
    """The dev cluster, brought up if needed and left running (other sessions share it).

    Output capture is suspended meanwhile, so a first-time control-plane build shows its progress.
    """
    capman = request.config.pluginmanager.getplugin("capturemanager")
    ctx = capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext()
    with ctx:
        cluster.up(dev_settings_, out=sys.stderr)
    return cluster.handle(dev_settings_)


@pytest.fixture(scope="session")
def admin_kubeconfig(dev_cluster: cluster.Handle) -> Path:
    return dev_cluster.kubeconfig


@pytest.fixture(scope="session")
def kube(admin_kubeconfig: Path) -> Iterator[kubernetes.client.ApiClient]:
    """Admin ``ApiClient`` (group ``system:masters``)."""
    api = kubernetes.config.new_client_from_config(config_file=str(admin_kubeconfig))
    _delete_orphan_namespaces(api)
    yield api
    api.close()


def _delete_orphan_namespaces(api: kubernetes.client.ApiClient) -> None:
    """Namespaces left by test sessions that died before their teardown (their pid is gone)."""
    core = kubernetes.client.CoreV1Api(api)
    for ns in core.list_namespace(label_selector="agentrun.dev/test=true").items:
        session = (ns.metadata.labels or {}).get("agentrun.dev/test-session", "")
        if session.isdigit() and not state.pid_alive(int(session)):
            finalizers.release_namespace(api, ns.metadata.name)
            if ns.status.phase != "Terminating":
                with contextlib.suppress(kubernetes.client.ApiException):
                    core.delete_namespace(ns.metadata.name, propagation_policy="Background")
    # A benchmark's namespace is deleted at its end (bench/cluster.py): one still Terminating is over.
    for ns in core.list_namespace(label_selector="agentrun.dev/bench=true").items:
        if ns.status.phase == "Terminating":
            finalizers.release_namespace(api, ns.metadata.name)


def _namespace_name(test_name: str) -> str:
    base = re.sub(r"[^a-z0-9-]+", "-", test_name.lower().removeprefix("test_")).strip("-") or "t"
    return f"{base[:50].rstrip('-')}-{secrets.token_hex(3)}"


@pytest.fixture
def namespace(request: pytest.FixtureRequest, kube: kubernetes.client.ApiClient) -> Iterator[str]:
    """A fresh namespace for this test (labelled ``agentrun.dev/test``), deleted afterwards.

    Waits for its ``default`` ServiceAccount (made by the controller-manager) so pods can be created at once.
    """
    core = kubernetes.client.CoreV1Api(kube)
    name = _namespace_name(request.node.name)
    labels = {"agentrun.dev/test": "true", "agentrun.dev/test-session": str(os.getpid())}
    core.create_namespace({"metadata": {"name": name, "labels": labels}})
    deadline = time.monotonic() + 30
    while True:
        try:
            core.read_namespaced_service_account("default", name)
            break
        except kubernetes.client.ApiException as exc:
            if exc.status != 404 or time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    yield name
    finalizers.release_namespace(kube, name)
    with contextlib.suppress(kubernetes.client.ApiException):
        core.delete_namespace(name, propagation_policy="Background")


@pytest.fixture
def identity(dev_cluster: cluster.Handle) -> Callable[..., Path]:
    """``identity("alice", ["devs"])`` -> kubeconfig path of that user (a client cert from the dev CA)."""

    def make(user: str, groups: list[str] | tuple[str, ...] = ()) -> Path:
        return identities.kubeconfig_for(user, list(groups), dev_cluster.settings)

    return make


@pytest.fixture
def receiver() -> Iterator[webhook_receiver.Receiver]:
    server = webhook_receiver.Receiver().start()
    try:
        yield server
    finally:
        server.close()
