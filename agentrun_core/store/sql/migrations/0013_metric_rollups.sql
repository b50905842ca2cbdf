-- agentrun schema, migration 13: metric rollups, so the collector's cumulative figures cost what the runs
-- not yet folded cost, and a purge never lowers a counter.
--
-- The rule: every figure the collector exports = the rollup rows + the same aggregation over the runs whose
-- folded_at is NULL (agentrun_runs_unfolded_idx). Folding a run (agentrun_fold_runs, the leader's retention
-- thread, in batches) adds its contribution to the rollup and sets folded_at in ONE transaction, so the sum
-- does not move. Anything that changes a folded run's rows first takes its contribution back out and clears
-- folded_at (agentrun_unfold_run, from triggers), so the sum stays exact when a run is retried, an effect is
-- resolved, an attempt is closed late. Purging a run (agentrun_purge_due) folds it first, then takes back
-- only the GAUGE columns (runs by status, effect rows by status, effects needing a human, divergent rows):
-- what the ledger holds drops with the rows, what happened (counters, histograms) never decreases.
--
-- Rollup rows, by family (label1, label2; the value columns used):
--   runs              (status, '')         n = runs                                             gauge
--   effects           (tool, status)       n = rows, v1 = needing a human (gauges);
--                                          v2 = provider calls, v3 = duplicates prevented (counters)
--   divergences       (tool, '')           n = divergent rows (gauge), v1 = divergences (counter)
--   approvals_decided (decision, '')       n                                                    counter
--   deadline_outcomes (action, '')         n                                                    counter
--   attempts_ended    (outcome, cause)     n                                                    counter
--   approval_wait, step_duration, checkpoint_duration ('', '')
--                                          n = count, total = sum, buckets[i] = values <= bounds[i]
-- Histogram bounds are agentrun_metric_bounds (the same as operator/agent_operator/metrics.py; a test
-- checks). Neither table has a run id: workers get no grant (migration 5's rule), RLS on as a second lock.

CREATE TABLE agentrun_metric_rollups (
    family      text             NOT NULL,
    namespace   text             NOT NULL,
    label1      text             NOT NULL DEFAULT '',
    label2      text             NOT NULL DEFAULT '',
    n           bigint           NOT NULL DEFAULT 0,
    v1          bigint           NOT NULL DEFAULT 0,
    v2          bigint           NOT NULL DEFAULT 0,
    v3          bigint           NOT NULL DEFAULT 0,
    total       double precision NOT NULL DEFAULT 0,
    buckets     bigint[],
    PRIMARY KEY (family, namespace, label1, label2)
);
ALTER TABLE agentrun_metric_rollups ENABLE ROW LEVEL SECURITY;

CREATE TABLE agentrun_metric_bounds (
    family      text             PRIMARY KEY,
    bounds      double precision[] NOT NULL
);
ALTER TABLE agentrun_metric_bounds ENABLE ROW LEVEL SECURITY;
INSERT INTO agentrun_metric_bounds (family, bounds) VALUES
    ('approval_wait', '{1, 10, 60, 300, 900, 3600, 14400, 86400, 259200, 604800}'),
    ('step_duration', '{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}'),
    ('checkpoint_duration', '{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}');

ALTER TABLE agentrun_runs ADD COLUMN folded_at timestamptz;
-- The runs not folded yet: the live ones and the final ones the next fold takes. Small whatever the history.
CREATE INDEX agentrun_runs_unfolded_idx ON agentrun_runs (status, namespace, run_id) WHERE folded_at IS NULL;

-- What the given runs contribute to each rollup row (the collector's aggregations, restricted to them).
CREATE FUNCTION agentrun_metric_contributions(p_runs text[])
RETURNS TABLE (family text, ns text, label1 text, label2 text, n bigint, v1 bigint, v2 bigint, v3 bigint,
               total double precision, buckets bigint[])
LANGUAGE sql STABLE SET search_path FROM CURRENT AS $$
    WITH r AS (
        SELECT run_id, namespace, status FROM agentrun_runs WHERE run_id = ANY (p_runs)
    ), hist AS (
        SELECT 'approval_wait' AS fam, r.namespace AS hns,
               extract(epoch FROM a.decided_at - a.requested_at)::float8 AS v
        FROM agentrun_approvals a JOIN r USING (run_id) WHERE a.decided_at IS NOT NULL
        UNION ALL
        SELECT 'step_duration', r.namespace, s.duration_seconds
        FROM agentrun_step_events s JOIN r USING (run_id)
        UNION ALL
        SELECT 'checkpoint_duration', r.namespace, s.checkpoint_seconds
        FROM agentrun_step_events s JOIN r USING (run_id) WHERE s.checkpoint_seconds IS NOT NULL
    ), per_bound AS (
        SELECT h.fam, h.hns, b.ord, count(*) FILTER (WHERE h.v <= b.bound) AS c
        FROM hist h JOIN agentrun_metric_bounds mb ON mb.family = h.fam
        CROSS JOIN LATERAL unnest(mb.bounds) WITH ORDINALITY b (bound, ord)
        GROUP BY 1, 2, 3
    )
    SELECT 'runs', r.namespace, r.status, '', count(*), 0::bigint, 0::bigint, 0::bigint, 0::float8,
           NULL::bigint[]
    FROM r GROUP BY 2, 3
    UNION ALL
    SELECT 'effects', r.namespace, e.tool, e.status, count(*), count(*) FILTER (WHERE e.needs_human),
           coalesce(sum(e.attempts), 0), coalesce(sum(e.duplicates_prevented), 0), 0, NULL
    FROM agentrun_effects e JOIN r USING (run_id) GROUP BY 2, 3, 4
    UNION ALL
    SELECT 'divergences', r.namespace, e.tool, '', count(*), coalesce(sum(e.divergences), 0), 0, 0, 0, NULL
    FROM agentrun_effects e JOIN r USING (run_id) WHERE e.divergences > 0 GROUP BY 2, 3
    UNION ALL
    SELECT 'approvals_decided', r.namespace, a.status, '', count(*), 0, 0, 0, 0, NULL
    FROM agentrun_approvals a JOIN r USING (run_id) WHERE a.status <> 'pending' GROUP BY 2, 3
    UNION ALL
    SELECT 'deadline_outcomes', r.namespace, coalesce(a.deadline_action, 'unknown'), '', count(*), 0, 0, 0, 0,
           NULL
    FROM agentrun_approvals a JOIN r USING (run_id) WHERE a.status = 'expired' GROUP BY 2, 3
    UNION ALL
    SELECT 'attempts_ended', r.namespace, t.outcome,
           CASE WHEN t.control_plane THEN 'control_plane' ELSE 'run' END, count(*), 0, 0, 0, 0, NULL
    FROM agentrun_attempts t JOIN r USING (run_id) WHERE t.outcome IS NOT NULL GROUP BY 2, 3, 4
    UNION ALL
    SELECT h.fam, h.hns, '', '', count(*), 0, 0, 0, coalesce(sum(h.v), 0),
           (SELECT array_agg(p.c ORDER BY p.ord) FROM per_bound p WHERE p.fam = h.fam AND p.hns = h.hns)
    FROM hist h GROUP BY 1, 2
$$;

-- Element-wise sum of two bucket arrays (NULL: nothing yet).
CREATE FUNCTION agentrun_buckets_add(a bigint[], b bigint[]) RETURNS bigint[]
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN a IS NULL THEN b WHEN b IS NULL THEN a
                ELSE ARRAY(SELECT coalesce(x, 0) + coalesce(y, 0) FROM unnest(a, b) WITH ORDINALITY u (x, y, i)
                           ORDER BY i) END
$$;

-- Add p_sign (1 or -1) times the runs' contribution to the rollup. p_gauges_only: only the gauge columns
-- (what a purge takes back).
CREATE FUNCTION agentrun_rollup_add(p_runs text[], p_sign integer, p_gauges_only boolean) RETURNS void
LANGUAGE sql SET search_path FROM CURRENT AS $$
    INSERT INTO agentrun_metric_rollups AS t (family, namespace, label1, label2, n, v1, v2, v3, total, buckets)
    SELECT c.family, c.ns, c.label1, c.label2, p_sign * c.n,
           CASE WHEN p_gauges_only AND c.family <> 'effects' THEN 0 ELSE p_sign * c.v1 END,
           CASE WHEN p_gauges_only THEN 0 ELSE p_sign * c.v2 END,
           CASE WHEN p_gauges_only THEN 0 ELSE p_sign * c.v3 END,
           CASE WHEN p_gauges_only THEN 0 ELSE p_sign * c.total END,
           CASE WHEN p_gauges_only OR c.buckets IS NULL THEN NULL
                ELSE ARRAY(SELECT p_sign * x FROM unnest(c.buckets) WITH ORDINALITY u (x, i) ORDER BY i) END
    FROM agentrun_metric_contributions(p_runs) c
    WHERE NOT p_gauges_only OR c.family IN ('runs', 'effects', 'divergences')
    ON CONFLICT (family, namespace, label1, label2) DO UPDATE
    SET n = t.n + excluded.n, v1 = t.v1 + excluded.v1, v2 = t.v2 + excluded.v2, v3 = t.v3 + excluded.v3,
        total = t.total + excluded.total, buckets = agentrun_buckets_add(t.buckets, excluded.buckets)
$$;

-- One batch of final, unfolded runs folded; how many. Runs another folder (or a writer of their rows, which
-- holds a KEY SHARE lock from agentrun_unfold_run) holds are skipped. The contribution is read by a later
-- statement than the lock, so it sees every write committed before the lock was granted (READ COMMITTED:
-- each statement of a function takes a new snapshot).
CREATE FUNCTION agentrun_fold_runs(p_batch integer) RETURNS integer
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    ids text[];
BEGIN
    SELECT array_agg(x.run_id) INTO ids FROM (
        SELECT run_id FROM agentrun_runs
        WHERE folded_at IS NULL AND status IN ('succeeded', 'failed', 'cancelled')
        LIMIT p_batch
        FOR UPDATE SKIP LOCKED
    ) x;
    IF ids IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM agentrun_rollup_add(ids, 1, false);
    UPDATE agentrun_runs SET folded_at = now() WHERE run_id = ANY (ids);
    RETURN cardinality(ids);
END
$$;

-- Before a folded run's rows change: take its contribution back out and mark it unfolded (the collector then
-- aggregates its rows again). KEY SHARE (what a foreign-key check takes anyway) waits for a folder holding
-- the run and makes the next folder skip it until this transaction ends. Definer rights: a worker's write
-- may be the one that unfolds, and workers have no grant on the rollup.
CREATE FUNCTION agentrun_unfold_run(p_run_id text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    folded timestamptz;
BEGIN
    SELECT folded_at INTO folded FROM agentrun_runs WHERE run_id = p_run_id FOR KEY SHARE;
    IF folded IS NOT NULL THEN
        PERFORM agentrun_rollup_add(ARRAY[p_run_id], -1, false);
        UPDATE agentrun_runs SET folded_at = NULL WHERE run_id = p_run_id;
    END IF;
END
$$;
REVOKE ALL ON FUNCTION agentrun_unfold_run(text) FROM PUBLIC;

CREATE FUNCTION agentrun_unfold_on_write() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM agentrun_unfold_run(OLD.run_id);  -- a purge deletes the run first: nothing found, nothing done
        RETURN OLD;
    END IF;
    PERFORM agentrun_unfold_run(NEW.run_id);
    RETURN NEW;
END
$$;
CREATE TRIGGER agentrun_effects_unfold BEFORE INSERT OR UPDATE OR DELETE ON agentrun_effects
    FOR EACH ROW EXECUTE FUNCTION agentrun_unfold_on_write();
CREATE TRIGGER agentrun_approvals_unfold BEFORE INSERT OR UPDATE OR DELETE ON agentrun_approvals
    FOR EACH ROW EXECUTE FUNCTION agentrun_unfold_on_write();
CREATE TRIGGER agentrun_attempts_unfold BEFORE INSERT OR UPDATE OR DELETE ON agentrun_attempts
    FOR EACH ROW EXECUTE FUNCTION agentrun_unfold_on_write();
CREATE TRIGGER agentrun_step_events_unfold BEFORE INSERT OR UPDATE OR DELETE ON agentrun_step_events
    FOR EACH ROW EXECUTE FUNCTION agentrun_unfold_on_write();

-- A folded run whose status or namespace changes (a retry reopens it): its contribution is read before the
-- row changes (BEFORE trigger: the table still holds OLD) and taken out; the run is unfolded.
CREATE FUNCTION agentrun_runs_unfold() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    IF OLD.folded_at IS NOT NULL AND NEW.folded_at IS NOT NULL
       AND (NEW.status IS DISTINCT FROM OLD.status OR NEW.namespace IS DISTINCT FROM OLD.namespace) THEN
        PERFORM agentrun_rollup_add(ARRAY[OLD.run_id], -1, false);
        NEW.folded_at := NULL;
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER agentrun_runs_unfold BEFORE UPDATE ON agentrun_runs
    FOR EACH ROW EXECUTE FUNCTION agentrun_runs_unfold();

-- One batch of due runs purged (replaces the purge_due statement): locked, folded when not yet (so the
-- counters keep them), their gauge columns taken back, then their checkpoints and rows deleted (the agentrun
-- tables by ON DELETE CASCADE). Returns their ids.
CREATE FUNCTION agentrun_purge_due(p_batch integer) RETURNS SETOF text
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    ids text[];
    unfolded text[];
BEGIN
    SELECT array_agg(d.run_id) INTO ids FROM (
        SELECT run_id FROM agentrun_retention
        WHERE purge_after <= now()
        ORDER BY purge_after
        LIMIT p_batch
        FOR UPDATE SKIP LOCKED
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

-- Called by the operator (the owner) and by the definer-rights triggers above, never by a worker.
REVOKE ALL ON FUNCTION agentrun_metric_contributions(text[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION agentrun_rollup_add(text[], integer, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION agentrun_fold_runs(integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION agentrun_purge_due(integer) FROM PUBLIC;
