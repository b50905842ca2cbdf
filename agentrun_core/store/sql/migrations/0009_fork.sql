-- agentrun schema, migration 9: runs forked from another run's checkpoint (kubectl agentrun fork).
--
-- agentrun_runs.fork_of records, at admission, where a fork starts: {"run_id", "name", "checkpoint_id",
-- "step", "set"} of the source run (same namespace: the operator resolves the source by name in the fork's
-- own namespace, never across tenants). The operator copies that checkpoint (its row, the blobs it
-- references and its pending writes) into the fork's thread in the statement that admits the fork
-- (queries.sql: admit_fork), so a fork either exists with its starting state or not at all. "set" holds the
-- human's edits; the fork's first worker applies them with LangGraph's update_state (it has the graph and
-- its reducers; the operator does not) while the head is still the copied checkpoint.
ALTER TABLE agentrun_runs ADD COLUMN fork_of jsonb;
CREATE INDEX agentrun_runs_fork_source_idx ON agentrun_runs ((fork_of ->> 'run_id')) WHERE fork_of IS NOT NULL;

-- What the operator admitted now includes where a fork came from (and, since 0008, the image pin): a worker may not rewrite its lineage.
CREATE OR REPLACE FUNCTION agentrun_runs_admitted_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF agentrun_tenant_namespace() IS NOT NULL AND (
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
$$;
