-- Exact worker grants for the tables that migrations 0002, 0004 and 0006 added (written in parallel with
-- 0005's row-level security, whose safety net agentrun_protect_all() would otherwise give them full DML on
-- a tenant's own rows):
--   * agentrun_checkpoint_heads: the fenced checkpointer reads and moves a subgraph namespace's head;
--   * agentrun_interventions: who retried / resolved is written by the operator only — a worker could
--     otherwise forge or erase its own run's audit rows; it may read them;
--   * agentrun_retention: the operator's purge schedule — a worker could otherwise delete its run's row and
--     escape retention; no grant at all.
SELECT agentrun_protect('agentrun_checkpoint_heads', 'run_id', 'SELECT, INSERT, UPDATE');
SELECT agentrun_protect('agentrun_interventions', 'run_id', 'SELECT');
SELECT agentrun_protect('agentrun_retention', 'run_id', '');
