-- agentrun schema, migration 6: retention of finished runs.
-- A run whose AgentRun is gone is marked here (by the operator: at once when ttlSecondsAfterFinished deletes
-- it, after AGENTRUN_RETENTION_SECONDS for any other delete); purge_due then removes its rows in every
-- agentrun table (ON DELETE CASCADE from agentrun_runs) and its LangGraph checkpoints (thread_id = run_id),
-- in bounded batches. A table of its own, not a column of agentrun_runs: marking never rewrites a run row.
CREATE TABLE agentrun_retention (
    run_id      text        PRIMARY KEY,
    purge_after timestamptz NOT NULL,
    reason      text        NOT NULL,
    marked_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX agentrun_retention_due_idx ON agentrun_retention (purge_after);
