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

-- Workers from before this file do not check the level, and those of release v0.1.0 cannot write to this
-- schema (migration 24 scoped the effect keys per run: their reservation statement fails). Any that is
-- running now is fenced off: its run's epoch is raised, so its next write (a checkpoint, an effect's
-- reservation or record, its outcome) is refused, it exits fenced (12) without failing the run, and the run's
-- next attempt (after the new operator is up) starts a worker that checks. A migration that raises the level
-- does the same, for the same reason: a live worker checked the level only when it started.
UPDATE agentrun_runs SET lease_epoch = lease_epoch + 1 WHERE status IN ('admitted', 'running');
