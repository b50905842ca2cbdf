"""Tenant isolation in Postgres: a worker's credentials of namespace A, used with arbitrary SQL.

Real Postgres, real roles (``agentrun_provision_tenant``), row-level security of migration 0005. Namespace A's
role must see and change only A's runs, effects, approvals, heartbeats, step events, attempts and LangGraph
checkpoints, must never write an approval decision, and the real worker must still run a whole run (with an
approval) as that role.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import psycopg.conninfo
import pytest

from agent_operator.act import tenants
from agentrun_core import store
from agentrun_core.store import connect
from tests.support import pg, worker_harness
from tests.support.queries import one_row

pytestmark = pytest.mark.postgres

RUN_TABLES = (
    "agentrun_attempts",
    "agentrun_effects",
    "agentrun_approvals",
    "agentrun_heartbeats",
    "agentrun_step_batches",
    "agentrun_step_events",  # a view of the batches (migration 21): what a tenant reads through it
)
CHECKPOINT_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")


def _seed(admin: psycopg.Connection[Any], namespace: str, run_id: str, dsn: str) -> None:
    """A run of ``namespace`` with a row in every table (an approval too), written by the operator/admin."""
    pg.seed_run_rows(admin, dsn, namespace=namespace, run_id=run_id)
    store.record_approval(
        admin, run_id=run_id, epoch=1, approval_id=f"a-{run_id}", interrupt_id="i", prompt={"q": 1}
    )


@pytest.fixture
def tenant(pg_dsn: str) -> Iterator[Callable[[str], tuple[str, str]]]:
    """tenant(label) -> (namespace, DSN of its worker role), provisioned as the operator does."""

    def make(label: str) -> tuple[str, str]:
        namespace = f"{label}-{secrets.token_hex(4)}"
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            role, password = store.provision_random_tenant(admin, namespace)
        return namespace, tenants.worker_dsn(pg_dsn, role, password)

    yield make


@pytest.fixture
def two(pg_dsn: str, tenant: Callable[[str], tuple[str, str]]) -> dict[str, Any]:
    ns_a, dsn_a = tenant("team-a")
    ns_b, _ = tenant("team-b")
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        _seed(admin, ns_a, "run-a", pg_dsn)
        _seed(admin, ns_b, "run-b", pg_dsn)
    return {"a": ns_a, "b": ns_b, "dsn_a": dsn_a}


def _refused(conn: psycopg.Connection[Any], sql: str, params: Any = None) -> str:
    """Run ``sql``; the error text if Postgres refused it, "" if it ran."""
    try:
        conn.execute(sql, params)
    except psycopg.Error as exc:
        return str(exc)
    return ""


STORED_SECRET = (  # a namespace's role and what Postgres stores as its password
    "SELECT a.rolname, a.rolpassword FROM pg_authid a"
    " JOIN agentrun_tenants t ON t.role_name = a.rolname WHERE t.namespace = %s"
)


def test_a_role_stored_as_a_verifier_logs_in_with_its_password_and_no_other(
    pg_dsn: str, tenant: Callable[[str], tuple[str, str]]
) -> None:
    """The operator stores the SCRAM verifier of a random password with a low iteration count
    (``store.RANDOM_SECRET_ITERATIONS``); Postgres checks logins against it (the dev cluster's pg_hba asks
    the worker roles for SCRAM)."""
    namespace, dsn = tenant("team-v")
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        role, stored = one_row(admin, STORED_SECRET, (namespace,))
    assert stored.startswith(f"SCRAM-SHA-256${store.RANDOM_SECRET_ITERATIONS}:")
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT current_user").fetchone() == (role,)
    wrong = connect.with_credentials(dsn, user=role, password=secrets.token_urlsafe(32))
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(wrong).close()


def test_checkpoint_tables_are_covered_after_langgraph_setup(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT relname, relkind, relrowsecurity, coalesce(reloptions, '{}') FROM pg_class"
            " WHERE relname = ANY(%s)",
            (list(RUN_TABLES + CHECKPOINT_TABLES + ("agentrun_runs",)),),
        ).fetchall()
    assert len(rows) == len(RUN_TABLES) + len(CHECKPOINT_TABLES) + 1
    assert all(on for _, kind, on, _ in rows if kind == "r"), rows
    # A view reads with its owner's rights unless it is security_invoker: row-level security would not apply.
    views = {name: options for name, kind, _, options in rows if kind == "v"}
    assert views == {"agentrun_step_events": ["security_invoker=true"]}, rows


def test_a_sees_and_changes_only_its_own_rows(two: dict[str, Any], pg_dsn: str) -> None:
    counts: dict[str, int] = {}
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        store.set_read_only(admin, "run-a", True)  # the deadline policy made it read-only
    with psycopg.connect(two["dsn_a"], autocommit=True) as a:
        assert a.execute("SELECT current_user").fetchone()[0].startswith("agentrun_ns_")  # type: ignore[index]
        runs = a.execute("SELECT run_id FROM agentrun_runs").fetchall()
        assert runs == [("run-a",)]
        for table in RUN_TABLES:
            ids = {r[0] for r in a.execute(f"SELECT run_id FROM {table}").fetchall()}
            assert ids == {"run-a"}, table
            counts[table] = len(ids)
        for table in CHECKPOINT_TABLES:
            ids = {r[0] for r in a.execute(f"SELECT thread_id FROM {table}").fetchall()}
            assert ids <= {"run-a"}, table
            assert not a.execute(f"SELECT 1 FROM {table} WHERE thread_id = 'run-b'").fetchall()
        # Writes aimed at B's rows touch nothing (RLS hides them) or are refused outright.
        for sql in (
            "UPDATE agentrun_runs SET status = 'cancelled' WHERE run_id = 'run-b'",
            "UPDATE agentrun_effects SET status = 'failed' WHERE run_id = 'run-b'",
            "UPDATE agentrun_heartbeats SET details = '{}' WHERE run_id = 'run-b'",
            "DELETE FROM checkpoints WHERE thread_id = 'run-b'",
            "DELETE FROM checkpoint_blobs WHERE thread_id = 'run-b'",
            "DELETE FROM checkpoint_writes WHERE thread_id = 'run-b'",
            "UPDATE checkpoints SET metadata = '{}' WHERE thread_id = 'run-b'",
        ):
            cur = a.execute(sql)
            assert cur.rowcount == 0, sql
        assert "row-level security" in _refused(
            a,
            "INSERT INTO agentrun_effects"
            " (idempotency_key, run_id, step, action, tool, args_hash, args, epoch)"
            " VALUES ('evil', 'run-b', 's', 'a', 't', 'x', '{}', 1)",
        )
        assert "row-level security" in _refused(
            a,
            "INSERT INTO checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel)"
            " VALUES ('run-b', '', 'c', 't', 0, 'x')",
        )
        assert "row-level security" in _refused(
            a,
            "INSERT INTO agentrun_approvals (approval_id, run_id, interrupt_id, prompt)"
            " VALUES ('a-evil', 'run-b', 'i', '{}')",
        )
        # No admitting runs, no lifting read-only, no moving a run to another namespace.
        assert "permission denied" in _refused(
            a,
            "INSERT INTO agentrun_runs (run_id, namespace, name, graph, input, spec_hash)"
            " VALUES ('x', %s, 'x', 'm:g', '{}', 'h')",
            (two["a"],),
        )
        for column, value in (
            ("read_only", "false"),
            ("namespace", f"'{two['b']}'"),
            ("approval_policy", "'{}'"),
            ("input", "'{\"evil\": true}'"),
            ("graph", "'evil:graph'"),
            # the image pin (0008) and a fork's lineage (0009): both migrations redefine the guard
            ("worker_image", "'evil/worker:latest'"),
            ("image_digest", "'sha256:0'"),
            ("image_generation", "7"),
            ("fork_of", "'{\"run_id\": \"run-b\"}'"),
        ):
            assert "permission denied" in _refused(a, f"UPDATE agentrun_runs SET {column} = {value}")
        # What a worker does keep is writable (a column added by a later migration needs no grant either).
        assert a.execute("UPDATE agentrun_runs SET current_step = 'x' WHERE run_id = 'run-a'").rowcount == 1
        # The tenant map and the provisioning function are out of reach; RLS cannot be switched off.
        assert "permission denied" in _refused(a, "SELECT * FROM agentrun_tenants")
        assert "permission denied" in _refused(a, "SELECT agentrun_provision_tenant('x', 'y')")
        assert "must be owner" in _refused(a, "ALTER TABLE agentrun_runs DISABLE ROW LEVEL SECURITY")
        assert "permission denied" in _refused(a, "TRUNCATE agentrun_approvals")
        assert a.execute("SELECT agentrun_run_is_mine('run-b')").fetchone() == (False,)
        # SET ROLE to the shared group changes nothing: the tenant is the session's login role.
        a.execute("SET ROLE agentrun_worker")
        assert a.execute("SELECT run_id FROM agentrun_runs").fetchall() == [("run-a",)]
    print(f"\ntenant A visible rows per table (B's hidden): {counts}")


def test_tenant_role_needs_its_password(two: dict[str, Any]) -> None:
    """Even in the dev cluster (trust for everyone else): a tenant role logs in with its Secret's password."""
    wrong = psycopg.conninfo.make_conninfo(two["dsn_a"], password="not-the-password")
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(wrong, connect_timeout=10).close()


