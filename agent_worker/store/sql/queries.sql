-- Named queries of agent_worker.store. Each block starts with "-- name: <name>"; placeholders are
-- psycopg named parameters. agent_worker.store is the only module that runs SQL.
--
-- Fencing: every ledger / approval / run-finishing write by a worker carries the writer's epoch and checks it
-- against agentrun_runs.lease_epoch IN THE SAME STATEMENT, with the run row locked FOR SHARE: a concurrent
-- raise of the epoch (claim_run, an UPDATE) waits for us or we see its committed value — never a stale one.

-- ---------------------------------------------------------------------------------------------- runs

-- name: admit_run
WITH ins AS (
    INSERT INTO agentrun_runs (run_id, namespace, name, graph, input, spec_hash, durability, approval_policy)
    VALUES (%(run_id)s, %(namespace)s, %(name)s, %(graph)s, %(input)s, %(spec_hash)s, %(durability)s,
            %(approval_policy)s)
    ON CONFLICT (run_id) DO NOTHING
    RETURNING *
)
SELECT * FROM ins
UNION ALL
SELECT * FROM agentrun_runs WHERE run_id = %(run_id)s AND NOT EXISTS (SELECT 1 FROM ins)

-- name: get_run
SELECT * FROM agentrun_runs WHERE run_id = %(run_id)s

-- name: list_runs
SELECT * FROM agentrun_runs
WHERE (%(namespace)s::text IS NULL OR namespace = %(namespace)s)
  AND (%(statuses)s::text[] IS NULL OR status = ANY(%(statuses)s))
ORDER BY admitted_at, run_id

-- name: claim_run
-- The worker took the Lease with this epoch: raise lease_epoch (never lower it) and mark the run running.
-- Equal epoch only for the same holder (a restart inside the same pod). Final runs are not touched.
UPDATE agentrun_runs
SET lease_epoch = %(epoch)s, holder = %(holder)s, status = 'running', status_reason = NULL, updated_at = now()
WHERE run_id = %(run_id)s
  AND status IN ('admitted', 'running', 'parked')
  AND (lease_epoch < %(epoch)s OR (lease_epoch = %(epoch)s AND holder IS NOT DISTINCT FROM %(holder)s))
RETURNING *

-- name: finish_run
-- Fenced: only the current epoch's worker may set the outcome. Final statuses are never overwritten.
UPDATE agentrun_runs
SET status = %(status)s, result = coalesce(%(result)s, result), error = %(error)s,
    status_reason = %(reason)s, current_step = coalesce(%(current_step)s, current_step), updated_at = now(),
    finished_at = CASE WHEN %(status)s IN ('succeeded', 'failed', 'cancelled') THEN now() ELSE finished_at END
WHERE run_id = %(run_id)s AND lease_epoch = %(epoch)s
  AND status NOT IN ('succeeded', 'failed', 'cancelled')
RETURNING *

-- name: set_current_step
UPDATE agentrun_runs SET current_step = %(step)s, updated_at = now()
WHERE run_id = %(run_id)s AND lease_epoch = %(epoch)s

-- name: fail_unclaimed_run
-- A failure found before any lease (unknown graph reference, bad input): no epoch to check.
UPDATE agentrun_runs
SET status = 'failed', error = %(error)s, status_reason = %(reason)s, updated_at = now(), finished_at = now()
WHERE run_id = %(run_id)s AND status NOT IN ('succeeded', 'failed', 'cancelled')
RETURNING *

-- name: set_read_only
UPDATE agentrun_runs SET read_only = %(read_only)s, updated_at = now() WHERE run_id = %(run_id)s
RETURNING *

-- name: cancel_run
UPDATE agentrun_runs
SET status = 'cancelled', status_reason = %(reason)s, updated_at = now(), finished_at = now()
WHERE run_id = %(run_id)s AND status NOT IN ('succeeded', 'failed', 'cancelled')
RETURNING *

-- ------------------------------------------------------------------------------------------ attempts

