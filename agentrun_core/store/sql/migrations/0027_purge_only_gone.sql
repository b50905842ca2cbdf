-- agentrun schema, migration 27: a run's rows are purged only once its AgentRun is gone from the API server.
--
-- Why: a mark (agentrun_retention) is an intent, made when the AgentRun's finalizer completes; the object may
-- still exist after that (another finalizer holds it, a delete that was refused or failed). Purging then left
-- an AgentRun with no ledger, which the operator admitted again: every effect again, on an empty ledger.
-- Now the leader lists the AgentRuns of the namespaces that have due runs first (a fresh read, never the
-- watch cache) and passes what exists: p_alive (their uids) and p_held_namespaces (namespaces it could not
-- list: none of their runs is purged in this pass). agentrun_purge_due(integer) is dropped: a caller that
-- does not say what exists purges nothing by mistake. Otherwise as migration 13: one transaction per batch,
-- locked, folded when not yet, gauge columns taken back, checkpoints and rows deleted.
DROP FUNCTION agentrun_purge_due(integer);

CREATE FUNCTION agentrun_purge_due(p_batch integer, p_alive text[], p_held_namespaces text[])
RETURNS SETOF text
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    ids text[];
    unfolded text[];
BEGIN
    SELECT array_agg(d.run_id) INTO ids FROM (
        SELECT t.run_id FROM agentrun_retention t
        WHERE t.purge_after <= now()
          AND t.run_id <> ALL (p_alive)
          AND NOT EXISTS (SELECT 1 FROM agentrun_runs r
                          WHERE r.run_id = t.run_id AND r.namespace = ANY (p_held_namespaces))
        ORDER BY t.purge_after
        LIMIT p_batch
        FOR UPDATE OF t SKIP LOCKED
    ) d;
    IF ids IS NULL THEN
        RETURN;
    END IF;
    -- The runs themselves, so no folder or writer of their rows is in flight while they are read.
    PERFORM 1 FROM agentrun_runs WHERE run_id = ANY (ids) ORDER BY run_id FOR UPDATE;
    SELECT array_agg(run_id) INTO unfolded FROM agentrun_runs WHERE run_id = ANY (ids) AND folded_at IS NULL;
    IF unfolded IS NOT NULL THEN
        PERFORM agentrun_rollup_add(unfolded, 1, false);
    END IF;
    PERFORM agentrun_rollup_add(ids, -1, true);
    DELETE FROM checkpoint_writes WHERE thread_id = ANY (ids);
    DELETE FROM checkpoint_blobs WHERE thread_id = ANY (ids);
    DELETE FROM checkpoints WHERE thread_id = ANY (ids);
    DELETE FROM agentrun_runs WHERE run_id = ANY (ids);
    RETURN QUERY DELETE FROM agentrun_retention WHERE run_id = ANY (ids) RETURNING run_id;
END
$$;
REVOKE ALL ON FUNCTION agentrun_purge_due(integer, text[], text[]) FROM PUBLIC;
