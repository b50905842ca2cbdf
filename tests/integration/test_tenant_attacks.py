"""Tenant A's worker credentials used as an attacker would, against a database holding two tenants.

Real Postgres, real tenant roles (provisioned as the operator does), every table seeded for both tenants by
the admin. Each attempt is named (the test id says what was tried) and must fail or reveal nothing of
tenant B: shadowing the relations and functions the row-level-security policies and the definer triggers
use, planting objects for definer code to pick up, reading B's query text, holding locks B or the operator
need, squatting B's identifiers, reaching server files.
"""

from __future__ import annotations

import concurrent.futures
import secrets
from collections.abc import Iterator
from typing import Any

import psycopg
import psycopg.sql
import pytest

from agent_operator.act import lockwatch, tenants
from agentrun_core import keys, store
from tests.support import pg
from tests.support.waiting import wait_for

pytestmark = pytest.mark.postgres

RUN_A, RUN_B = "run-a", "run-b"


@pytest.fixture
def two(pg_dsn: str) -> dict[str, Any]:
    """Two tenants, one run each; A's and B's worker DSNs."""
    out: dict[str, Any] = {}
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        for label, run_id in (("a", RUN_A), ("b", RUN_B)):
            namespace = f"team-{label}-{secrets.token_hex(4)}"
            role, password = store.provision_random_tenant(admin, namespace)
            out[label] = namespace
            out[f"dsn_{label}"] = tenants.worker_dsn(pg_dsn, role, password)
            out[f"role_{label}"] = role
            pg.seed_run_rows(
                admin, pg_dsn, namespace=namespace, run_id=run_id, input={"secret": f"secret-of-{run_id}"}
            )
    return out


@pytest.fixture
def attacker(two: dict[str, Any]) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(two["dsn_a"], autocommit=True) as a:
        yield a


def _try(conn: psycopg.Connection[Any], sql: str, params: Any = None) -> str:
    """Run ``sql``; "" if it ran, else Postgres's refusal (the connection stays usable)."""
    try:
        conn.execute(sql, params)
    except psycopg.Error as exc:
        return str(exc) or type(exc).__name__
    return ""


def _b_untouched(pg_dsn: str, status: str = "running") -> None:
    """B's run, checkpoints and effects are as the admin seeded them (its status: ``status``; a run the
    fold test finished is "succeeded", and its effects are not looked at)."""
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        run = store.get_run(admin, RUN_B)
        assert run is not None and run.status == status and run.lease_epoch == 1, run
        n = admin.execute("SELECT count(*) FROM checkpoints WHERE thread_id = %s", (RUN_B,)).fetchone()
        assert n is not None and n[0] > 0
        if status == "running":
            assert [e.idempotency_key for e in store.list_effects(admin, RUN_B)] == [f"k-{RUN_B}"]


# --- 1. shadowing what the policies and the definer triggers use --------------------------------------------

# A temporary table that maps A's role to B's namespace: the definer functions behind the policies
# (agentrun_tenant_namespace, agentrun_run_is_mine) would read it instead of the real tenant map.
_FAKE_TENANTS = (
    "CREATE TEMP TABLE agentrun_tenants (role_name text, namespace text, created_at timestamptz)",
    "INSERT INTO agentrun_tenants VALUES (session_user, %(b)s, now())",
)
# A temporary copy of the runs that says B's run is A's (agentrun_run_is_mine reads agentrun_runs).
_FAKE_RUNS = (
    "CREATE TEMP TABLE agentrun_runs"
    " (run_id text, namespace text, folded_at timestamptz, approval_policy jsonb)",
    "INSERT INTO agentrun_runs VALUES ('run-b', %(a)s, NULL, '{}')",
)


