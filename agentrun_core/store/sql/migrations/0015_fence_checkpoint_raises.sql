-- agentrun schema, migration 15: the checkpoint fence refuses server-side.
--
-- The worker's saver (agent_worker/checkpointer.py) sends a checkpoint write as ONE pipeline: BEGIN, this
-- fence, PostgresSaver's statements, COMMIT, then a single Sync. Nothing can be checked client-side between
-- the fence and the writes, so the fence itself must fail: an error aborts the rest of the pipeline and the
-- transaction, and nothing of the write commits. It does what the named queries fence_checkpoint /
-- fence_checkpoint_head did (migration 2), with the same locks:
--   * the run row locked, FOR UPDATE for a root put (it moves agentrun_runs.head_checkpoint_id: upgrading a
--     share lock could deadlock), FOR SHARE otherwise; held until commit;
--   * no row (never admitted, or not this tenant's: row-level security): SQLSTATE AR404;
--   * lease_epoch is not the writer's: SQLSTATE AR409, DETAIL the current epoch (text; '' when NULL);
--   * else a root put moves the run's head, a subgraph put its namespace's row, put_writes moves nothing.
-- agentrun_core/store/checkpoints.py turns the two SQLSTATEs back into RunNotFound / Fenced.
--
-- Invoker rights: the tenant's row-level security and table grants apply exactly as to the statements
-- before, so EXECUTE stays granted to PUBLIC (the default): calling it allows nothing the caller's own
-- privileges do not.

CREATE FUNCTION agentrun_fence_checkpoint(
    p_run_id text, p_epoch bigint, p_checkpoint_ns text, p_checkpoint_id text
) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_current bigint;
BEGIN
    IF p_checkpoint_ns = '' AND p_checkpoint_id IS NOT NULL THEN
        SELECT lease_epoch INTO v_current FROM agentrun_runs WHERE run_id = p_run_id FOR UPDATE;
    ELSE
        SELECT lease_epoch INTO v_current FROM agentrun_runs WHERE run_id = p_run_id FOR SHARE;
    END IF;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'run % is not admitted', p_run_id USING ERRCODE = 'AR404';
    END IF;
    IF v_current IS DISTINCT FROM p_epoch THEN
        RAISE EXCEPTION 'run %: epoch % is not current (%)', p_run_id, p_epoch, v_current
            USING ERRCODE = 'AR409', DETAIL = coalesce(v_current::text, '');
    END IF;
    IF p_checkpoint_id IS NULL THEN
        RETURN;  -- put_writes: the epoch check only
    ELSIF p_checkpoint_ns = '' THEN
        UPDATE agentrun_runs SET head_checkpoint_id = p_checkpoint_id WHERE run_id = p_run_id;
    ELSE
        INSERT INTO agentrun_checkpoint_heads (run_id, checkpoint_ns, checkpoint_id, epoch)
        VALUES (p_run_id, p_checkpoint_ns, p_checkpoint_id, p_epoch)
        ON CONFLICT (run_id, checkpoint_ns) DO UPDATE
        SET checkpoint_id = EXCLUDED.checkpoint_id, epoch = EXCLUDED.epoch, updated_at = now();
    END IF;
END
$$;
