-- agentrun schema, migration 30: model usage of a run (spec.budget), one row per model call the worker saw
-- answer (agent_worker/budget.py). The worker sums these rows at its start, so a kill cannot reset what a
-- run spent; a call is keyed by the attempt's epoch, the calling task's step identity and the call's index
-- within that task in this attempt (call_key), so writing a row again is a no-op. A step answered from its
-- checkpoint calls no model and writes nothing; a call re-executed after a kill was billed again and gets
-- its own row (another epoch). Not fenced: a deposed worker's call was billed too.
-- Money is integers of micro-units of spec.budget.currency (agentrun_core.budget), never floats.

CREATE TABLE agentrun_model_usage (
    run_id         text        NOT NULL REFERENCES agentrun_runs (run_id) ON DELETE CASCADE,
    call_key       text        NOT NULL,
    attempt        integer     NOT NULL,
    step           text        NOT NULL,  -- the top-level step (node:step) the call belongs to, for the trace
    model          text,
    input_tokens   bigint      NOT NULL CHECK (input_tokens >= 0),
    output_tokens  bigint      NOT NULL CHECK (output_tokens >= 0),
    total_tokens   bigint      NOT NULL CHECK (total_tokens >= 0),
    cost_micro     bigint      NOT NULL CHECK (cost_micro >= 0),
    recorded_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, call_key)
);

-- Workers add rows and read their run's; they never change or delete one.
SELECT agentrun_protect('agentrun_model_usage', 'run_id', 'SELECT, INSERT');

-- The counters agentrun_model_tokens_total / agentrun_model_cost_total / agentrun_model_calls_total keep a run's
-- usage once retention folds and purges it: its rows are a contribution of family 'model_usage' to the
-- rollups (n calls, v1 input tokens, v2 output tokens, v3 cost in micro-units, total the total tokens), and a
-- row written to a folded run unfolds it first, as for the other tables (migration 13). The function is
-- migration 23's, with that one family added (definer rules of migration 23: pinned search_path, qualified
-- names).
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
    SELECT 'model_usage', r.namespace, '', '', count(*), coalesce(sum(u.input_tokens), 0)::bigint,
           coalesce(sum(u.output_tokens), 0)::bigint, coalesce(sum(u.cost_micro), 0)::bigint,
           coalesce(sum(u.total_tokens), 0)::float8, NULL
    FROM @schema@.agentrun_model_usage u JOIN r USING (run_id) GROUP BY 2
    UNION ALL
    SELECT h.fam, h.hns, '', '', count(*), 0, 0, 0, coalesce(sum(h.v), 0),
           (SELECT array_agg(p.c ORDER BY p.ord) FROM per_bound p WHERE p.fam = h.fam AND p.hns = h.hns)
    FROM hist h GROUP BY 1, 2
$$
$def$);

CREATE TRIGGER agentrun_model_usage_unfold BEFORE INSERT OR UPDATE OR DELETE ON agentrun_model_usage
    FOR EACH ROW EXECUTE FUNCTION agentrun_unfold_on_write();
