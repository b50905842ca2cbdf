-- agentrun schema, migration 31: key format v3 for new runs (agentrun_core.keys, agent_worker.identity).
-- An effect inside a tool call is identified by the call's place in the model's message, one inside
-- another effect's body by that effect's key, and effects.position(...) names a position: never by the
-- order in which concurrent calls reach the ledger. Runs admitted before keep the format they derived
-- their keys with.
ALTER TABLE agentrun_runs ALTER COLUMN key_version SET DEFAULT 3;
