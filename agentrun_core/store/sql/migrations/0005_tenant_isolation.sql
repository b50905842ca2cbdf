-- agentrun schema, migration 5: tenants that cannot touch each other's runs, approvals only the operator
-- decides.
--
-- Workers of Kubernetes namespace N connect as a Postgres role of their own (agentrun_provision_tenant,
-- called by the operator) that is a member of the NOLOGIN group role agentrun_worker. Row-level security
-- lets such a role see and write only rows whose run belongs to N, whatever SQL it sends:
--   * agentrun_runs by its namespace column;
--   * every other table by its run id (run_id, or LangGraph's thread_id) -> agentrun_run_is_mine().
-- The operator (the owner of the tables) is not subject to RLS (no FORCE ROW LEVEL SECURITY).
--
-- How a table is covered:
--   * SELECT agentrun_protect('my_table', 'run_id', 'SELECT, INSERT');  -- in the migration that creates it:
--     RLS on, the policy agentrun_tenant by that column, and exactly the grants workers need;
--   * any table with a run_id or thread_id column that still has RLS off when migrate() finishes (LangGraph's
--     checkpoint tables, created by PostgresSaver.setup() after our migrations; a table whose migration
--     forgot) is covered by agentrun_protect_all() with full DML on the tenant's own rows;
--   * a table with neither column gets no grant at all: workers cannot read it.
--
-- Approvals: a worker may INSERT a pending approval (four columns) and set resumed_at, nothing else. A
-- trigger makes every new row pending, snapshots the run's approval policy (what the operator checks a
-- decision against) and computes the deadline with Postgres's clock from that snapshot.

ALTER TABLE agentrun_approvals ADD COLUMN policy jsonb NOT NULL DEFAULT '{}'::jsonb;

CREATE TABLE agentrun_tenants (
    role_name   text PRIMARY KEY,
    namespace   text        NOT NULL UNIQUE,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- Roles are global to the Postgres cluster (several databases, several test databases share them).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'agentrun_worker') THEN
        CREATE ROLE agentrun_worker NOLOGIN;
    END IF;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL;  -- created concurrently by a migration of another database
END
$$;

-- The namespace of the connected tenant role; NULL for every other role. session_user: a SECURITY DEFINER
-- function sees its owner as current_user, and SET ROLE cannot change session_user.
CREATE FUNCTION agentrun_tenant_namespace() RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT namespace FROM agentrun_tenants WHERE role_name = session_user
$$;

-- Whether a run belongs to the connected tenant. Definer rights: it reads agentrun_runs past RLS, and tells a
-- tenant nothing about other runs but "not yours".
CREATE FUNCTION agentrun_run_is_mine(p_run_id text) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT coalesce(
        (SELECT r.namespace = agentrun_tenant_namespace() FROM agentrun_runs r WHERE r.run_id = p_run_id),
        false)
$$;

