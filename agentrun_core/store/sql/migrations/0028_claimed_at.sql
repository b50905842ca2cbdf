-- agentrun schema, migration 28: when the current epoch began (Postgres' clock): the worker's claim of the run.
--
-- Why: after a takeover, a negative lookup is trusted only once the deposed holder's calls can no longer
-- land: it could issue one until its Lease ended, that is until the new worker claimed the run, so the floor
-- is the claim + the tool's timeout (queries.sql reserve_effect). It was counted from the attempt row the
-- operator inserts when it creates the Pod: a Pod that started late (image pull, a slow node, a full
-- throttle) claimed the run later than that, and the wait was shorter than the floor by as much.
--
-- A trigger, not a column of the claim statement: every statement that raises lease_epoch or changes the
-- holder sets it, whichever release wrote it (a worker of an earlier release, pinned to its image, claims
-- with its own statement), so it never belongs to an earlier epoch. NULL for a run not claimed since this
-- migration: the floor then counts from the lookup itself (the longest wait), never from an earlier moment.
ALTER TABLE agentrun_runs ADD COLUMN claimed_at timestamptz;

CREATE FUNCTION agentrun_runs_claimed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.lease_epoch > OLD.lease_epoch OR NEW.holder IS DISTINCT FROM OLD.holder THEN
        NEW.claimed_at := now();
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER agentrun_runs_claimed BEFORE UPDATE ON agentrun_runs
    FOR EACH ROW EXECUTE FUNCTION agentrun_runs_claimed();
