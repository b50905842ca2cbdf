-- agentrun schema, migration 18: a transaction checks a run's epoch once.
--
-- The fence (migrations 15, 16) runs for every row a worker's saver writes. PostgresSaver's put_writes
-- inserts a row per pending write, each of which locked the run row FOR SHARE and read its epoch again, and
-- a root put locked the run row FOR UPDATE and then updated it. Now:
--   * a root put moves the head with one UPDATE of the run row, which takes the row lock itself and returns
--     the epoch the fence then checks (a refusal aborts the whole write, that UPDATE with it);
--   * once a transaction holds the run row locked (FOR SHARE or stronger) and found the writer's epoch, it
--     records that in a transaction-local setting, agentrun.fence_held = '<run id>:<epoch>'
--     (set_config(..., true): gone at commit or rollback; rolled back with a savepoint together with the
--     lock it stands for). A later row of the same transaction reads the setting instead of the run row.
-- Why that is sound: the lock is held until the transaction ends, and a new epoch is written by an UPDATE
-- of the run row (the claim, a cancel), which waits for that lock: the answer cannot change within the
-- transaction. The fence guards against a deposed worker running our saver, as migration 16 says: a client
-- sending SQL of its own can leave its connection unmarked and skip the fence anyway, and row-level
-- security is what bounds such a client to its own runs; setting agentrun.fence_held by hand gives it
-- nothing more.
-- Errors and SQLSTATEs are those of migration 15. The root put's lock is now the UPDATE's own (FOR NO KEY
-- UPDATE, where it was FOR UPDATE): it still excludes a claim or a cancel (both UPDATE the run row) and
-- another root put, and no longer blocks other transactions' foreign-key checks on the run (a heartbeat, a
-- step event).

CREATE OR REPLACE FUNCTION agentrun_fence_checkpoint(
    p_run_id text, p_epoch bigint, p_checkpoint_ns text, p_checkpoint_id text
) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_current bigint;
    v_found boolean;
    v_held text := p_run_id || ':' || p_epoch;
BEGIN
    IF p_checkpoint_ns = '' AND p_checkpoint_id IS NOT NULL THEN
        UPDATE agentrun_runs SET head_checkpoint_id = p_checkpoint_id WHERE run_id = p_run_id
        RETURNING lease_epoch INTO v_current;
        v_found := FOUND;
    ELSIF current_setting('agentrun.fence_held', true) = v_held THEN
        v_current := p_epoch;
        v_found := true;
    ELSE
        SELECT lease_epoch INTO v_current FROM agentrun_runs WHERE run_id = p_run_id FOR SHARE;
        v_found := FOUND;
    END IF;
    IF NOT v_found THEN
        RAISE EXCEPTION 'run % is not admitted', p_run_id USING ERRCODE = 'AR404';
    END IF;
    IF v_current IS DISTINCT FROM p_epoch THEN
        RAISE EXCEPTION 'run %: epoch % is not current (%)', p_run_id, p_epoch, v_current
            USING ERRCODE = 'AR409', DETAIL = coalesce(v_current::text, '');
    END IF;
    PERFORM set_config('agentrun.fence_held', v_held, true);
    IF p_checkpoint_id IS NOT NULL AND p_checkpoint_ns <> '' THEN
        INSERT INTO agentrun_checkpoint_heads (run_id, checkpoint_ns, checkpoint_id, epoch)
        VALUES (p_run_id, p_checkpoint_ns, p_checkpoint_id, p_epoch)
        ON CONFLICT (run_id, checkpoint_ns) DO UPDATE
        SET checkpoint_id = EXCLUDED.checkpoint_id, epoch = EXCLUDED.epoch, updated_at = now();
    END IF;
END
$$;
