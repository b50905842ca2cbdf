-- agentrun schema, migration 30: model usage of a run (spec.budget), one row per model call the worker saw
-- answer (agent_worker/budget.py). The worker sums these rows at its start, so a kill cannot reset what a
-- run spent; a call is keyed by the attempt's epoch, the calling task's step identity and the call's index
-- within that task in this attempt (call_key), so writing a row again is a no-op. A step answered from its
-- checkpoint calls no model and writes nothing; a call re-executed after a kill was billed again and gets
-- its own row (another epoch). Not fenced: a deposed worker's call was billed too.
-- Money is integers of micro-units of spec.budget.currency (agentrun_core.budget), never floats.

CREATE TABLE agentrun_model_usage (
    run_id         text        NOT NULL REFERENCES agentrun_runs (run_id) ON DELETE CASCADE,
    call_key       text        NOT NULL,
    attempt        integer     NOT NULL,
    step           text        NOT NULL,  -- the top-level step (node:step) the call belongs to, for the trace
    model          text,
    input_tokens   bigint      NOT NULL CHECK (input_tokens >= 0),
    output_tokens  bigint      NOT NULL CHECK (output_tokens >= 0),
    total_tokens   bigint      NOT NULL CHECK (total_tokens >= 0),
    cost_micro     bigint      NOT NULL CHECK (cost_micro >= 0),
    recorded_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, call_key)
);

-- Workers add rows and read their run's; they never change or delete one.
SELECT agentrun_protect('agentrun_model_usage', 'run_id', 'SELECT, INSERT');
