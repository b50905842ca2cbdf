-- agentrun schema, migration 24: idempotency keys and approval ids are identifiers within their run
-- (issue 35, item 2).
--
-- Both were primary keys across all tenants, and both are pure functions of the run's uid (agentrun_core.keys):
-- a tenant's worker role could insert another tenant's NEXT key under a run of its own (row-level security
-- allows any row of one's own runs), and that tenant's worker was then refused at that effect as Fenced on
-- every attempt (its insert conflicted; row-level security hid the row it conflicted with). The same for the
-- next approval id. Now the primary keys are (run_id, idempotency_key) and (run_id, approval_id): what one run
-- holds cannot collide with another's, and every statement looks a row up by both (queries.sql).
--
-- Existing rows stay as they are: a key unique across all runs is unique within its run. The new key's index
-- is built first, then swapped in for the old one under the same constraint name. The (run_id) indexes the
-- new keys lead with are dropped: the primary keys serve every look-up by run.

CREATE UNIQUE INDEX agentrun_effects_pkey_24 ON agentrun_effects (run_id, idempotency_key);
ALTER TABLE agentrun_effects
    DROP CONSTRAINT agentrun_effects_pkey,
    ADD CONSTRAINT agentrun_effects_pkey PRIMARY KEY USING INDEX agentrun_effects_pkey_24;
DROP INDEX agentrun_effects_run_idx;

CREATE UNIQUE INDEX agentrun_approvals_pkey_24 ON agentrun_approvals (run_id, approval_id);
ALTER TABLE agentrun_approvals
    DROP CONSTRAINT agentrun_approvals_pkey,
    ADD CONSTRAINT agentrun_approvals_pkey PRIMARY KEY USING INDEX agentrun_approvals_pkey_24;
DROP INDEX agentrun_approvals_run_idx;