-- name: record_attempt_start
INSERT INTO agentrun_attempts (run_id, attempt, pod, epoch, start_reason)
VALUES (%(run_id)s, %(attempt)s, %(pod)s, %(epoch)s, %(start_reason)s)
ON CONFLICT (run_id, attempt) DO UPDATE
SET pod = EXCLUDED.pod, epoch = coalesce(EXCLUDED.epoch, agentrun_attempts.epoch),
    start_reason = coalesce(agentrun_attempts.start_reason, EXCLUDED.start_reason)
RETURNING *

-- name: record_attempt_end
UPDATE agentrun_attempts SET ended_at = now(), outcome = %(outcome)s, detail = %(detail)s
WHERE run_id = %(run_id)s AND attempt = %(attempt)s
RETURNING *

-- name: list_attempts
SELECT * FROM agentrun_attempts WHERE run_id = %(run_id)s ORDER BY attempt

-- ------------------------------------------------------------------------------------------- effects

-- name: reserve_effect
-- ONE round trip: fencing check + insert-or-return. Outcomes (decided in Python from the returned row):
-- no row → run not admitted; current_epoch <> epoch → fenced; inserted → new pending row; existing →
-- the earlier row (a hit on sent/confirmed counts a prevented duplicate); neither → read-only refused.
WITH run AS (
    SELECT lease_epoch, read_only FROM agentrun_runs WHERE run_id = %(run_id)s FOR SHARE
), ins AS (
    INSERT INTO agentrun_effects (idempotency_key, run_id, step, action, tool, occurrence, args_hash, args, epoch)
    SELECT %(key)s, %(run_id)s, %(step)s, %(action)s, %(tool)s, %(occurrence)s, %(args_hash)s, %(args)s,
           %(epoch)s
    FROM run WHERE run.lease_epoch = %(epoch)s AND NOT run.read_only
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING *
), hit AS (
    UPDATE agentrun_effects e SET duplicates_prevented = e.duplicates_prevented + 1
    FROM run
    WHERE e.idempotency_key = %(key)s AND e.status IN ('sent', 'confirmed') AND run.lease_epoch = %(epoch)s
    RETURNING e.*
)
SELECT run.lease_epoch AS current_epoch, run.read_only,
       (SELECT to_jsonb(ins) FROM ins) AS inserted,
       coalesce((SELECT to_jsonb(hit) FROM hit),
                (SELECT to_jsonb(e) FROM agentrun_effects e WHERE e.idempotency_key = %(key)s)) AS existing
FROM run

-- name: record_effect
-- ONE round trip: fencing check + state transition. from_statuses limits legal transitions.
WITH run AS (
    SELECT lease_epoch FROM agentrun_runs WHERE run_id = %(run_id)s FOR SHARE
), upd AS (
    UPDATE agentrun_effects e
    SET status = %(status)s,
        attempts = e.attempts + %(calls)s,
        provider_ref = coalesce(%(provider_ref)s, e.provider_ref),
        result = coalesce(%(result)s, e.result),
        error = %(error)s,
        needs_human = %(needs_human)s,
        epoch = %(epoch)s,
        updated_at = now(),
        sent_at = CASE WHEN %(status)s IN ('sent', 'confirmed') THEN coalesce(e.sent_at, now()) ELSE e.sent_at END,
        confirmed_at = CASE WHEN %(status)s = 'confirmed' THEN coalesce(e.confirmed_at, now())
                            ELSE e.confirmed_at END
    FROM run
    WHERE e.idempotency_key = %(key)s AND e.run_id = %(run_id)s AND run.lease_epoch = %(epoch)s
      AND e.status = ANY(%(from_statuses)s)
    RETURNING e.*
)
SELECT run.lease_epoch AS current_epoch, (SELECT to_jsonb(upd) FROM upd) AS updated,
       (SELECT e.status FROM agentrun_effects e WHERE e.idempotency_key = %(key)s) AS previous_status
FROM run

-- name: confirm_effect
-- A provider confirmed an effect later (webhook, poll). Not fenced: confirmation is a fact, not a decision.
UPDATE agentrun_effects
SET status = 'confirmed', confirmed_at = coalesce(confirmed_at, now()), updated_at = now(),
    provider_ref = coalesce(%(provider_ref)s, provider_ref), result = coalesce(%(result)s, result),
    needs_human = false
WHERE idempotency_key = %(key)s AND status IN ('pending', 'sent')
RETURNING *