REVOKE ALL ON FUNCTION agentrun_tenant_namespace() FROM PUBLIC;
REVOKE ALL ON FUNCTION agentrun_run_is_mine(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION agentrun_tenant_namespace() TO agentrun_worker;
GRANT EXECUTE ON FUNCTION agentrun_run_is_mine(text) TO agentrun_worker;

-- RLS + the tenant policy on one table by its run-id column, and the worker grants (a GRANT privilege list,
-- column lists allowed: 'SELECT, UPDATE (resumed_at)'; '' grants nothing). Idempotent.
CREATE FUNCTION agentrun_protect(p_table regclass, p_run_column text, p_privileges text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', p_table);
    EXECUTE format('DROP POLICY IF EXISTS agentrun_tenant ON %s', p_table);
    EXECUTE format(
        'CREATE POLICY agentrun_tenant ON %s USING (agentrun_run_is_mine(%I)) WITH CHECK (agentrun_run_is_mine(%I))',
        p_table, p_run_column, p_run_column);
    EXECUTE format('REVOKE ALL ON %s FROM agentrun_worker', p_table);
    IF p_privileges <> '' THEN
        EXECUTE format('GRANT %s ON %s TO agentrun_worker', p_privileges, p_table);
    END IF;
END
$$;

-- The safety net run by migrate() after LangGraph's setup: every table of this schema with a run_id or
-- thread_id column and RLS still off gets the tenant policy (full DML on the tenant's own rows).
CREATE FUNCTION agentrun_protect_all() RETURNS text[]
LANGUAGE plpgsql AS $$
DECLARE
    t record;
    done text[] := '{}';
BEGIN
    FOR t IN
        SELECT DISTINCT ON (c.oid) c.oid::regclass AS tbl, a.attname::text AS col
        FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        JOIN pg_attribute a ON a.attrelid = c.oid AND NOT a.attisdropped AND a.attname IN ('run_id', 'thread_id')
        WHERE c.relkind IN ('r', 'p') AND n.nspname = current_schema() AND NOT c.relrowsecurity
        ORDER BY c.oid, a.attname
    LOOP
        PERFORM agentrun_protect(t.tbl, t.col, 'SELECT, INSERT, UPDATE, DELETE');
        done := done || t.tbl::text;
    END LOOP;
    -- bigserial ids of covered tables (a sequence reveals nothing but a count).
    EXECUTE format('GRANT USAGE ON ALL SEQUENCES IN SCHEMA %I TO agentrun_worker', current_schema());
    RETURN done;
END
$$;

-- A tenant role for one namespace (created, or its password reset) and its row in agentrun_tenants.
-- Needs CREATEROLE (the operator's database role) or a superuser. Returns the role name.
CREATE FUNCTION agentrun_provision_tenant(p_namespace text, p_password text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    role text := 'agentrun_ns_' || left(md5(p_namespace), 20);
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = role) THEN
        EXECUTE format('ALTER ROLE %I WITH LOGIN PASSWORD %L', role, p_password);
    ELSE
        EXECUTE format('CREATE ROLE %I WITH LOGIN INHERIT PASSWORD %L IN ROLE agentrun_worker', role,
                       p_password);
    END IF;
    EXECUTE format('GRANT agentrun_worker TO %I', role);
    INSERT INTO agentrun_tenants (role_name, namespace) VALUES (role, p_namespace)
    ON CONFLICT (role_name) DO UPDATE SET namespace = EXCLUDED.namespace;
    RETURN role;
END
$$;
REVOKE ALL ON FUNCTION agentrun_provision_tenant(text, text) FROM PUBLIC;

-- Every approval a worker asks for is pending, carries the approval policy in force (the run's, copied from
-- spec.approval by the operator) and a deadline computed here, with Postgres's clock: whatever a tenant role
-- sends, it cannot pre-decide an approval or choose its deadline. Rows written by the owner (the operator,
-- an admin, a test seeding history) keep what they say, and get the policy and deadline filled in when absent.
CREATE FUNCTION agentrun_approval_requested() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    p jsonb;
    tenant boolean := agentrun_tenant_namespace() IS NOT NULL;
BEGIN
    SELECT approval_policy INTO p FROM agentrun_runs WHERE run_id = NEW.run_id;
    IF tenant OR NEW.policy IS NULL OR NEW.policy = '{}'::jsonb THEN
        NEW.policy := coalesce(p, '{}'::jsonb);
    END IF;
    IF tenant THEN
        NEW.status := 'pending';
        NEW.decided_by := NULL;
        NEW.decided_at := NULL;
        NEW.comment := NULL;
        NEW.payload := NULL;
        NEW.deadline_action := NULL;
        NEW.resumed_at := NULL;
        NEW.requested_at := now();
        NEW.deadline := NULL;
    END IF;
    IF NEW.deadline IS NULL AND NEW.status = 'pending'
       AND jsonb_typeof(NEW.policy -> 'timeoutSeconds') = 'number' THEN
        NEW.deadline := now() + make_interval(secs => (NEW.policy ->> 'timeoutSeconds')::double precision);
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER agentrun_approval_requested BEFORE INSERT ON agentrun_approvals
    FOR EACH ROW EXECUTE FUNCTION agentrun_approval_requested();

-- The tables of migration 1, each with exactly what a worker does to it.
ALTER TABLE agentrun_runs ENABLE ROW LEVEL SECURITY;
CREATE POLICY agentrun_tenant ON agentrun_runs
    USING (namespace = agentrun_tenant_namespace()) WITH CHECK (namespace = agentrun_tenant_namespace());
-- No INSERT (the operator admits runs). UPDATE of the columns a worker keeps (status, epoch, holder, step,
-- result, and whatever later migrations add for workers); what the operator admitted (identity, graph, input,
-- namespace, read_only, approval policy) is guarded by a trigger instead of a column list, so a column added
-- later for workers needs no grant here.
GRANT SELECT, UPDATE ON agentrun_runs TO agentrun_worker;
CREATE FUNCTION agentrun_runs_admitted_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF agentrun_tenant_namespace() IS NOT NULL AND (
           NEW.run_id IS DISTINCT FROM OLD.run_id OR NEW.namespace IS DISTINCT FROM OLD.namespace
        OR NEW.name IS DISTINCT FROM OLD.name OR NEW.graph IS DISTINCT FROM OLD.graph
        OR NEW.input IS DISTINCT FROM OLD.input OR NEW.spec_hash IS DISTINCT FROM OLD.spec_hash
        OR NEW.durability IS DISTINCT FROM OLD.durability OR NEW.read_only IS DISTINCT FROM OLD.read_only
        OR NEW.approval_policy IS DISTINCT FROM OLD.approval_policy
        OR NEW.admitted_at IS DISTINCT FROM OLD.admitted_at) THEN
        RAISE EXCEPTION 'permission denied: a worker may not change what the operator admitted for run % '
                        '(namespace, graph, input, read_only, approval policy)', OLD.run_id
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER agentrun_runs_admitted_guard BEFORE UPDATE ON agentrun_runs
    FOR EACH ROW EXECUTE FUNCTION agentrun_runs_admitted_guard();
SELECT agentrun_protect('agentrun_attempts', 'run_id', 'SELECT, INSERT, UPDATE');
SELECT agentrun_protect('agentrun_effects', 'run_id', 'SELECT, INSERT, UPDATE');
-- Ask for an approval and mark it consumed; never decide one.
SELECT agentrun_protect('agentrun_approvals', 'run_id',
                        'SELECT, INSERT (approval_id, run_id, interrupt_id, prompt), UPDATE (resumed_at)');
SELECT agentrun_protect('agentrun_heartbeats', 'run_id', 'SELECT, INSERT, UPDATE');
SELECT agentrun_protect('agentrun_step_events', 'run_id', 'SELECT, INSERT');
-- agentrun_tenants and agentrun_schema_version: no grant (RLS on as a second lock).
ALTER TABLE agentrun_tenants ENABLE ROW LEVEL SECURITY;
