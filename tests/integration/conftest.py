"""Integration fixtures of the operator, reused by other suites (observability, demo, chaos).

* ``worker_account(namespace)`` — the worker ServiceAccount ``agentrun-worker`` with its real least-privilege
  Role (Leases get/create/update in the namespace, nothing else), created in the test's namespace.
* ``operator`` — ``agentrun operator`` as a subprocess scoped to the test's namespace
  (``AGENTRUN_WATCH_NAMESPACES``, leader Lease in that namespace), against the dev cluster and the test's
  ``pg_dsn`` (``tests.support.operator_proc.OperatorHandle``).
* ``team`` — people of the test (kubeconfigs of real identities) bound to their ClusterRoles.
* ``provider_url``, ``sink``, ``providers`` (both, for workers) — a real HTTP provider and a real SMTP sink
  of the test's own; ``pool``: a
  connection pool on the test's database.

The helpers for tests that drive AgentRuns (``create_run``, ``wait_for``, ``wait_phase``, ``run_status``,
``events``, ``pods``, ``kubectl`` …) are in ``tests.support``.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes
import psycopg_pool
import pytest

from agentrun_dev import http_provider, smtp_sink
from tests.support import kube as kube_support
from tests.support import worker_harness
from tests.support.kube import create_worker_account
from tests.support.operator_proc import OperatorHandle, Operators, closing, operator_env

# --- worker service account -------------------------------------------------------------------------------


@pytest.fixture
def worker_account(kube: kubernetes.client.ApiClient, namespace: str) -> str:
    return create_worker_account(kube, namespace)


# --- the operator subprocess ------------------------------------------------------------------------------


@pytest.fixture
def operators(
    dev_cluster: Any,
    namespace: str,
    pg_dsn: str,
    worker_account: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[Operators]:
    """``operators(extra_env=None)`` -> a handle of operator replicas of the test's own, scoped to its
    namespace and database, not started yet; stopped after the test (their logs shown when it failed)."""
    with contextlib.ExitStack() as stack:

        def make(extra_env: dict[str, str] | None = None) -> OperatorHandle:
            env = {**operator_env(dev_cluster, namespace, pg_dsn), **(extra_env or {})}
            return stack.enter_context(closing(OperatorHandle(namespace, pg_dsn, env, tmp_path), request))

        yield make


@pytest.fixture
def operator(kube: kubernetes.client.ApiClient, operators: Operators) -> OperatorHandle:
    """One operator replica, leader of its namespace, already running when the test starts."""
    handle = operators()
    handle.start()
    handle.wait_leader(kube, timeout=60)
    return handle


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    setattr(item, f"rep_{report.when}", report)


@pytest.fixture
def team(
    kube: kubernetes.client.ApiClient, namespace: str, identity: Callable[..., Path]
) -> kube_support.Team:
    """``team({"manager": ("managers", "agentrun-approver"), ...})`` -> each person's kubeconfig, bound to
    their ClusterRoles in the test's namespace (``tests.support.kube.team``)."""
    return functools.partial(kube_support.team, kube, namespace, identity)


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[http_provider.HttpProvider]:
    """A real HTTP provider of the test's own (effects are counted where they arrive)."""
    with http_provider.HttpProvider(tmp_path / "http") as found:
        yield found


@pytest.fixture
def provider_url(tmp_path: Path) -> Iterator[str]:
    """The URL of a real HTTP provider of the test's own (effects are counted where they arrive)."""
    with http_provider.HttpProvider(tmp_path / "http-provider") as provider:
        yield provider.url


@pytest.fixture
def providers(tmp_path: Path) -> Iterator[worker_harness.Providers]:
    """A real HTTP provider and SMTP sink of the test's own, as the workers' tools reach them."""
    with worker_harness.real_providers(tmp_path / "providers") as found:
        yield found


@pytest.fixture
def pool(pg_dsn: str) -> Iterator[psycopg_pool.ConnectionPool[Any]]:
    """A small autocommit pool on the test's database (what the worker's graph and ledger run on)."""
    with psycopg_pool.ConnectionPool(pg_dsn, min_size=1, max_size=4, kwargs={"autocommit": True}) as p:
        yield p


@pytest.fixture
def sink(tmp_path: Path) -> Iterator[smtp_sink.SmtpSink]:
    """A real SMTP sink of the test's own (emails are counted where they arrive)."""
    with smtp_sink.SmtpSink(tmp_path / "smtp") as server:
        yield server