@pytest.mark.parametrize("temp", ["temp-revoked", "temp-granted-back"])
@pytest.mark.parametrize(
    "plant",
    [
        pytest.param(_FAKE_TENANTS, id="temp-agentrun_tenants"),
        pytest.param(_FAKE_RUNS, id="temp-agentrun_runs"),
    ],
)
def test_temp_table_shadowing_reaches_nothing_of_b(
    two: dict[str, Any], pg_dsn: str, plant: tuple[str, ...], temp: str
) -> None:
    """The reproduction of issue 35 item 1: after planting the table, A read, cancelled, deleted B's rows.
    temp-granted-back: TEMP given back to A (a database whose migrations ran as a role that could not revoke
    it): the definer functions' pinned search path alone must hold."""
    if temp == "temp-granted-back":
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute(
                psycopg.sql.SQL("GRANT TEMPORARY ON DATABASE {} TO {}").format(
                    psycopg.sql.Identifier(admin.info.dbname), psycopg.sql.Identifier(two["role_a"])
                )
            )
    create, fill = plant
    with psycopg.connect(two["dsn_a"], autocommit=True) as attacker:
        refusal = _try(attacker, create)
        if temp == "temp-revoked":
            assert "permission denied to create temporary tables" in refusal, refusal
        else:
            assert refusal == ""
            attacker.execute(fill, {"a": two["a"], "b": two["b"]})
        seen = attacker.execute(
            "SELECT (SELECT count(*) FROM public.agentrun_runs WHERE run_id = 'run-b'),"
            " (SELECT count(*) FROM public.checkpoints WHERE thread_id = 'run-b'),"
            " (SELECT count(*) FROM public.agentrun_effects WHERE run_id = 'run-b')"
        ).fetchone()
        assert seen == (0, 0, 0)
        updated = attacker.execute(
            "UPDATE public.agentrun_runs SET status = 'cancelled', lease_epoch = 100 WHERE run_id = 'run-b'"
        ).rowcount
        deleted = attacker.execute("DELETE FROM public.checkpoints WHERE thread_id = 'run-b'").rowcount
        assert (updated, deleted) == (0, 0)
    _b_untouched(pg_dsn)


def test_every_definer_function_pins_its_search_path(pg_dsn: str) -> None:
    """Whatever a later migration adds: a function running with its owner's rights has
    search_path = pg_catalog, <schema>, pg_temp (temporary objects last, built-ins first)."""
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        found = admin.execute(
            "SELECT p.oid::regprocedure::text, coalesce(array_to_string(p.proconfig, ';'), '')"
            " FROM pg_proc p WHERE p.prosecdef AND p.pronamespace = current_schema()::regnamespace"
        ).fetchall()
    assert len(found) >= 6, found
    wrong = [(f, c) for f, c in found if c != "search_path=pg_catalog, public, pg_temp"]
    assert not wrong, wrong


@pytest.mark.parametrize(
    "attempt",
    [
        pytest.param("CREATE TEMP TABLE x (a int)", id="temp-table"),
        pytest.param("CREATE TEMP VIEW agentrun_tenants AS SELECT session_user AS role_name", id="temp-view"),
        pytest.param("CREATE FUNCTION pg_temp.agentrun_tenant_namespace() RETURNS text LANGUAGE sql"
                     " AS $$ SELECT 'x' $$", id="temp-function"),
        pytest.param("CREATE TABLE public.agentrun_tenants (role_name text)", id="table-in-public"),
        pytest.param("CREATE FUNCTION public.agentrun_tenant_namespace_x() RETURNS text LANGUAGE sql"
                     " AS $$ SELECT 'x' $$", id="function-in-public"),
        pytest.param("CREATE OPERATOR public.= (LEFTARG = text, RIGHTARG = text, FUNCTION = texteq)",
                     id="operator-in-public"),
        pytest.param("CREATE SCHEMA evil", id="schema"),
        pytest.param("CREATE TYPE public.text AS (a int)", id="type-in-public"),
    ],
)
def test_a_tenant_creates_nothing(attacker: psycopg.Connection[Any], attempt: str) -> None:
    """Nothing a definer function or a check running in A's session could be made to pick up."""
    assert "permission denied" in _try(attacker, attempt)


