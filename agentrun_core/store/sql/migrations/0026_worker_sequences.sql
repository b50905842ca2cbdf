-- agentrun schema, migration 26: a worker role uses the one sequence it inserts with (issue 35).
--
-- agentrun_protect_all (migration 5) granted USAGE on every sequence of the schema to agentrun_worker after
-- each migrate(), so a tenant could draw from the operator's sequences too (agentrun_interventions_id_seq):
-- a counter shared by every tenant, and ids taken from the operator's tables. Now it grants nothing on
-- sequences (LangGraph's tables, the ones it covers, have none) and workers keep only the sequence of the
-- step batches they insert (migration 21).
-- What stays visible (issue 35's report says so): agentrun_step_batches_id_seq is shared by all tenants, so
-- the ids of a tenant's own batches grow with everyone's batches.
SELECT agentrun_define($def$
CREATE OR REPLACE FUNCTION @schema@.agentrun_protect_all() RETURNS text[]
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
    RETURN done;
END
$$
$def$);

DO $$
DECLARE
    s regclass;
BEGIN
    FOR s IN
        SELECT c.oid::regclass FROM pg_class c
        WHERE c.relkind = 'S' AND c.relnamespace = current_schema()::regnamespace
    LOOP
        EXECUTE format('REVOKE ALL ON SEQUENCE %s FROM agentrun_worker', s);
    END LOOP;
END
$$;
GRANT USAGE ON SEQUENCE agentrun_step_batches_id_seq TO agentrun_worker;
