-- agentrun schema, migration 35: the schema's worker-compatibility level (agentrun_core/compat.py,
-- docs/upgrading.md).
--
-- A worker image is pinned per run ("Runs keep their code"), so after an upgrade old images keep running
-- against the migrated schema, and a new image may start before the migrations ran. The level is one number
-- that a migration raises only when it changes what every worker must do (a column it must write, a key
-- format it must derive); additive migrations leave it. Each worker knows the range of levels it runs
-- against and checks it before it takes the run's Lease: outside it, it exits 15 (protocol.EXIT_INCOMPATIBLE)
-- and the operator keeps the run waiting (condition WorkerIncompatible) instead of failing it.
-- Not per run, so not covered by row-level security: every worker role reads it, nobody else writes it.
CREATE TABLE agentrun_schema_compat (
    id      integer PRIMARY KEY CHECK (id = 1),  -- a single row
    level   integer NOT NULL CHECK (level >= 1)
);
INSERT INTO agentrun_schema_compat (id, level) VALUES (1, 1);
REVOKE ALL ON agentrun_schema_compat FROM PUBLIC;
GRANT SELECT ON agentrun_schema_compat TO agentrun_worker;
