-- agentrun schema, migration 1.
-- Applied by agentrun_core.store.migrate(); recorded in agentrun_schema_version (never langgraph's
-- checkpoint_migrations, which belongs to langgraph-checkpoint-postgres).

-- One row per run, written by whoever admits the run (the operator) BEFORE any worker executes.
-- run_id is the AgentRun's metadata.uid and also the LangGraph thread_id.
CREATE TABLE agentrun_runs (
    run_id          text PRIMARY KEY,
    namespace       text        NOT NULL,
    name            text        NOT NULL,
    graph           text        NOT NULL,             -- "package.module:attr"
    input           jsonb       NOT NULL,
    spec_hash       text        NOT NULL,
    durability      text        NOT NULL DEFAULT 'sync'
                    CHECK (durability IN ('sync', 'async', 'exit')),
    -- admitted: no worker has finished an attempt yet; running: a worker holds the lease;
    -- parked: waiting on a human (no pod); needs_human: an effect of unknown outcome stopped it;
    -- succeeded / failed / cancelled: final.
    status          text        NOT NULL DEFAULT 'admitted'
                    CHECK (status IN ('admitted', 'running', 'parked', 'needs_human',
                                      'succeeded', 'failed', 'cancelled')),
    -- Fencing: the Lease transition count taken by the newest attempt. Only raised, never lowered.
    lease_epoch     bigint      NOT NULL DEFAULT 0,
    holder          text,                             -- pod name of the current/last lease holder
    current_step    text,
    read_only       boolean     NOT NULL DEFAULT false,  -- effects refused (approval deadline policy)
    approval_policy jsonb       NOT NULL DEFAULT '{}'::jsonb,  -- {"timeoutSeconds": .., ...} copy of spec
    result          jsonb,
    error           text,
    status_reason   text,
    admitted_at     timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz
);
CREATE INDEX agentrun_runs_status_idx ON agentrun_runs (status);

-- One row per worker attempt (pod). Written by the worker at lease acquisition and exit; the operator
-- adds the reason the attempt was started (first, evicted, OOMKilled, lease_expired, ...).
CREATE TABLE agentrun_attempts (
    run_id          text        NOT NULL REFERENCES agentrun_runs (run_id) ON DELETE CASCADE,
    attempt         integer     NOT NULL,
    pod             text        NOT NULL,
    epoch           bigint,
    start_reason    text,
    started_at      timestamptz NOT NULL DEFAULT now(),
    ended_at        timestamptz,
    outcome         text,       -- succeeded, failed, parked, drained, fenced, needs_human, lost
    detail          text,
    PRIMARY KEY (run_id, attempt)
);

-- The effect ledger: one row per idempotency key.
CREATE TABLE agentrun_effects (
    idempotency_key text PRIMARY KEY,
    run_id          text        NOT NULL REFERENCES agentrun_runs (run_id) ON DELETE CASCADE,
    step            text        NOT NULL,
    action          text        NOT NULL,             -- logical action, e.g. "send_email"
    tool            text        NOT NULL,             -- tool name, bounded set (a metrics label)
    occurrence      integer     NOT NULL DEFAULT 0,   -- n-th distinct call of (step, action, args) in a step
    args_hash       text        NOT NULL,
    args            jsonb       NOT NULL,
    status          text        NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'sent', 'confirmed', 'failed')),
    needs_human     boolean     NOT NULL DEFAULT false,  -- unknown outcome that nothing could reconcile
    attempts        integer     NOT NULL DEFAULT 0,      -- provider calls made for this key
    provider_ref    text,
    result          jsonb,
    error           text,
    epoch           bigint      NOT NULL,             -- fencing epoch of the last writer
    duplicates_prevented integer NOT NULL DEFAULT 0,  -- ledger hits that skipped a provider call
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    sent_at         timestamptz,
    confirmed_at    timestamptz
);
CREATE INDEX agentrun_effects_run_idx ON agentrun_effects (run_id);
CREATE INDEX agentrun_effects_pending_idx ON agentrun_effects (created_at) WHERE status = 'pending';

-- Human approvals. approval_id is deterministic per interrupt (see agent_worker docs).
CREATE TABLE agentrun_approvals (
    approval_id     text PRIMARY KEY,
    run_id          text        NOT NULL REFERENCES agentrun_runs (run_id) ON DELETE CASCADE,
    interrupt_id    text        NOT NULL,
    prompt          jsonb       NOT NULL,             -- the interrupt's value
    requested_at    timestamptz NOT NULL DEFAULT now(),
    deadline        timestamptz,
    status          text        NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'approved', 'rejected', 'expired')),
    decided_by      text,
    decided_at      timestamptz,
    comment         text,
    payload         jsonb,                            -- what Command(resume=...) receives
    deadline_action text,                             -- escalate / cancel / read_only when expired
    resumed_at      timestamptz                       -- set once by the worker that consumed it
);
CREATE INDEX agentrun_approvals_run_idx ON agentrun_approvals (run_id);
CREATE UNIQUE INDEX agentrun_approvals_one_pending ON agentrun_approvals (run_id) WHERE status = 'pending';

-- Heartbeats of long tool calls and of the worker itself (key = 'worker' or an effect key).
CREATE TABLE agentrun_heartbeats (
    run_id          text        NOT NULL REFERENCES agentrun_runs (run_id) ON DELETE CASCADE,
    key             text        NOT NULL,
    details         jsonb,
    beat_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, key)
);

-- Step and checkpoint timings written by workers, read by the trace CLI and the metrics collector
-- (workers are short-lived; the operator's collector turns these rows into histograms).
CREATE TABLE agentrun_step_events (
    id              bigserial PRIMARY KEY,
    run_id          text        NOT NULL REFERENCES agentrun_runs (run_id) ON DELETE CASCADE,
    attempt         integer     NOT NULL,
    step            text        NOT NULL,
    checkpoint_id   text,
    started_at      timestamptz NOT NULL,
    duration_seconds double precision NOT NULL,
    checkpoint_seconds double precision,
    effect_keys     text[]      NOT NULL DEFAULT '{}',
    recorded_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX agentrun_step_events_run_idx ON agentrun_step_events (run_id, id);