def test_a_cannot_write_any_decision(two: dict[str, Any], pg_dsn: str) -> None:
    with psycopg.connect(two["dsn_a"], autocommit=True) as a:
        for target in ("run-a", "run-b"):
            for sql in (
                f"UPDATE agentrun_approvals SET status = 'approved' WHERE run_id = '{target}'",
                f"UPDATE agentrun_approvals SET decided_by = 'ceo' WHERE run_id = '{target}'",
                f"UPDATE agentrun_approvals SET payload = '{{\"approved\": true}}' WHERE run_id = '{target}'",
                f"DELETE FROM agentrun_approvals WHERE run_id = '{target}'",
            ):
                assert "permission denied" in _refused(a, sql), sql
        # An insert that tries to arrive decided: refused for the columns ...
        assert "permission denied" in _refused(
            a,
            "INSERT INTO agentrun_approvals (approval_id, run_id, interrupt_id, prompt, status, decided_by)"
            " VALUES ('a-x', 'run-a', 'i2', '{}', 'approved', 'ceo')",
        )
        # ... and what a worker may insert is pending, with Postgres's deadline and the run's policy.
        assert "permission denied" in _refused(
            a,
            "INSERT INTO agentrun_approvals (approval_id, run_id, interrupt_id, prompt, deadline)"
            " VALUES ('a-y', 'run-a', 'i3', '{}', now() + interval '10 years')",
        )
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            store.decide_approval(
                a, approval_id="a-run-a", run_id="run-a", decision="approved", decided_by="ceo"
            )
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        for run_id in ("run-a", "run-b"):
            [row] = store.list_approvals(admin, run_id)
            assert row.status == "pending" and row.decided_by is None, row


