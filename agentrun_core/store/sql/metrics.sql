-- Named queries of the ledger collector (agentrun_core.store.metrics_sql): read-only, run at scrape time in
-- one repeatable-read transaction. Ages use Postgres' now(): the timestamps they are compared with were
-- written by the same clock (DEFAULT now()), not by the operator's.
--
-- Cumulative figures (migration 0013): the rollup rows of a family + the same aggregation over the runs not
-- folded yet (agentrun_runs_unfolded_idx, then each run's rows by run id). A scrape costs what the unfolded
-- runs cost; a purge takes back only the gauge columns, so counters and histograms never decrease. A row
-- whose figures all sum to 0 (a run folded, then unfolded) is left out, as when nothing was ever counted.
-- The histograms' queries are composed in metrics_sql.histogram_query (one FILTER per bucket bound).

-- name: metrics_runs_live
-- Live runs from the partial index agentrun_runs_live_idx (migration 0011): its size is the number of runs
-- not yet final, whatever the history retained.
SELECT namespace, status, count(*) FROM agentrun_runs
WHERE status NOT IN ('succeeded', 'failed', 'cancelled')
GROUP BY 1, 2

-- name: metrics_runs_final
SELECT namespace, status, sum(n)::bigint FROM (
    SELECT namespace, label1 AS status, n FROM agentrun_metric_rollups
    WHERE family = 'runs' AND label1 IN ('succeeded', 'failed', 'cancelled')
    UNION ALL
    SELECT namespace, status, count(*) FROM agentrun_runs
    WHERE folded_at IS NULL AND status IN ('succeeded', 'failed', 'cancelled')
    GROUP BY 1, 2
) x
GROUP BY 1, 2 HAVING sum(n) <> 0

-- name: metrics_effects
SELECT namespace, tool, status, sum(n)::bigint, sum(nh)::bigint, sum(pc)::bigint, sum(dp)::bigint FROM (
    SELECT namespace, label1 AS tool, label2 AS status, n, v1 AS nh, v2 AS pc, v3 AS dp
    FROM agentrun_metric_rollups WHERE family = 'effects'
    UNION ALL
    SELECT r.namespace, e.tool, e.status, count(*), count(*) FILTER (WHERE e.needs_human),
           coalesce(sum(e.attempts), 0), coalesce(sum(e.duplicates_prevented), 0)
    FROM agentrun_runs r JOIN agentrun_effects e USING (run_id)
    WHERE r.folded_at IS NULL
    GROUP BY 1, 2, 3
) x
GROUP BY 1, 2, 3 HAVING sum(n) <> 0 OR sum(nh) <> 0 OR sum(pc) <> 0 OR sum(dp) <> 0

-- name: metrics_effect_divergences
SELECT namespace, tool, sum(n)::bigint, sum(d)::bigint FROM (
    SELECT namespace, label1 AS tool, n, v1 AS d FROM agentrun_metric_rollups WHERE family = 'divergences'
    UNION ALL
    SELECT r.namespace, e.tool, count(*), coalesce(sum(e.divergences), 0)
    FROM agentrun_effects e JOIN agentrun_runs r USING (run_id)
    WHERE e.divergences > 0 AND r.folded_at IS NULL
    GROUP BY 1, 2
) x
GROUP BY 1, 2 HAVING sum(n) <> 0 OR sum(d) <> 0

-- name: metrics_oldest_pending_effect
SELECT r.namespace, extract(epoch FROM now() - min(e.created_at))::float8
FROM agentrun_effects e JOIN agentrun_runs r USING (run_id)
WHERE e.status = 'pending'
GROUP BY 1

-- name: metrics_heartbeat_ages
-- Only heartbeats that still mean something, of running runs: the worker's own ('worker'), the current
-- step's ('step:<name>'), and tool calls whose effect is still pending (a finished call's last beat is
-- history). Driven from the running runs (agentrun_runs_live_idx), each of the keys looked up by primary key:
-- the heartbeats of finished runs are never read (a join over the whole table would read them all).
SELECT r.namespace, k.kind, greatest(0, extract(epoch FROM now() - h.beat_at))::float8
FROM agentrun_runs r
CROSS JOIN LATERAL (
    VALUES ('worker', 'worker'), ('step', 'step:' || r.current_step)
    UNION ALL
    SELECT 'tool', e.idempotency_key FROM agentrun_effects e
    WHERE e.run_id = r.run_id AND e.status = 'pending'
) k (kind, key)
JOIN agentrun_heartbeats h ON h.run_id = r.run_id AND h.key = k.key
WHERE r.status = 'running'