# --- 2. identifiers one tenant could squat --------------------------------------------------------------


# A row of A's own run, under an identifier (the first column) B derives for its next row.
SQUATS = {
    "agentrun_effects": "INSERT INTO agentrun_effects"
    " (idempotency_key, run_id, step, action, tool, args_hash, args, epoch)"
    " VALUES (%s, 'run-a', 's', 'a', 't', 'x', '{}', 1)",
    "agentrun_approvals": "INSERT INTO agentrun_approvals (approval_id, run_id, interrupt_id, prompt)"
    " VALUES (%s, 'run-a', 'i', '{}')",
}


def _squat(attacker: psycopg.Connection[Any], table: str, identifier: str) -> None:
    """A takes ``identifier`` first, under its own run: allowed (the row is A's)."""
    assert _try(attacker, SQUATS[table], (identifier,)) == ""


def test_a_squatting_bs_next_effect_key_does_not_fence_b(
    two: dict[str, Any], attacker: psycopg.Connection[Any], pg_dsn: str
) -> None:
    """The reproduction of issue 35 item 2: keys are a pure function of the run's uid; A inserts B's next key
    under its own run, and B's worker must still reserve (and record) that effect."""
    key = keys.derive(RUN_B, "send:2", "send_email", 0)
    _squat(attacker, "agentrun_effects", key)
    with psycopg.connect(two["dsn_b"], autocommit=True) as b:
        res = pg.reserve(
            b,
            key=key,
            run_id=RUN_B,
            step="send:2",
            action="send_email",
            tool="smtp",
            args_hash="h",
            args={"to": "x"},
        )
        assert res.outcome == "reserved"
        store.record_effect(b, key=key, run_id=RUN_B, epoch=1, status="sent", calls=1)
        assert [e.status for e in store.list_effects(b, RUN_B) if e.idempotency_key == key] == ["sent"]
    with psycopg.connect(pg_dsn, autocommit=True) as admin:  # A's squatted row stays A's, B's is B's
        owners = admin.execute(
            "SELECT run_id FROM agentrun_effects WHERE idempotency_key = %s ORDER BY run_id", (key,)
        ).fetchall()
        assert owners == [(RUN_A,), (RUN_B,)]


def test_a_squatting_bs_next_approval_id_does_not_block_b(
    two: dict[str, Any], attacker: psycopg.Connection[Any], pg_dsn: str
) -> None:
    """Approval ids are deterministic per interrupt too: A takes B's next one under its own run first."""
    approval_id = keys.approval_id(RUN_B, "interrupt-1")
    _squat(attacker, "agentrun_approvals", approval_id)
    with psycopg.connect(two["dsn_b"], autocommit=True) as b:
        row = store.record_approval(
            b, run_id=RUN_B, epoch=1, approval_id=approval_id, interrupt_id="i", prompt={"q": 1}
        )
        assert row.run_id == RUN_B and row.status == "pending"
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        assert [a.approval_id for a in store.list_approvals(admin, RUN_B)] == [approval_id]
        assert store.decide_approval(
            admin, approval_id=approval_id, run_id=RUN_B, decision="approved", decided_by="manager"
        )
        [a_row] = store.list_approvals(admin, RUN_A)
        assert a_row.status == "pending"  # deciding B's approval never touches A's row of that id


# --- objects planted for definer code, or for checks in A's own session, to pick up ----------------------


def _grant(pg_dsn: str, role: str, *grants: str) -> None:
    """Give A back what a database whose migrations ran as a non-owner would have left it."""
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        for grant in grants:
            admin.execute(
                psycopg.sql.SQL(grant).format(
                    db=psycopg.sql.Identifier(admin.info.dbname), role=psycopg.sql.Identifier(role)
                )
            )


