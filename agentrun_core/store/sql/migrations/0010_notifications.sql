-- Notifications (spec.approval.notify) are effects in the ledger (tool 'notify'), sent by the operator.
--
-- Fencing: the operator's notifier takes a new epoch from agentrun_notifier when a process starts sending
-- (after it won leadership); every reserve and record of a notification checks that epoch IN THE SAME
-- STATEMENT, so a deposed leader that still believes it leads cannot write a notification row any more.
CREATE TABLE agentrun_notifier (
    id          integer     PRIMARY KEY CHECK (id = 1),  -- a single row
    epoch       bigint      NOT NULL,
    taken_by    text,
    taken_at    timestamptz NOT NULL DEFAULT now()
);
-- No run_id column: never covered by the tenants' policies, and workers get nothing on it.
REVOKE ALL ON agentrun_notifier FROM agentrun_worker;

-- A call was issued for this row and its outcome is not recorded yet. The notifier sets it (fenced) right
-- before each call and clears it when recording: a pending row found with it set is an unknown outcome;
-- without it, a call that provably never landed (never issued, or refused with 429/5xx and recorded so).
ALTER TABLE agentrun_effects ADD COLUMN issued boolean NOT NULL DEFAULT false;
-- Not before this time is a retried call issued again (backoff after 429/5xx or a refused connection).
ALTER TABLE agentrun_effects ADD COLUMN retry_at timestamptz;
