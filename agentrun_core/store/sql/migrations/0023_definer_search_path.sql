-- agentrun schema, migration 23: code that runs with the owner's rights in a tenant's session cannot be
-- shadowed (issue 35, item 1).
--
-- The functions behind the row-level-security policies (agentrun_tenant_namespace, agentrun_run_is_mine) and
-- the definer triggers ran with `SET search_path FROM CURRENT`, i.e. "$user", public; a search path that does
-- not name pg_temp searches it FIRST. A tenant's worker role created TEMP TABLE agentrun_tenants mapping its
-- role to another namespace, and the policies then let it read, cancel and delete that namespace's runs. Now:
--   * every function that runs as the owner (SECURITY DEFINER), and every function such code calls, pins
--     search_path = pg_catalog, <schema>, pg_temp (pg_catalog first: a planted operator or function cannot
--     take a built-in's place; pg_temp last: a temporary object never takes ours), and names our relations
--     and functions with their schema;
--   * so does the admitted-columns guard (invoker rights, but a check made against the tenant who runs it:
--     with the session's path, a function planted in a schema the tenant may write would answer it);
--   * tenants lose TEMP on the database and CREATE on our schema and on public (agentrun_lock_down, run here
--     and at every provisioning: a database's own privileges live in the cluster's catalog and are not
--     copied by CREATE DATABASE ... TEMPLATE nor restored by a plain pg_dump).
--
-- <schema> is the schema the migrations run in (current_schema(), as agentrun_protect_all uses): the
-- definitions below are written with @schema@ and created by agentrun_define, which puts the quoted schema
-- name in its place.

-- (No search_path of its own: current_schema() is the caller's. Owner only: migrations run it.)
CREATE FUNCTION agentrun_define(p_sql text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE replace(p_sql, '@schema@', quote_ident(current_schema()));
END
$$;
REVOKE ALL ON FUNCTION agentrun_define(text) FROM PUBLIC;

-- The policies' functions (migration 5).
SELECT agentrun_define($def$
CREATE OR REPLACE FUNCTION @schema@.agentrun_tenant_namespace() RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, @schema@, pg_temp AS $$
    SELECT t.namespace FROM @schema@.agentrun_tenants t WHERE t.role_name = session_user
$$
$def$);

SELECT agentrun_define($def$
CREATE OR REPLACE FUNCTION @schema@.agentrun_run_is_mine(p_run_id text) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, @schema@, pg_temp AS $$
    SELECT coalesce(
        (SELECT r.namespace = @schema@.agentrun_tenant_namespace() FROM @schema@.agentrun_runs r
         WHERE r.run_id = p_run_id),
        false)
$$
$def$);

-- A worker's approval is pending, with the run's policy and Postgres's deadline (migration 5).
SELECT agentrun_define($def$
CREATE OR REPLACE FUNCTION @schema@.agentrun_approval_requested() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, @schema@, pg_temp AS $$
DECLARE
    p jsonb;
    tenant boolean := @schema@.agentrun_tenant_namespace() IS NOT NULL;
BEGIN
    SELECT r.approval_policy INTO p FROM @schema@.agentrun_runs r WHERE r.run_id = NEW.run_id;
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
$$
$def$);

-- What the operator admitted stays as admitted (migration 9's column list).
SELECT agentrun_define($def$
CREATE OR REPLACE FUNCTION @schema@.agentrun_runs_admitted_guard() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, @schema@, pg_temp AS $$
BEGIN
    IF @schema@.agentrun_tenant_namespace() IS NOT NULL AND (
           NEW.run_id IS DISTINCT FROM OLD.run_id OR NEW.namespace IS DISTINCT FROM OLD.namespace
        OR NEW.name IS DISTINCT FROM OLD.name OR NEW.graph IS DISTINCT FROM OLD.graph
        OR NEW.input IS DISTINCT FROM OLD.input OR NEW.spec_hash IS DISTINCT FROM OLD.spec_hash
        OR NEW.durability IS DISTINCT FROM OLD.durability OR NEW.read_only IS DISTINCT FROM OLD.read_only
        OR NEW.approval_policy IS DISTINCT FROM OLD.approval_policy
        OR NEW.admitted_at IS DISTINCT FROM OLD.admitted_at
        OR NEW.worker_image IS DISTINCT FROM OLD.worker_image
        OR NEW.image_digest IS DISTINCT FROM OLD.image_digest
        OR NEW.image_generation IS DISTINCT FROM OLD.image_generation
        OR NEW.fork_of IS DISTINCT FROM OLD.fork_of) THEN
        RAISE EXCEPTION 'permission denied: a worker may not change what the operator admitted for run % '
                        '(namespace, graph, input, read_only, approval policy, image, fork_of)', OLD.run_id
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END
$$
$def$);

-- The metric rollups (migrations 13, 17, 19): the definer triggers and what they call.
SELECT agentrun_define($def$
CREATE OR REPLACE FUNCTION @schema@.agentrun_metric_contributions(p_runs text[])
RETURNS TABLE (family text, ns text, label1 text, label2 text, n bigint, v1 bigint, v2 bigint, v3 bigint,
               total double precision, buckets bigint[])
LANGUAGE sql STABLE SET search_path = pg_catalog, @schema@, pg_temp AS $$
    WITH r AS (
        SELECT run_id, namespace, status FROM @schema@.agentrun_runs WHERE run_id = ANY (p_runs)
    ), hist AS (
        SELECT 'approval_wait' AS fam, r.namespace AS hns,
               extract(epoch FROM a.decided_at - a.requested_at)::float8 AS v
        FROM @schema@.agentrun_approvals a JOIN r USING (run_id) WHERE a.decided_at IS NOT NULL
        UNION ALL
        SELECT 'step_duration', r.namespace, s.duration_seconds
        FROM @schema@.agentrun_step_events s JOIN r USING (run_id)
        UNION ALL
        SELECT 'checkpoint_duration', r.namespace, s.checkpoint_seconds
        FROM @schema@.agentrun_step_events s JOIN r USING (run_id) WHERE s.checkpoint_seconds IS NOT NULL
    ), per_bound AS (
        SELECT h.fam, h.hns, b.ord, count(*) FILTER (WHERE h.v <= b.bound) AS c
        FROM hist h JOIN @schema@.agentrun_metric_bounds mb ON mb.family = h.fam
        CROSS JOIN LATERAL unnest(mb.bounds) WITH ORDINALITY b (bound, ord)
        GROUP BY 1, 2, 3
    )
    SELECT 'runs', r.namespace, r.status, '', count(*), 0::bigint, 0::bigint, 0::bigint, 0::float8,
           NULL::bigint[]
    FROM r GROUP BY 2, 3
    UNION ALL
    SELECT 'effects', r.namespace, e.tool, e.status, count(*), count(*) FILTER (WHERE e.needs_human),
           coalesce(sum(e.attempts), 0), coalesce(sum(e.duplicates_prevented), 0), 0, NULL
    FROM @schema@.agentrun_effects e JOIN r USING (run_id) GROUP BY 2, 3, 4
    UNION ALL
    SELECT 'divergences', r.namespace, e.tool, '', count(*), coalesce(sum(e.divergences), 0), 0, 0, 0, NULL
    FROM @schema@.agentrun_effects e JOIN r USING (run_id) WHERE e.divergences > 0 GROUP BY 2, 3
    UNION ALL
    SELECT 'approvals_decided', r.namespace, a.status, '', count(*), 0, 0, 0, 0, NULL
    FROM @schema@.agentrun_approvals a JOIN r USING (run_id) WHERE a.status <> 'pending' GROUP BY 2, 3
    UNION ALL
    SELECT 'deadline_outcomes', r.namespace, coalesce(a.deadline_action, 'unknown'), '', count(*), 0, 0, 0, 0,
           NULL
    FROM @schema@.agentrun_approvals a JOIN r USING (run_id) WHERE a.status = 'expired' GROUP BY 2, 3
    UNION ALL
    SELECT 'attempts_ended', r.namespace, t.outcome,
           CASE WHEN t.control_plane THEN 'control_plane' ELSE 'run' END, count(*), 0, 0, 0, 0, NULL
    FROM @schema@.agentrun_attempts t JOIN r USING (run_id) WHERE t.outcome IS NOT NULL GROUP BY 2, 3, 4
    UNION ALL
    SELECT h.fam, h.hns, '', '', count(*), 0, 0, 0, coalesce(sum(h.v), 0),
           (SELECT array_agg(p.c ORDER BY p.ord) FROM per_bound p WHERE p.fam = h.fam AND p.hns = h.hns)
    FROM hist h GROUP BY 1, 2
$$
$def$);

SELECT agentrun_define($def$
CREATE OR REPLACE FUNCTION @schema@.agentrun_rollup_add(p_runs text[], p_sign integer, p_gauges_only boolean)
RETURNS void
LANGUAGE sql SET search_path = pg_catalog, @schema@, pg_temp AS $$
    INSERT INTO @schema@.agentrun_metric_rollups AS t
        (family, namespace, label1, label2, n, v1, v2, v3, total, buckets)
    SELECT c.family, c.ns, c.label1, c.label2, p_sign * c.n,
           CASE WHEN p_gauges_only AND c.family <> 'effects' THEN 0 ELSE p_sign * c.v1 END,
           CASE WHEN p_gauges_only THEN 0 ELSE p_sign * c.v2 END,
           CASE WHEN p_gauges_only THEN 0 ELSE p_sign * c.v3 END,
           CASE WHEN p_gauges_only THEN 0 ELSE p_sign * c.total END,
           CASE WHEN p_gauges_only OR c.buckets IS NULL THEN NULL
                ELSE ARRAY(SELECT p_sign * x FROM unnest(c.buckets) WITH ORDINALITY u (x, i) ORDER BY i) END
    FROM @schema@.agentrun_metric_contributions(p_runs) c
    WHERE NOT p_gauges_only OR c.family IN ('runs', 'effects', 'divergences')
    ORDER BY c.family, c.ns, c.label1, c.label2
    ON CONFLICT (family, namespace, label1, label2) DO UPDATE
    SET n = t.n + excluded.n, v1 = t.v1 + excluded.v1, v2 = t.v2 + excluded.v2, v3 = t.v3 + excluded.v3,
        total = t.total + excluded.total, buckets = @schema@.agentrun_buckets_add(t.buckets, excluded.buckets)
$$
$def$);

SELECT agentrun_define($def$
CREATE OR REPLACE FUNCTION @schema@.agentrun_unfold_run(p_run_id text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, @schema@, pg_temp AS $$
DECLARE
    folded timestamptz;
BEGIN
    SELECT r.folded_at INTO folded FROM @schema@.agentrun_runs r WHERE r.run_id = p_run_id FOR KEY SHARE;
    IF folded IS NOT NULL THEN
        PERFORM @schema@.agentrun_rollup_add(ARRAY[p_run_id], -1, false);
        UPDATE @schema@.agentrun_runs SET folded_at = NULL WHERE run_id = p_run_id;
    END IF;
END
$$
$def$);

SELECT agentrun_define($def$
CREATE OR REPLACE FUNCTION @schema@.agentrun_unfold_on_write() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, @schema@, pg_temp AS $$
DECLARE
    v_run text;
    v_folded timestamptz;
BEGIN
    IF TG_OP = 'DELETE' THEN
        v_run := OLD.run_id;  -- a purge deletes the run first: nothing found, nothing done
    ELSE
        v_run := NEW.run_id;
    END IF;
    SELECT r.folded_at INTO v_folded FROM @schema@.agentrun_runs r WHERE r.run_id = v_run FOR KEY SHARE;
    IF v_folded IS NOT NULL THEN
        PERFORM @schema@.agentrun_unfold_run(v_run);
    END IF;
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    RETURN NEW;
END
$$
$def$);

SELECT agentrun_define($def$
CREATE OR REPLACE FUNCTION @schema@.agentrun_runs_unfold() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, @schema@, pg_temp AS $$
BEGIN
    IF OLD.folded_at IS NOT NULL AND NEW.folded_at IS NOT NULL
       AND (NEW.status IS DISTINCT FROM OLD.status OR NEW.namespace IS DISTINCT FROM OLD.namespace) THEN
        PERFORM @schema@.agentrun_rollup_add(ARRAY[OLD.run_id], -1, false);
        NEW.folded_at := NULL;
    END IF;
    RETURN NEW;
END
$$
$def$);

-- Tenants create nothing in this database: no temporary objects, nothing in our schema or in public (a
-- tenant role is a member of agentrun_worker, and of PUBLIC, which is what holds these by default).
-- Idempotent; only an owner of the database / schema (or a superuser) can revoke: for anyone else REVOKE
-- changes nothing and says so in a WARNING, and the pinned search paths above are what still holds.
SELECT agentrun_define($def$
CREATE FUNCTION @schema@.agentrun_lock_down() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    BEGIN
        EXECUTE format('REVOKE TEMPORARY, CREATE ON DATABASE %I FROM PUBLIC, agentrun_worker',
                       current_database());
        REVOKE CREATE ON SCHEMA @schema@ FROM PUBLIC, agentrun_worker;
        IF EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'public') THEN
            REVOKE CREATE ON SCHEMA public FROM PUBLIC, agentrun_worker;
        END IF;
    EXCEPTION WHEN insufficient_privilege THEN
        RAISE WARNING 'agentrun: tenants keep TEMP / CREATE in this database (%): run agentrun''s migrations '
                      'as the owner of the database and its schemas to take them away', SQLERRM;
    END;
END
$$
$def$);
REVOKE ALL ON FUNCTION agentrun_lock_down() FROM PUBLIC;
SELECT agentrun_lock_down();

-- Provisioning a tenant locks the database down first (migration 5's function otherwise unchanged).
SELECT agentrun_define($def$
CREATE OR REPLACE FUNCTION @schema@.agentrun_provision_tenant(p_namespace text, p_password text) RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, @schema@, pg_temp AS $$
DECLARE
    role text := 'agentrun_ns_' || left(md5(p_namespace), 20);
BEGIN
    PERFORM @schema@.agentrun_lock_down();
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = role) THEN
        EXECUTE format('ALTER ROLE %I WITH LOGIN PASSWORD %L', role, p_password);
    ELSE
        EXECUTE format('CREATE ROLE %I WITH LOGIN INHERIT PASSWORD %L IN ROLE agentrun_worker', role,
                       p_password);
    END IF;
    EXECUTE format('GRANT agentrun_worker TO %I', role);
    INSERT INTO @schema@.agentrun_tenants (role_name, namespace) VALUES (role, p_namespace)
    ON CONFLICT (role_name) DO UPDATE SET namespace = EXCLUDED.namespace;
    RETURN role;
END
$$
$def$);
