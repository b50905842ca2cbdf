-- agentrun schema, migration 4: humans steering finished or stuck runs (retry, resolve) and fenced cancel.
--
-- retry_generation: the spec.retryGeneration the run was last reopened under (0: never retried). Effects
--   whose row is 'failed' get a fresh key under a later generation (agentrun_core.keys, generation > 0);
--   sent/confirmed rows keep their key and return their stored result.
-- reopened: how many times a human reopened the run (retry, or resolving the effect that stopped it). The
--   operator compares it with status.reopened to start the next attempt exactly once per reopening.
-- interventions: how many rows agentrun_interventions holds for the run (the operator reads them only then).
ALTER TABLE agentrun_runs ADD COLUMN retry_generation integer NOT NULL DEFAULT 0;
ALTER TABLE agentrun_runs ADD COLUMN reopened integer NOT NULL DEFAULT 0;
ALTER TABLE agentrun_runs ADD COLUMN interventions integer NOT NULL DEFAULT 0;

-- Who did what to a run, and when: the record of every retry and every resolved effect. Written in the same
-- statement as the change it records, so the record and the change cannot disagree.
CREATE TABLE agentrun_interventions (
    id              bigserial PRIMARY KEY,
    run_id          text        NOT NULL REFERENCES agentrun_runs (run_id) ON DELETE CASCADE,
    kind            text        NOT NULL CHECK (kind IN ('retry', 'resolve_sent', 'resolve_not_sent')),
    effect_key      text,                             -- resolve: the effect's idempotency key
    generation      integer,                          -- retry: the new retry generation
    by              text        NOT NULL,             -- request.userInfo.username, stamped at admission
    at              timestamptz NOT NULL DEFAULT now(),
    from_status     text,                             -- the run's status before (failed, needs_human, ...)
    detail          jsonb                             -- resolve: the effect row as it was; retry: {}
);
CREATE INDEX agentrun_interventions_run_idx ON agentrun_interventions (run_id, id);
