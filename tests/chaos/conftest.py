"""The chaos suites' shared fixtures: one zygote pool and one pair of real providers per test module.

Module-scoped on purpose: each module's parametrized tests share the pool (forking is what makes hundreds of
worker processes affordable) and count effects at the same providers, keyed per run.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import worker_harness


@pytest.fixture(scope="module")
def zygotes() -> Iterator[worker_harness.ZygotePool]:
    pool = worker_harness.ZygotePool(worker_harness.CONCURRENCY)
    yield pool
    pool.close()


@pytest.fixture(scope="module")
def providers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[worker_harness.Providers]:
    with worker_harness.real_providers(tmp_path_factory.mktemp("providers")) as found:
        yield found


@pytest.fixture
def leased_worker(
    pg_dsn: str,
    namespace: str,
    admin_kubeconfig: Path,
    providers: worker_harness.Providers,
    zygotes: worker_harness.ZygotePool,
) -> worker_harness.Worker:
    """Workers of the test's database, holding real 3 s Leases in its namespace, forked from the module's
    zygotes and calling the module's providers."""
    return worker_harness.Worker(
        pg_dsn, providers, kubeconfig=admin_kubeconfig, namespace=namespace, lease_duration=3, zygotes=zygotes
    )
