-- agentrun schema, migration 16: LangGraph's checkpoint writes fenced inside their own statements.
--
-- Until now the worker's saver sent each write as BEGIN, the fence (agentrun_fence_checkpoint), PostgresSaver's
-- statements, COMMIT: four statements of ours around LangGraph's one or two. Now a trigger on LangGraph's
-- tables runs the same fence for every row a worker's saver inserts or updates, in that row's statement:
--   * the saver marks each of its connections once with the custom setting agentrun.fence = '<epoch>:<run
--     id>' (agent_worker/checkpointer.py); a row written on a connection without it is not fenced (the
--     operator's forks, a plain PostgresSaver, and workers of versions before this one, which still send
--     agentrun_fence_checkpoint themselves: it stays, unchanged);
--   * checkpoint_writes rows get the epoch check (the run row FOR SHARE); checkpoints rows the epoch check
--     and the head move of their namespace (the run row FOR UPDATE at the root), exactly as the explicit
--     fence did, with the same SQLSTATEs AR404 / AR409 that agentrun_core/store/checkpoints.py maps;
--   * a row of another run than the connection's is refused (AR409).
-- The locks are held until the write's transaction ends: PostgresSaver sends a write as one psycopg pipeline,
-- one implicit transaction up to its Sync; any refusal aborts all of it (blobs, rows, the head move).
--
-- LangGraph creates its tables in PostgresSaver.setup(), after our migrations (agentrun_core/store/schema.py):
-- agentrun_fence_checkpoint_tables() adds the triggers to whichever of them exist, and migrate() calls it
-- again after setup() (idempotent).

CREATE FUNCTION agentrun_fence_checkpoint_row() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_fence text := current_setting('agentrun.fence', true);
    v_sep integer;
    v_epoch bigint;
    v_run text;
BEGIN
    IF v_fence IS NULL OR v_fence = '' THEN
        RETURN NEW;
    END IF;
    v_sep := strpos(v_fence, ':');
    v_epoch := substr(v_fence, 1, v_sep - 1)::bigint;
    v_run := substr(v_fence, v_sep + 1);
    IF NEW.thread_id IS DISTINCT FROM v_run THEN
        RAISE EXCEPTION 'a worker of run % may not write checkpoints of run %', v_run, NEW.thread_id
            USING ERRCODE = 'AR409', DETAIL = '';
    END IF;
    PERFORM agentrun_fence_checkpoint(
        NEW.thread_id, v_epoch, NEW.checkpoint_ns,
        CASE WHEN TG_TABLE_NAME = 'checkpoints' THEN NEW.checkpoint_id END);
    RETURN NEW;
END
$$;

CREATE FUNCTION agentrun_fence_checkpoint_tables() RETURNS text[]
LANGUAGE plpgsql AS $$
DECLARE
    t text;
    rel regclass;
    done text[] := '{}';
BEGIN
    FOREACH t IN ARRAY ARRAY['checkpoints', 'checkpoint_writes'] LOOP
        rel := to_regclass(format('%I.%I', current_schema(), t));
        IF rel IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM pg_trigger WHERE tgrelid = rel AND tgname = 'agentrun_fence'
        ) THEN
            EXECUTE format(
                'CREATE TRIGGER agentrun_fence BEFORE INSERT OR UPDATE ON %s '
                'FOR EACH ROW EXECUTE FUNCTION agentrun_fence_checkpoint_row()', rel);
            done := done || t;
        END IF;
    END LOOP;
    RETURN done;
END
$$;

-- How the saver marks a connection (agentrun_core/store/checkpoints.py mark_fence): refused unless both
-- tables carry the trigger, so a worker against a schema without it fails its writes instead of writing
-- unfenced (a new worker before the operator migrated, a table recreated by hand).
CREATE FUNCTION agentrun_mark_fence(p_fence text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT count(*) FROM pg_trigger
        WHERE tgname = 'agentrun_fence'
          AND tgrelid IN (to_regclass('checkpoints'), to_regclass('checkpoint_writes'))) < 2 THEN
        RAISE EXCEPTION 'the checkpoint tables are not fenced: run agentrun''s migrations (migration 16)'
            USING ERRCODE = 'AR500';
    END IF;
    PERFORM set_config('agentrun.fence', p_fence, false);
END
$$;

-- A write the saver's client abandons half-way (an exception between two of its statements): sent before the
-- pipeline's Sync, it aborts the implicit transaction, so nothing of that write commits.
CREATE FUNCTION agentrun_abandon_write() RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'checkpoint write abandoned by the client: nothing of it commits' USING ERRCODE = 'AR400';
END
$$;

SELECT agentrun_fence_checkpoint_tables();
