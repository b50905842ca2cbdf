-- agentrun schema, migration 2: the head checkpoint of each run, written fenced by the worker's saver.
--
-- Resume starts from the head, never from "newest checkpoint by id": LangGraph's ids are uuid6 values made
-- from the writer's wall clock, so an attempt whose clock is behind writes ids that sort before older ones.
-- The head is set in the same transaction as the checkpoint it names, under the run's fencing epoch
-- (agent_worker/checkpointer.py), so a deposed worker can neither write a checkpoint nor move the head.

-- The root namespace's head (checkpoint_ns = '').
ALTER TABLE agentrun_runs ADD COLUMN head_checkpoint_id text;

-- Subgraph namespaces (checkpoint_ns <> ''): the newest checkpoint each namespace's writer saved.
CREATE TABLE agentrun_checkpoint_heads (
    run_id          text        NOT NULL REFERENCES agentrun_runs (run_id) ON DELETE CASCADE,
    checkpoint_ns   text        NOT NULL CHECK (checkpoint_ns <> ''),
    checkpoint_id   text        NOT NULL,
    epoch           bigint      NOT NULL,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, checkpoint_ns)
);
