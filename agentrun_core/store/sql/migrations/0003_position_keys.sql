-- agentrun schema, migration 3: position-keyed effects (key format v2), divergence, in-flight deadlines.

-- The idempotency-key format a run derives its keys with. Runs admitted before this migration started under
-- format 1 (the arguments hash was part of the key) and keep it; new runs get format 2 (position only).
ALTER TABLE agentrun_runs ADD COLUMN key_version smallint NOT NULL DEFAULT 1;
ALTER TABLE agentrun_runs ALTER COLUMN key_version SET DEFAULT 2;

ALTER TABLE agentrun_effects ADD COLUMN key_version smallint NOT NULL DEFAULT 1;
-- A replay of the step asked for this position with other arguments (a nondeterministic step): the stored
-- result was returned, nothing performed again. Counted, with the last divergent arguments for the trace.
ALTER TABLE agentrun_effects ADD COLUMN divergences integer NOT NULL DEFAULT 0;
ALTER TABLE agentrun_effects ADD COLUMN diverged_args_hash text;
ALTER TABLE agentrun_effects ADD COLUMN diverged_args jsonb;
-- By when the provider call under way may still take effect (Postgres clock: now() + the tool's timeout
-- when the call was issued). A negative lookup is trusted only after it.
ALTER TABLE agentrun_effects ADD COLUMN call_deadline timestamptz;
CREATE INDEX agentrun_effects_divergent_idx ON agentrun_effects (run_id) WHERE divergences > 0;
