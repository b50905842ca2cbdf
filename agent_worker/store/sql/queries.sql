-- Named queries of agent_worker.store. Each block starts with "-- name: <name>"; placeholders are
-- psycopg named parameters. agent_worker.store is the only module that runs SQL.

-- name: get_run
SELECT * FROM agentrun_runs WHERE run_id = %(run_id)s