-- name: metrics_approvals_pending
SELECT r.namespace, count(*), extract(epoch FROM min(a.deadline) - now())::float8
FROM agentrun_approvals a JOIN agentrun_runs r USING (run_id)
WHERE a.status = 'pending'
GROUP BY 1

-- name: metrics_approval_pending_ages
SELECT r.namespace, greatest(0, extract(epoch FROM now() - a.requested_at))::float8
FROM agentrun_approvals a JOIN agentrun_runs r USING (run_id)
WHERE a.status = 'pending'

-- name: metrics_approvals_decided
SELECT namespace, status, sum(n)::bigint FROM (
    SELECT namespace, label1 AS status, n FROM agentrun_metric_rollups WHERE family = 'approvals_decided'
    UNION ALL
    SELECT r.namespace, a.status, count(*)
    FROM agentrun_runs r JOIN agentrun_approvals a USING (run_id)
    WHERE r.folded_at IS NULL AND a.status <> 'pending'
    GROUP BY 1, 2
) x
GROUP BY 1, 2 HAVING sum(n) <> 0

-- name: metrics_deadline_outcomes
SELECT namespace, action, sum(n)::bigint FROM (
    SELECT namespace, label1 AS action, n FROM agentrun_metric_rollups WHERE family = 'deadline_outcomes'
    UNION ALL
    SELECT r.namespace, coalesce(a.deadline_action, 'unknown'), count(*)
    FROM agentrun_runs r JOIN agentrun_approvals a USING (run_id)
    WHERE r.folded_at IS NULL AND a.status = 'expired'
    GROUP BY 1, 2
) x
GROUP BY 1, 2 HAVING sum(n) <> 0

-- name: metrics_attempts_ended
SELECT namespace, outcome, cause, sum(n)::bigint FROM (
    SELECT namespace, label1 AS outcome, label2 AS cause, n FROM agentrun_metric_rollups
    WHERE family = 'attempts_ended'
    UNION ALL
    SELECT r.namespace, t.outcome, CASE WHEN t.control_plane THEN 'control_plane' ELSE 'run' END, count(*)
    FROM agentrun_runs r JOIN agentrun_attempts t USING (run_id)
    WHERE r.folded_at IS NULL AND t.outcome IS NOT NULL
    GROUP BY 1, 2, 3
) x
GROUP BY 1, 2, 3 HAVING sum(n) <> 0

-- name: metrics_model_usage
-- spec.budget's counting (migration 30): calls, input, output tokens and cost (micro-units) per namespace,
-- folded runs from the rollups.
SELECT namespace, sum(n)::bigint, sum(i)::bigint, sum(o)::bigint, sum(c)::bigint FROM (
    SELECT namespace, n, v1 AS i, v2 AS o, v3 AS c FROM agentrun_metric_rollups WHERE family = 'model_usage'
    UNION ALL
    SELECT r.namespace, count(*), sum(u.input_tokens), sum(u.output_tokens), sum(u.cost_micro)
    FROM agentrun_runs r JOIN agentrun_model_usage u USING (run_id)
    WHERE r.folded_at IS NULL
    GROUP BY 1
) x
GROUP BY 1 HAVING sum(n) <> 0