def test_worker_runs_a_whole_run_as_its_tenant_role(
    pg_dsn: str, tenant: Callable[[str], tuple[str, str]], tmp_path: Path
) -> None:
    """The real worker process, connected as the tenant role: effects, an approval, resume, success."""
    from agentrun_dev import http_provider, smtp_sink

    namespace, dsn = tenant("team-w")
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        pg.admit(
            admin,
            run_id="w1",
            namespace=namespace,
            graph=worker_harness.GRAPH,
            input={"approval": True},
            approval_policy={"timeoutSeconds": 3600},
        )
    with http_provider.HttpProvider(tmp_path / "h") as hp, smtp_sink.SmtpSink(tmp_path / "s") as sink:
        worker = worker_harness.Worker(
            dsn, worker_harness.Providers(hp.url, sink.host, sink.port, sink.api_url)
        )
        proc = worker.run("w1", pod="w1-1", attempt=1)
        assert proc.returncode == 10, proc.stderr[-3000:]  # parked on the approval, as the tenant
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            [approval] = store.list_approvals(admin, "w1")
            assert approval.status == "pending" and approval.deadline is not None
            assert store.decide_approval(
                admin,
                approval_id=approval.approval_id,
                run_id="w1",
                decision="approved",
                decided_by="manager",
            )
        proc = worker.run("w1", pod="w1-2", attempt=2)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert len(sink.store.find(None)) == 1
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        run = store.get_run(admin, "w1")
        assert run is not None and run.status == "succeeded"
        assert admin.execute("SELECT count(*) FROM checkpoints WHERE thread_id = 'w1'").fetchone()[0] > 0  # type: ignore[index]


def test_unknown_role_sees_nothing(pg_dsn: str, two: dict[str, Any]) -> None:
    """A member of agentrun_worker without a tenant row in this database (another installation's): no row."""
    name = f"agentrun_stray_{secrets.token_hex(4)}"
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {name} LOGIN PASSWORD 'stray-pw' IN ROLE agentrun_worker")
    try:
        with psycopg.connect(tenants.worker_dsn(pg_dsn, name, "stray-pw"), autocommit=True) as stray:
            for table in ("agentrun_runs", *RUN_TABLES):
                assert stray.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,), table
            for table in CHECKPOINT_TABLES:
                assert stray.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,), table
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute(f"DROP OWNED BY {name}")
            admin.execute(f"DROP ROLE {name}")


def test_a_cannot_forge_interventions_or_escape_retention(two: dict[str, Any], pg_dsn: str) -> None:
    """Who retried or resolved, and when a run is purged, are the operator's records: a worker's role may read
    its own run's interventions, never write them, and cannot touch the retention schedule at all."""
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        store.mark_for_purge(admin, run_id="run-a", after_seconds=3600, reason="test")
    with psycopg.connect(two["dsn_a"], autocommit=True) as a:
        assert a.execute("SELECT count(*) FROM agentrun_interventions").fetchone() == (0,)
        for sql in (
            "INSERT INTO agentrun_interventions (run_id, kind, by) VALUES ('run-a', 'retry', 'ceo')",
            "DELETE FROM agentrun_interventions WHERE run_id = 'run-a'",
            "DELETE FROM agentrun_retention WHERE run_id = 'run-a'",
            "UPDATE agentrun_retention SET purge_after = now() + interval '100 years'",
            "SELECT * FROM agentrun_retention",
        ):
            assert "permission denied" in _refused(a, sql), sql
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        left = admin.execute("SELECT count(*) FROM agentrun_retention WHERE run_id = 'run-a'").fetchone()
        assert left == (1,)
