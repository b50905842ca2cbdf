-- The metrics collector (operator/agent_operator/metrics_pg.py) runs at every scrape. Its queries about the
-- present — runs not yet final, their heartbeats, pending effects and approvals — must cost what the live
-- runs cost, not what the retained history costs: each starts from a partial index over the live rows.
--   * live runs by (namespace, status): the runs gauge's non-final part and the heartbeat query's driver.
--     Final runs are the bulk of the table and never enter this index.
--   * pending effects by run: the heartbeat query looks up each running run's pending tool calls.
-- (Pending approvals already have agentrun_approvals_one_pending; divergent effects
-- agentrun_effects_divergent_idx; the oldest pending effect agentrun_effects_pending_idx.)
CREATE INDEX agentrun_runs_live_idx ON agentrun_runs (status, namespace)
    WHERE status NOT IN ('succeeded', 'failed', 'cancelled');
CREATE INDEX agentrun_effects_pending_run_idx ON agentrun_effects (run_id) WHERE status = 'pending';