# Every relation the policies' functions and the definer triggers read or write, shadowed by a temporary
# table whose rows say B's run is A's (or hold nothing: a rollup written to the copy instead of the real one).
SHADOWED = {
    "agentrun_tenants": "(role_name text, namespace text, created_at timestamptz)",
    "agentrun_runs": "(run_id text, namespace text, status text, folded_at timestamptz,"
    " approval_policy jsonb)",
    "agentrun_metric_rollups": "(family text, namespace text, label1 text, label2 text, n bigint, v1 bigint,"
    " v2 bigint, v3 bigint, total float8, buckets bigint[])",
    "agentrun_metric_bounds": "(family text, bounds float8[])",
    "agentrun_effects": "(run_id text, tool text, status text, needs_human boolean, attempts int,"
    " duplicates_prevented int, divergences int)",
    "agentrun_approvals": "(run_id text, status text, decided_at timestamptz, requested_at timestamptz,"
    " deadline_action text)",
    "agentrun_attempts": "(run_id text, outcome text, control_plane boolean)",
    "agentrun_step_events": "(run_id text, duration_seconds float8, checkpoint_seconds float8)",
}


def _rollups(pg_dsn: str, namespace: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        return admin.execute(
            "SELECT family, label1, label2, n, v1, v2, v3 FROM agentrun_metric_rollups WHERE namespace = %s"
            " ORDER BY 1, 2, 3",
            (namespace,),
        ).fetchall()


def _everything_a_tenant_triggers(a: psycopg.Connection[Any]) -> None:
    """Statements that run the policies and every definer trigger in A's session: reads and writes aimed
    at B, an approval asked (agentrun_approval_requested), writes to A's own folded run (the unfold
    triggers and the rollup they rewrite), an update of A's run (the admitted-columns guard)."""
    a.execute("SELECT * FROM public.agentrun_runs WHERE run_id = 'run-b'")
    a.execute("UPDATE public.agentrun_runs SET status = 'cancelled', lease_epoch = 9 WHERE run_id = 'run-b'")
    a.execute("DELETE FROM public.checkpoints WHERE thread_id = 'run-b'")
    a.execute("UPDATE public.agentrun_effects SET status = 'failed' WHERE run_id = 'run-b'")
    _try(
        a,
        "INSERT INTO public.agentrun_approvals (approval_id, run_id, interrupt_id, prompt)"
        " VALUES ('a-evil', 'run-a', 'i', '{}')",
    )
    a.execute("UPDATE public.agentrun_effects SET attempts = attempts + 1 WHERE run_id = 'run-a'")
    a.execute("UPDATE public.agentrun_runs SET current_step = 'x' WHERE run_id = 'run-a'")


@pytest.fixture
def a_folded(two: dict[str, Any], pg_dsn: str) -> dict[str, Any]:
    """A's and B's runs finished and folded into the rollups (what a write to a folded run unfolds)."""
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute("UPDATE agentrun_runs SET status = 'succeeded', finished_at = now()")
        store.fold_runs(admin, batch=100)
    return two


@pytest.mark.parametrize("relation", sorted(SHADOWED))
def test_a_temp_table_shadows_nothing_definer_code_reads(
    a_folded: dict[str, Any], pg_dsn: str, relation: str
) -> None:
    """With TEMP given back: a temporary table of each name (rows mapping A's role, or B's run, to A), then
    everything that runs the policies and the definer triggers: B is untouched, B's rollups unchanged."""
    two = a_folded
    _grant(pg_dsn, two["role_a"], "GRANT TEMPORARY ON DATABASE {db} TO {role}")
    before = _rollups(pg_dsn, two["b"])
    with psycopg.connect(two["dsn_a"], autocommit=True) as a:
        a.execute(f"CREATE TEMP TABLE {relation} {SHADOWED[relation]}")
        if relation == "agentrun_tenants":
            a.execute("INSERT INTO pg_temp.agentrun_tenants VALUES (session_user, %s, now())", (two["b"],))
        elif relation == "agentrun_runs":
            a.execute(
                "INSERT INTO pg_temp.agentrun_runs VALUES ('run-a', %s, 'succeeded', now(), '{}'),"
                " ('run-b', %s, 'succeeded', NULL, '{}')",
                (two["b"], two["a"]),
            )
        _everything_a_tenant_triggers(a)
    _b_untouched(pg_dsn, "succeeded")
    assert _rollups(pg_dsn, two["b"]) == before


@pytest.mark.parametrize(
    "function",
    [
        pytest.param(
            "agentrun_tenant_namespace() RETURNS text AS $$ SELECT %(b)L::text $$", id="tenant_namespace"
        ),
        pytest.param("agentrun_run_is_mine(text) RETURNS boolean AS $$ SELECT true $$", id="run_is_mine"),
        pytest.param(
            "agentrun_rollup_add(text[], integer, boolean) RETURNS void AS $$ SELECT $$", id="rollup_add"
        ),
        pytest.param("agentrun_unfold_run(text) RETURNS void AS $$ SELECT $$", id="unfold_run"),
        pytest.param("jsonb_typeof(jsonb) RETURNS text AS $$ SELECT 'number' $$", id="jsonb_typeof"),
    ],
)
def test_a_temp_function_shadows_nothing(
    a_folded: dict[str, Any], pg_dsn: str, function: str
) -> None:
    """pg_temp functions: Postgres never looks them up unqualified; planted anyway (TEMP given back)."""
    two = a_folded
    _grant(pg_dsn, two["role_a"], "GRANT TEMPORARY ON DATABASE {db} TO {role}")
    before = _rollups(pg_dsn, two["b"])
    body = function.replace("%(b)L", "'" + two["b"] + "'")
    with psycopg.connect(two["dsn_a"], autocommit=True) as a:
        a.execute(f"CREATE FUNCTION pg_temp.{body.replace(' AS ', ' LANGUAGE sql AS ', 1)}")
        a.execute("SET search_path = pg_temp, public")
        _everything_a_tenant_triggers(a)
        assert a.execute("SELECT count(*) FROM public.agentrun_runs").fetchone() == (1,)
    _b_untouched(pg_dsn, "succeeded")
    assert _rollups(pg_dsn, two["b"]) == before



@pytest.mark.parametrize(
    "plant",
    [
        pytest.param(
            "CREATE OPERATOR public.= (LEFTARG = jsonb, RIGHTARG = jsonb, FUNCTION = pg_catalog.jsonb_ne)",
            id="operator-jsonb-eq",
        ),
        pytest.param(
            "CREATE OPERATOR public.= (LEFTARG = text, RIGHTARG = text, FUNCTION = pg_catalog.textne)",
            id="operator-text-eq",
        ),
        pytest.param(
            "CREATE FUNCTION evil.agentrun_tenant_namespace() RETURNS text LANGUAGE sql AS $$ SELECT NULL $$",
            id="function-in-own-schema",
        ),
    ],
)
def test_objects_planted_in_a_writable_schema_change_no_check(
    two: dict[str, Any], pg_dsn: str, plant: str
) -> None:
    """With CREATE given back (on public and a schema of its own): an `=` that answers the opposite, or a
    tenant-namespace function that says "not a tenant", placed first in A's search path, must not let A
    rewrite what the operator admitted (the guard's IS DISTINCT FROM) nor reach B."""
    _grant(
        pg_dsn, two["role_a"],
        "GRANT CREATE ON SCHEMA public TO {role}", "GRANT CREATE ON DATABASE {db} TO {role}",
    )
    with psycopg.connect(two["dsn_a"], autocommit=True) as a:
        a.execute("CREATE SCHEMA evil")
        a.execute(plant)
        a.execute("SET search_path = evil, public, pg_catalog")
        for column, value in (("input", "'{\"evil\": true}'"), ("read_only", "true"), ("graph", "'evil:g'")):
            # no WHERE: row-level security picks A's run (A's own `=` would only fool A's own filter)
            refusal = _try(a, f"UPDATE public.agentrun_runs SET {column} = {value}")
            assert "permission denied" in refusal, (column, refusal)
        assert a.execute("SELECT count(*) FROM public.agentrun_runs").fetchone() == (1,)
        cancel_b = (
            "UPDATE public.agentrun_runs SET status = 'cancelled' WHERE run_id OPERATOR(pg_catalog.=) 'run-b'"
        )
        assert a.execute(cancel_b).rowcount == 0
    _b_untouched(pg_dsn)


# --- what A can hold or see of others: locks, activity, channels, large objects, sequences, files -----------


def _advisory_keys(conn: psycopg.Connection[Any]) -> list[int]:
    """The bigint advisory keys other sessions hold, as any role sees them in pg_locks."""
    found = conn.execute(
        "SELECT classid::bigint, objid::bigint FROM pg_locks"
        " WHERE locktype = 'advisory' AND objsubid = 1 AND pid <> pg_backend_pid()"
    ).fetchall()
    keys_ = [(hi << 32) | lo for hi, lo in found]
    return [k - 2**64 if k >= 2**63 else k for k in keys_]


def test_a_tenant_cannot_hold_the_schema_migration_lock(two: dict[str, Any], pg_dsn: str) -> None:
    """A holds the constant key migrate() used, and every key it saw a migration hold in pg_locks; the next
    migration (an operator starting after an upgrade) still runs to the end."""
    from agentrun_core.store import schema

    with psycopg.connect(two["dsn_a"], autocommit=True) as a:
        assert a.execute("SELECT pg_try_advisory_lock(%s)", (schema._MIGRATE_LOCK_ID,)).fetchone() == (True,)
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            lock = schema._MigrateLock(admin)
            lock.take()
            seen = _advisory_keys(a)
            assert seen  # a migration's key is visible to anyone while it runs
            lock.release()
        for key in seen:  # A takes them all the moment they are free
            assert a.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone() == (True,)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:

            def migrate() -> list[str]:
                with psycopg.connect(pg_dsn, autocommit=True) as admin:
                    return store.migrate(admin)

            done = pool.submit(migrate)
            try:
                assert done.result(timeout=120) == []  # up to date: nothing to apply, but not stuck
            finally:
                a.close()  # releases A's locks: a stuck migrate() ends, the test fails instead of hanging


def test_a_sees_no_query_text_of_others(
    two: dict[str, Any], attacker: psycopg.Connection[Any], pg_dsn: str
) -> None:
    """pg_stat_activity (and the function behind it): B's and the operator's statements, with their text,
    stay hidden from A; B's last statement carries a marker A looks for."""
    marker = f"marker-{secrets.token_hex(6)}"
    with (
        psycopg.connect(two["dsn_b"], autocommit=True) as b,
        psycopg.connect(pg_dsn, autocommit=True) as admin,
    ):
        b.execute(f"SELECT '{marker}-b', run_id FROM agentrun_runs")
        admin.execute(f"SELECT '{marker}-admin', input FROM agentrun_runs")
        others = attacker.execute(
            "SELECT usename, query FROM pg_stat_activity"
            " WHERE pid <> pg_backend_pid() AND usename IS NOT NULL"
        ).fetchall()
        assert {u for u, _ in others} >= {two["role_b"]}  # the sessions are there ...
        assert all(q in (None, "<insufficient privilege>") for _, q in others), others  # ... their text not
        via_function = attacker.execute(
            "SELECT count(*) FROM pg_stat_get_activity(NULL) WHERE query LIKE %s", (f"%{marker}%",)
        ).fetchone()
        assert via_function == (0,)


@pytest.mark.parametrize(
    "attempt",
    [
        pytest.param("CREATE EXTENSION pg_stat_statements", id="pg_stat_statements-create"),
        pytest.param("LOAD 'pg_stat_statements'", id="pg_stat_statements-load"),
        pytest.param("SELECT pg_stat_statements_reset()", id="pg_stat_statements-reset"),
        pytest.param("SELECT pg_read_file('/etc/passwd')", id="pg_read_file"),
        pytest.param("SELECT pg_read_binary_file('postgresql.conf')", id="pg_read_binary_file"),
        pytest.param("SELECT pg_ls_dir('.')", id="pg_ls_dir"),
        pytest.param("SELECT pg_stat_file('postgresql.conf')", id="pg_stat_file"),
        pytest.param("SELECT lo_import('/etc/passwd')", id="lo_import"),
        pytest.param("SELECT lo_export(lo_create(0), '/tmp/agentrun-attack')", id="lo_export"),
        pytest.param("COPY (SELECT 1) TO '/tmp/agentrun-attack'", id="copy-to-server-file"),
        pytest.param("COPY agentrun_heartbeats FROM '/etc/passwd'", id="copy-from-server-file"),
        pytest.param("COPY (SELECT 1) TO PROGRAM 'true'", id="copy-to-program"),
        pytest.param("SELECT setval('agentrun_step_batches_id_seq', 1)", id="sequence-setval"),
        pytest.param("SELECT last_value FROM agentrun_step_batches_id_seq", id="sequence-read"),
        pytest.param("SELECT nextval('agentrun_interventions_id_seq')", id="sequence-of-operator-table"),
        pytest.param(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename <> current_user",
            id="terminate-others",
        ),
        pytest.param(
            "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE usename <> current_user",
            id="cancel-others",
        ),
        pytest.param("SET ROLE postgres", id="set-role-superuser"),
    ],
)
def test_a_tenant_reaches_nothing_outside_its_rows(
    two: dict[str, Any], attacker: psycopg.Connection[Any], attempt: str
) -> None:
    with psycopg.connect(two["dsn_b"], autocommit=True) as b:
        b.execute("SELECT 1")  # a session of B's, for the signalling attempts to aim at
        refusal = _try(attacker, attempt)
        assert refusal, f"{attempt!r} ran"
        assert b.execute("SELECT 1").fetchone() == (1,)  # B's session survived


def test_large_objects_of_one_role_are_unreadable_by_another(
    two: dict[str, Any], attacker: psycopg.Connection[Any]
) -> None:
    """Any role may create a large object (Postgres has no privilege for it); only its owner reads it."""
    oid = attacker.execute("SELECT lo_from_bytea(0, 'secret of A')").fetchone()[0]  # type: ignore[index]
    with psycopg.connect(two["dsn_b"], autocommit=True) as b:
        assert "permission denied" in _try(b, "SELECT lo_get(%s)", (oid,))
        assert "must be owner" in _try(b, "SELECT lo_unlink(%s)", (oid,))
        assert "permission denied" in _try(b, "SELECT lo_put(%s, 0, 'x')", (oid,))


def test_copy_out_and_notifications_show_only_a_tenants_own_rows(
    two: dict[str, Any], attacker: psycopg.Connection[Any], pg_dsn: str
) -> None:
    """COPY ... TO STDOUT reads through row-level security; the agentrun components send no notifications
    a tenant listening on a channel could read (a run of B's written as the operator and as B)."""
    with attacker.cursor() as cur, cur.copy("COPY agentrun_runs (run_id) TO STDOUT") as copy:
        copied = b"".join(bytes(chunk) for chunk in copy)
    assert copied.split() == [RUN_A.encode()]
    with (
        pytest.raises(psycopg.Error, match="row-level security"),
        attacker.cursor() as cur,
        cur.copy("COPY agentrun_heartbeats (run_id, key) FROM STDIN") as copy,  # B's row, through COPY
    ):
        copy.write_row((RUN_B, "evil"))
    for channel in ("agentrun", "agentrun_runs", "agentrun_effects", "approvals", "runs"):
        attacker.execute(f"LISTEN {channel}")
    with psycopg.connect(two["dsn_b"], autocommit=True) as b:
        store.heartbeat(b, run_id=RUN_B, key="worker", details={"secret": "b"})
        store.record_effect(b, key=f"k-{RUN_B}", run_id=RUN_B, epoch=1, status="sent", calls=1)
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        store.cancel_run(admin, RUN_B, "test")
    attacker.execute("SELECT 1")
    assert list(attacker.notifies(timeout=0.5, stop_after=1)) == []


def _waited(pg_dsn: str, pids: list[int]) -> float | None:
    """How long the first of ``pids`` has waited on a lock (seconds, Postgres's clock); None: not waiting."""
    if not pids:
        return None
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        row = admin.execute(
            "SELECT extract(epoch FROM now() - min(waitstart))::float8 FROM pg_locks"
            " WHERE pid = %s AND NOT granted",
            (pids[0],),
        ).fetchone()
    return None if row is None or row[0] is None else float(row[0])


def _b_reads_its_run(two: dict[str, Any], pids: list[int]) -> str | None:
    """B's worker reads its run (waits behind any lock on agentrun_runs); its pid goes to ``pids`` first."""
    with psycopg.connect(two["dsn_b"], autocommit=True) as b:
        pids.append(b.info.backend_pid)
        row = b.execute("SELECT status FROM agentrun_runs WHERE run_id = %s", (RUN_B,)).fetchone()
    return str(row[0]) if row else None


def test_a_tenant_holding_a_shared_table_locked_is_ended(
    two: dict[str, Any], attacker: psycopg.Connection[Any], pg_dsn: str
) -> None:
    # Postgres lets any role with UPDATE on a table LOCK it in ACCESS EXCLUSIVE mode, and a worker role needs
    # UPDATE on agentrun_runs: the lock cannot be refused, so the operator's lock watch ends the session.
    attacker.execute("BEGIN")
    attacker.execute("LOCK TABLE agentrun_runs IN ACCESS EXCLUSIVE MODE")
    watch = lockwatch.LockWatch(pg_dsn, wait_seconds=1.0)
    pids: list[int] = []
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        victim = pool.submit(_b_reads_its_run, two, pids)
        wait_for(lambda: _waited(pg_dsn, pids) is not None, 60, "B's worker to wait on the lock")
        assert not victim.done()
        found = wait_for(watch.sweep, 60, "the lock watch to end the blocking session", interval=0.5)
        assert [(r["namespace"], r["ended"]) for r in found] == [(two["a"], True)], found
        assert victim.result(timeout=60) is not None  # B's worker goes on
    with pytest.raises(psycopg.OperationalError):
        attacker.execute("SELECT 1")
    assert watch.ended == 1
    watch.stop()


def test_the_lock_watch_never_ends_an_admin_session(two: dict[str, Any], pg_dsn: str) -> None:
    # Only worker roles' sessions are ended: an admin's (a migration, the operator) that blocks for as long is
    # left alone, and so is a tenant's session that blocks nobody.
    watch = lockwatch.LockWatch(pg_dsn, wait_seconds=1.0)
    with (
        psycopg.connect(pg_dsn, autocommit=True) as admin,
        psycopg.connect(two["dsn_a"], autocommit=True) as a,
    ):
        a.execute("BEGIN")
        a.execute("LOCK TABLE agentrun_effects IN ACCESS EXCLUSIVE MODE")  # blocks nobody
        admin.execute("BEGIN")
        admin.execute("LOCK TABLE agentrun_runs IN ACCESS EXCLUSIVE MODE")
        pids: list[int] = []
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            victim = pool.submit(_b_reads_its_run, two, pids)
            # B's worker has waited past the watch's limit behind the admin: a look finds nothing to end.
            wait_for(lambda: (_waited(pg_dsn, pids) or 0) > 1.5, 60, "B's worker to wait past the limit")
            assert watch.sweep() == []
            admin.execute("COMMIT")
            assert victim.result(timeout=60) is not None
        a.execute("SELECT 1")  # still there
        a.execute("COMMIT")
    watch.stop()