-- name: get_effect
SELECT * FROM agentrun_effects WHERE idempotency_key = %(key)s

-- name: list_effects
SELECT * FROM agentrun_effects WHERE run_id = %(run_id)s ORDER BY created_at, idempotency_key

-- name: effect_counts
SELECT status, count(*) AS n, count(*) FILTER (WHERE needs_human) AS needs_human
FROM agentrun_effects WHERE run_id = %(run_id)s GROUP BY status

-- ----------------------------------------------------------------------------------------- approvals

-- name: record_approval
-- Fenced; idempotent per approval_id (a re-park after a crash finds its own row); parks the run.
WITH run AS (
    SELECT lease_epoch, approval_policy FROM agentrun_runs WHERE run_id = %(run_id)s FOR UPDATE
), ins AS (
    INSERT INTO agentrun_approvals (approval_id, run_id, interrupt_id, prompt, deadline)
    SELECT %(approval_id)s, %(run_id)s, %(interrupt_id)s, %(prompt)s,
           CASE WHEN %(timeout_seconds)s::double precision IS NULL THEN NULL
                ELSE now() + make_interval(secs => %(timeout_seconds)s::double precision) END
    FROM run WHERE run.lease_epoch = %(epoch)s
    ON CONFLICT (approval_id) DO NOTHING
    RETURNING *
), park AS (
    UPDATE agentrun_runs r SET status = 'parked', status_reason = %(reason)s, updated_at = now()
    FROM run WHERE r.run_id = %(run_id)s AND run.lease_epoch = %(epoch)s
      AND r.status NOT IN ('succeeded', 'failed', 'cancelled')
    RETURNING r.run_id
)
SELECT run.lease_epoch AS current_epoch,
       coalesce((SELECT to_jsonb(ins) FROM ins),
                (SELECT to_jsonb(a) FROM agentrun_approvals a WHERE a.approval_id = %(approval_id)s)) AS approval,
       (SELECT count(*) FROM park) AS parked
FROM run

-- name: get_approval
SELECT * FROM agentrun_approvals WHERE approval_id = %(approval_id)s

-- name: list_approvals
SELECT * FROM agentrun_approvals WHERE run_id = %(run_id)s ORDER BY requested_at, approval_id

-- name: decide_approval
-- Exactly once: only a pending approval changes. An expiry with read_only also degrades the run.
WITH upd AS (
    UPDATE agentrun_approvals
    SET status = %(decision)s, decided_by = %(decided_by)s, decided_at = now(), comment = %(comment)s,
        payload = %(payload)s, deadline_action = %(deadline_action)s
    WHERE approval_id = %(approval_id)s AND run_id = %(run_id)s AND status = 'pending'
    RETURNING run_id
), ro AS (
    UPDATE agentrun_runs SET read_only = true, updated_at = now()
    WHERE run_id IN (SELECT run_id FROM upd) AND %(read_only)s
    RETURNING run_id
)
SELECT (SELECT count(*) FROM upd) AS decided, (SELECT count(*) FROM ro) AS made_read_only

-- name: mark_approval_resumed
UPDATE agentrun_approvals SET resumed_at = coalesce(resumed_at, now())
WHERE approval_id = %(approval_id)s AND status <> 'pending'

-- ---------------------------------------------------------------------------------- heartbeats, events

-- name: heartbeat
INSERT INTO agentrun_heartbeats (run_id, key, details, beat_at)
VALUES (%(run_id)s, %(key)s, %(details)s, now())
ON CONFLICT (run_id, key) DO UPDATE SET details = EXCLUDED.details, beat_at = EXCLUDED.beat_at

-- name: list_heartbeats
SELECT * FROM agentrun_heartbeats WHERE run_id = %(run_id)s ORDER BY key

-- name: record_step_event
INSERT INTO agentrun_step_events
    (run_id, attempt, step, checkpoint_id, started_at, duration_seconds, checkpoint_seconds, effect_keys)
VALUES (%(run_id)s, %(attempt)s, %(step)s, %(checkpoint_id)s, %(started_at)s, %(duration_seconds)s,
        %(checkpoint_seconds)s, %(effect_keys)s)

-- name: list_step_events
SELECT * FROM agentrun_step_events WHERE run_id = %(run_id)s ORDER BY id
