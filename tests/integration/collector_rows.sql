-- Rows for the collector's plan and scrape-time checks (tests/integration/collector_rows.py).
-- Placeholders: %(n)s runs, run ids prefixed %(prefix)s. Statements end with ';' at the end of a line.

-- name: finished
INSERT INTO agentrun_runs (run_id, namespace, name, graph, input, spec_hash, status, finished_at)
SELECT %(prefix)s || g, 'ns-' || (mod(g, 5)), 'r' || g, 'm:g', '{}', 'h',
       (ARRAY['succeeded', 'failed', 'cancelled'])[1 + mod(g, 3)], now()
FROM generate_series(1, %(n)s) g;
INSERT INTO agentrun_attempts (run_id, attempt, pod, epoch, ended_at, outcome)
SELECT %(prefix)s || g, 1, 'p' || g, 1, now(), 'succeeded' FROM generate_series(1, %(n)s) g;
INSERT INTO agentrun_effects (idempotency_key, run_id, step, action, tool, args_hash, args, status, epoch, attempts)
SELECT %(prefix)s || g || ':' || k, %(prefix)s || g, 's', 'a', 'email', 'h', '{}', 'confirmed',
       1, 1
FROM generate_series(1, %(n)s) g, generate_series(1, 2) k;
INSERT INTO agentrun_step_events (run_id, attempt, step, started_at, duration_seconds, checkpoint_seconds)
SELECT %(prefix)s || g, 1, 'step' || k, now(), 0.1 * k, 0.01 FROM generate_series(1, %(n)s) g, generate_series(1, 3) k;
INSERT INTO agentrun_approvals (approval_id, run_id, interrupt_id, prompt, status, decided_at, deadline_action)
SELECT %(prefix)s || g || ':a', %(prefix)s || g, 'i', '{}', CASE WHEN mod(g, 4) = 0 THEN 'expired' ELSE 'approved' END,
       now(), CASE WHEN mod(g, 4) = 0 THEN 'cancel' END
FROM generate_series(1, %(n)s) g;
INSERT INTO agentrun_heartbeats (run_id, key, beat_at)
SELECT %(prefix)s || g, k, now() FROM generate_series(1, %(n)s) g, unnest(ARRAY['worker', 'step:s']) k;

-- name: live
INSERT INTO agentrun_runs (run_id, namespace, name, graph, input, spec_hash, status, current_step)
SELECT %(prefix)s || g, 'ns-' || (mod(g, 5)), 'l' || g, 'm:g', '{}', 'h', 'running', 's'
FROM generate_series(1, %(n)s) g;
INSERT INTO agentrun_effects (idempotency_key, run_id, step, action, tool, args_hash, args, status, epoch)
SELECT %(prefix)s || g || ':e', %(prefix)s || g, 's', 'a', 'email', 'h', '{}', 'pending', 1
FROM generate_series(1, %(n)s) g;
INSERT INTO agentrun_approvals (approval_id, run_id, interrupt_id, prompt, deadline)
SELECT %(prefix)s || g || ':a', %(prefix)s || g, 'i', '{}', now() + interval '1 hour'
FROM generate_series(1, %(n)s) g;
INSERT INTO agentrun_heartbeats (run_id, key, beat_at)
SELECT %(prefix)s || g, k, now() FROM generate_series(1, %(n)s) g, unnest(ARRAY['worker', 'step:s', %(prefix)s || g || ':e']) k;
