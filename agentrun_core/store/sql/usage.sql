-- Model usage of runs (migration 30; agentrun_core/store/usage.py).

-- name: record_model_usage
INSERT INTO agentrun_model_usage
    (run_id, call_key, attempt, step, model, input_tokens, output_tokens, total_tokens, cost_micro)
VALUES (%(run_id)s, %(call_key)s, %(attempt)s, %(step)s, %(model)s, %(input_tokens)s, %(output_tokens)s,
        %(total_tokens)s, %(cost_micro)s)
ON CONFLICT (run_id, call_key) DO NOTHING;

-- name: model_usage_total
SELECT count(*) AS calls,
       coalesce(sum(input_tokens), 0)::bigint AS input_tokens,
       coalesce(sum(output_tokens), 0)::bigint AS output_tokens,
       coalesce(sum(total_tokens), 0)::bigint AS total_tokens,
       coalesce(sum(cost_micro), 0)::bigint AS cost_micro
FROM agentrun_model_usage WHERE run_id = %(run_id)s;

-- name: model_usage_by_step
SELECT attempt, step,
       count(*) AS calls,
       sum(input_tokens)::bigint AS input_tokens,
       sum(output_tokens)::bigint AS output_tokens,
       sum(total_tokens)::bigint AS total_tokens,
       sum(cost_micro)::bigint AS cost_micro
FROM agentrun_model_usage WHERE run_id = %(run_id)s GROUP BY attempt, step;
