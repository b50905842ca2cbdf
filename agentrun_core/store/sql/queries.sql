-- Named queries of agentrun_core.store. Each block starts with "-- name: <name>"; placeholders are
-- psycopg named parameters. agentrun_core.store is the only module that runs SQL.
--
-- Fencing: every ledger / approval / run-finishing write by a worker carries the writer's epoch and checks it
-- against agentrun_runs.lease_epoch IN THE SAME STATEMENT, with the run row locked FOR SHARE: a concurrent
-- raise of the epoch (claim_run, an UPDATE) waits for us or we see its committed value — never a stale one.

-- ---------------------------------------------------------------------------------------------- runs

-- name: admit_run
-- retry_generation: spec.retryGeneration at admission is the baseline (only later raises retry the run).
WITH ins AS (
    INSERT INTO agentrun_runs (run_id, namespace, name, graph, input, spec_hash, durability, approval_policy,
                               retry_generation)
    VALUES (%(run_id)s, %(namespace)s, %(name)s, %(graph)s, %(input)s, %(spec_hash)s, %(durability)s,
            %(approval_policy)s, %(retry_generation)s)
    ON CONFLICT (run_id) DO NOTHING
    RETURNING *
)
SELECT * FROM ins
UNION ALL
SELECT * FROM agentrun_runs WHERE run_id = %(run_id)s AND NOT EXISTS (SELECT 1 FROM ins)

-- name: get_run
SELECT * FROM agentrun_runs WHERE run_id = %(run_id)s

-- name: get_run_now
-- The run (columns NULL when there is none) and Postgres' now(): deadlines on timestamps Postgres wrote
-- are compared with Postgres' clock, never with the caller's.
SELECT r.*, now() AS db_now FROM (SELECT 1) one LEFT JOIN agentrun_runs r ON r.run_id = %(run_id)s

-- name: observe_run
-- What the operator reads of a run at each reconcile, in ONE statement (one round trip, one transaction;
-- it took four, for every poll of every idle run): the run (columns NULL when there is none) and Postgres'
-- now() as get_run_now, its approvals as list_approvals, its effect counts as effect_counts, its
-- interventions as list_interventions (read only when the run counts some), and spec.approval made the
-- run's policy as sync_approval_policy does, for a run not finished. One snapshot: the run's columns are
-- those from before that sync, as when the run was read first and synced after.
WITH synced AS (
    UPDATE agentrun_runs r SET approval_policy = %(approval_policy)s, updated_at = now()
    WHERE r.run_id = %(run_id)s AND r.status <> ALL (%(final_statuses)s::text[])
      AND %(approval_policy)s::jsonb IS NOT NULL  -- NULL: read only (a spec.approval Postgres cannot store)
      AND r.approval_policy IS DISTINCT FROM %(approval_policy)s
      AND NOT EXISTS (SELECT 1 FROM agentrun_approvals a WHERE a.run_id = r.run_id AND a.status = 'pending')
    RETURNING 1
)
SELECT r.*, now() AS db_now,
       (SELECT count(*) FROM synced) AS policy_synced,
       (SELECT coalesce(jsonb_agg(to_jsonb(a) ORDER BY a.requested_at, a.approval_id), '[]'::jsonb)
        FROM agentrun_approvals a WHERE a.run_id = %(run_id)s) AS approvals_doc,
       (SELECT coalesce(jsonb_agg(to_jsonb(c)), '[]'::jsonb)
        FROM (SELECT status, count(*) AS n, count(*) FILTER (WHERE needs_human) AS needs_human
              FROM agentrun_effects WHERE run_id = %(run_id)s GROUP BY status) c) AS effect_counts_doc,
       (SELECT coalesce(jsonb_agg(to_jsonb(i) ORDER BY i.id), '[]'::jsonb)
        FROM agentrun_interventions i WHERE i.run_id = %(run_id)s AND r.interventions > 0) AS interventions_doc
FROM (SELECT 1) one LEFT JOIN agentrun_runs r ON r.run_id = %(run_id)s

-- name: list_runs
SELECT * FROM agentrun_runs
WHERE (%(namespace)s::text IS NULL OR namespace = %(namespace)s)
  AND (%(statuses)s::text[] IS NULL OR status = ANY(%(statuses)s))
ORDER BY admitted_at, run_id

-- name: claim_run
-- The worker took the Lease with this epoch: raise lease_epoch (never lower it) and mark the run running
-- (agentrun_runs.claimed_at follows: migration 28's trigger).
-- Equal epoch only for the same holder (a restart inside the same pod). Final runs are not touched.
-- With %(attempt)s (the worker's own claim, store.claim_attempt) the same statement records that attempt's row
-- (its pod, its epoch), only when the claim took: one round trip before the first step.
WITH claimed AS (
    UPDATE agentrun_runs
    SET lease_epoch = %(epoch)s, holder = %(holder)s, status = 'running', status_reason = NULL, updated_at = now()
    WHERE run_id = %(run_id)s
      AND status IN ('admitted', 'running', 'parked')
      AND (lease_epoch < %(epoch)s OR (lease_epoch = %(epoch)s AND holder IS NOT DISTINCT FROM %(holder)s))
    RETURNING *
), attempt AS (
    INSERT INTO agentrun_attempts (run_id, attempt, pod, epoch)
    SELECT run_id, %(attempt)s, %(holder)s, %(epoch)s FROM claimed WHERE %(attempt)s::integer IS NOT NULL
    ON CONFLICT (run_id, attempt) DO UPDATE
    SET pod = EXCLUDED.pod, epoch = EXCLUDED.epoch
)
SELECT * FROM claimed

-- name: finish_run
-- Fenced: only the current epoch's worker may set the outcome. Final statuses are never overwritten.
-- With %(attempt)s (store.finish_attempt) the same statement ends that attempt's row (outcome, detail), only
-- when the outcome took (a refused one is the caller's Fenced path, which records "fenced" itself): one
-- round trip after the last step. The attempt's last step events may come with it (a batch as record_steps
-- takes it, packed by store.step_packing; none: empty %(nodes)s): history, inserted whatever the epoch, as
-- record_steps does; %(current_step)s moves with the fenced outcome.
WITH events AS (
    INSERT INTO agentrun_step_batches
        (run_id, attempt, nodes, step_deltas, first_started_at, gaps_us, duration_us, checkpoint_ids,
         checkpoint_us, effect_keys)
    SELECT %(run_id)s, %(attempt)s::integer, %(nodes)s::text[], %(step_deltas)s::integer[],
           %(first_started_at)s::timestamptz, %(gaps_us)s::bigint[], %(duration_us)s::bigint[],
           %(checkpoint_ids)s::text[], %(checkpoint_us)s::bigint[], %(effect_keys)s::jsonb
    WHERE cardinality(%(nodes)s::text[]) > 0
), finished AS (
    UPDATE agentrun_runs
    SET status = %(status)s, result = coalesce(%(result)s, result), error = %(error)s,
        status_reason = %(reason)s, current_step = coalesce(%(current_step)s, current_step), updated_at = now(),
        finished_at = CASE WHEN %(status)s IN ('succeeded', 'failed', 'cancelled') THEN now() ELSE finished_at END
    WHERE run_id = %(run_id)s AND lease_epoch = %(epoch)s
      AND status NOT IN ('succeeded', 'failed', 'cancelled')
    RETURNING *
), ended AS (
    UPDATE agentrun_attempts a SET ended_at = now(), outcome = %(outcome)s, detail = %(detail)s
    FROM finished f
    WHERE a.run_id = f.run_id AND a.attempt = %(attempt)s::integer
)
SELECT * FROM finished

-- name: set_current_step
UPDATE agentrun_runs SET current_step = %(step)s, updated_at = now()
WHERE run_id = %(run_id)s AND lease_epoch = %(epoch)s

-- name: set_read_only
UPDATE agentrun_runs SET read_only = %(read_only)s, updated_at = now() WHERE run_id = %(run_id)s
RETURNING *

-- name: pin_image
UPDATE agentrun_runs SET worker_image = %(image)s, image_digest = %(digest)s,
    image_generation = %(generation)s, updated_at = now()
WHERE run_id = %(run_id)s
RETURNING *

-- name: cancel_run
-- Raises lease_epoch in the same statement: a worker still alive (frozen, partitioned, slow to drain) is
-- fenced off from this moment on; its next ledger / approval / outcome / checkpoint write is refused.
UPDATE agentrun_runs
SET status = 'cancelled', status_reason = %(reason)s, updated_at = now(), finished_at = now(),
    lease_epoch = lease_epoch + 1
WHERE run_id = %(run_id)s AND status NOT IN ('succeeded', 'failed', 'cancelled')
RETURNING *

-- name: expire_run
-- A run past its deadline (agent_operator.deadlines) fails as a cancel cancels: unless already final, and
-- raising lease_epoch in the same statement, so a worker still running is fenced off from this moment on
-- (its next ledger / approval / outcome / checkpoint write is refused; an effect it has in flight keeps
-- its ledger row as it stands).
UPDATE agentrun_runs
SET status = 'failed', status_reason = %(reason)s, error = %(message)s, updated_at = now(),
    finished_at = now(), lease_epoch = lease_epoch + 1
WHERE run_id = %(run_id)s AND status NOT IN ('succeeded', 'failed', 'cancelled')
RETURNING *

-- name: deadline_clock
-- What run deadlines are measured from, on Postgres' clock: its attempts (start, end, whether a human's
-- reopening started them), when a worker last claimed it (migration 28) and when its latest step batch was
-- recorded (the index on (run_id, id)).
SELECT now() AS db_now,
       (SELECT r.claimed_at FROM agentrun_runs r WHERE r.run_id = %(run_id)s) AS claimed_at,
       (SELECT coalesce(jsonb_agg(jsonb_build_object(
                    'started_at', a.started_at, 'ended_at', a.ended_at, 'start_reason', a.start_reason)
                ORDER BY a.attempt), '[]'::jsonb)
        FROM agentrun_attempts a WHERE a.run_id = %(run_id)s) AS attempts_doc,
       (SELECT b.recorded_at FROM agentrun_step_batches b WHERE b.run_id = %(run_id)s
        ORDER BY b.id DESC LIMIT 1) AS last_step_at

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

-- name: record_attempt_loss
-- The operator's verdict on a lost attempt, in one statement: the outcome and detail unless the worker
-- recorded its own (it knows better why it stopped), and in any case whether the control plane lost it.
UPDATE agentrun_attempts
SET ended_at = coalesce(ended_at, now()), outcome = coalesce(outcome, 'lost'),
    detail = coalesce(detail, %(detail)s), control_plane = %(control_plane)s
WHERE run_id = %(run_id)s AND attempt = %(attempt)s
RETURNING *

-- name: list_attempts
SELECT * FROM agentrun_attempts WHERE run_id = %(run_id)s ORDER BY attempt

-- ------------------------------------------------------------------------------------------- effects

-- name: insert_new_effect
-- A part of both reserves (spliced where they say `-- part: insert_new_effect`), not a statement: the new
-- pending row of the key, its call deadline set (the call follows at once), under the caller's epoch and
-- never for a read-only run; nothing when the key has a row. Needs a CTE `run` (lease_epoch, read_only).
INSERT INTO agentrun_effects (idempotency_key, run_id, step, action, tool, occurrence, args_hash, args, epoch,
                              key_version, call_deadline)
SELECT %(key)s, %(run_id)s, %(step)s, %(action)s, %(tool)s, %(occurrence)s, %(args_hash)s, %(args)s,
       %(epoch)s, %(key_version)s,
       now() + make_interval(secs => %(timeout_seconds)s::double precision)
FROM run WHERE run.lease_epoch = %(epoch)s AND NOT run.read_only
ON CONFLICT (run_id, idempotency_key) DO NOTHING
RETURNING 1

-- name: reserve_new_effect
-- ONE round trip, the common case: fencing check + a new pending row (its call deadline set: the call
-- follows at once). Nothing of the row comes back. inserted false with the caller's epoch current: the key
-- has a row (or the run is read-only), and reserve_effect, run next, returns it. Measured: the earlier row's
-- look-ups of reserve_effect cost a new row ~45 us of ~215 even when they find nothing (their plan's nodes,
-- an UPDATE's among them, are set up at every execution).
WITH run AS (
    SELECT lease_epoch, read_only FROM agentrun_runs WHERE run_id = %(run_id)s FOR SHARE
), ins AS (
    -- part: insert_new_effect
)
SELECT run.lease_epoch AS current_epoch, run.read_only, EXISTS (SELECT 1 FROM ins) AS inserted
FROM run

-- name: reserve_effect
-- ONE round trip: fencing check + insert-or-return; run when reserve_new_effect inserted nothing (a key with
-- a row, a read-only run), and it decides on its own. Outcomes (decided in Python from the returned row):
-- no row → run not admitted; current_epoch <> epoch → fenced; inserted → a new pending row (its call
-- deadline set: the call follows at once; nothing of it comes back); existing → the earlier row (a hit on
-- sent/confirmed counts a prevented duplicate; other arguments than stored count a divergence and, with
-- on_divergence=needs_human, flag the row for a human the first time); neither → read-only refused.
-- in_flight_seconds: how long the earlier call may still take effect, by Postgres's clock: its recorded
-- deadline and, when an older epoch wrote the row (takeover), our claim of the run + timeout (the deposed
-- holder could issue a call until its lease ended, that is until we claimed the run; never counted from the
-- attempt row the operator wrote at Pod creation, which a slow-starting Pod follows by any time).
WITH run AS (
    SELECT lease_epoch, read_only, claimed_at FROM agentrun_runs WHERE run_id = %(run_id)s FOR SHARE
), ins AS (
    -- part: insert_new_effect
), hit AS (
    UPDATE agentrun_effects e
    SET duplicates_prevented = e.duplicates_prevented
            + CASE WHEN e.status IN ('sent', 'confirmed') THEN 1 ELSE 0 END,
        divergences = e.divergences + CASE WHEN e.args_hash <> %(args_hash)s THEN 1 ELSE 0 END,
        diverged_args_hash = CASE WHEN e.args_hash <> %(args_hash)s THEN %(args_hash)s
                                  ELSE e.diverged_args_hash END,
        diverged_args = CASE WHEN e.args_hash <> %(args_hash)s THEN %(args)s ELSE e.diverged_args END,
        needs_human = e.needs_human
            OR (%(divergence_needs_human)s AND e.args_hash <> %(args_hash)s AND e.divergences = 0),
        error = CASE WHEN %(divergence_needs_human)s AND e.args_hash <> %(args_hash)s AND e.divergences = 0
                     THEN 'replay asked for this effect with other arguments (on_divergence=needs_human)'
                     ELSE e.error END
    FROM run
    WHERE e.run_id = %(run_id)s AND e.idempotency_key = %(key)s AND run.lease_epoch = %(epoch)s
      AND (e.status IN ('sent', 'confirmed') OR e.args_hash <> %(args_hash)s)
    RETURNING e.*
), existing AS (
    SELECT to_jsonb(hit) AS doc, hit.call_deadline, hit.epoch FROM hit
    UNION ALL
    SELECT to_jsonb(e), e.call_deadline, e.epoch FROM agentrun_effects e
    WHERE e.run_id = %(run_id)s AND e.idempotency_key = %(key)s AND NOT EXISTS (SELECT 1 FROM hit)
)
SELECT run.lease_epoch AS current_epoch, run.read_only,
       -- a new row is what the caller sent: only whether it was inserted comes back
       EXISTS (SELECT 1 FROM ins) AS inserted,
       (SELECT doc FROM existing) AS existing,
       (SELECT greatest(0, extract(epoch FROM greatest(
                x.call_deadline,
                CASE WHEN x.epoch < run.lease_epoch THEN
                    coalesce(run.claimed_at, now()) + make_interval(secs => %(timeout_seconds)s::double precision)
                END) - now()))
        FROM existing x) AS in_flight_seconds
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
        -- failed: whether the failure proves nothing was performed (a retry re-keys only those)
        not_performed = %(not_performed)s,
        epoch = %(epoch)s,
        -- a call about to be (re)issued: by when it may still take effect (Postgres clock)
        call_deadline = CASE WHEN %(deadline_seconds)s::double precision IS NULL THEN e.call_deadline
                             ELSE now() + make_interval(secs => %(deadline_seconds)s::double precision) END,
        -- the arguments of the call about to be issued (a diverged replay of a never-performed effect)
        args = coalesce(%(args)s, e.args),
        args_hash = coalesce(%(args_hash)s, e.args_hash),
        updated_at = now(),
        sent_at = CASE WHEN %(status)s IN ('sent', 'confirmed') THEN coalesce(e.sent_at, now()) ELSE e.sent_at END,
        confirmed_at = CASE WHEN %(status)s = 'confirmed' THEN coalesce(e.confirmed_at, now())
                            ELSE e.confirmed_at END
    FROM run
    -- The row is reached by its primary key (run, key: migration 24).
    WHERE e.run_id = %(run_id)s AND e.idempotency_key = %(key)s
      AND run.lease_epoch = %(epoch)s AND e.status = ANY(%(from_statuses)s)
    RETURNING e.status
)
-- Nothing of the row comes back (the worker reads nothing of it); the status before is read only when
-- nothing was updated, for the illegal transition's error (an uncorrelated NOT EXISTS: a one-time filter).
SELECT run.lease_epoch AS current_epoch, (SELECT upd.status FROM upd) AS updated_status,
       (SELECT e.status FROM agentrun_effects e
        WHERE e.run_id = %(run_id)s AND e.idempotency_key = %(key)s AND NOT EXISTS (SELECT 1 FROM upd))
           AS previous_status,
       -- not flush: this transaction's commit does not wait for its WAL to reach the disk (effects_sql.
       -- record_effect says when that is safe). Read at commit, reset after it: nothing else is affected.
       CASE WHEN %(flush)s THEN NULL ELSE set_config('synchronous_commit', 'off', true) END AS commit_wait
FROM run

-- name: confirm_effect
-- A provider confirmed an effect later (webhook, poll). Not fenced: confirmation is a fact, not a decision.
UPDATE agentrun_effects
SET status = 'confirmed', confirmed_at = coalesce(confirmed_at, now()), updated_at = now(),
    provider_ref = coalesce(%(provider_ref)s, provider_ref), result = coalesce(%(result)s, result),
    needs_human = false
WHERE run_id = %(run_id)s AND idempotency_key = %(key)s AND status IN ('pending', 'sent')
RETURNING *

-- name: get_effect
SELECT * FROM agentrun_effects WHERE run_id = %(run_id)s AND idempotency_key = %(key)s

-- name: list_effects
SELECT * FROM agentrun_effects WHERE run_id = %(run_id)s ORDER BY created_at, idempotency_key

-- name: effect_counts
SELECT status, count(*) AS n, count(*) FILTER (WHERE needs_human) AS needs_human
FROM agentrun_effects WHERE run_id = %(run_id)s GROUP BY status

-- ----------------------------------------------------------------------------------------- approvals

-- name: record_approval
-- Fenced; idempotent per approval_id (a re-park after a crash finds its own row); parks the run. The row's
-- status, policy snapshot and deadline are set by the agentrun_approval_requested trigger (migration 5).
WITH run AS (
    SELECT lease_epoch, approval_policy FROM agentrun_runs WHERE run_id = %(run_id)s FOR UPDATE
), ins AS (
    INSERT INTO agentrun_approvals (approval_id, run_id, interrupt_id, prompt)
    SELECT %(approval_id)s, %(run_id)s, %(interrupt_id)s, %(prompt)s
    FROM run WHERE run.lease_epoch = %(epoch)s
    ON CONFLICT (run_id, approval_id) DO NOTHING
    RETURNING *
), park AS (
    UPDATE agentrun_runs r SET status = 'parked', status_reason = %(reason)s, updated_at = now()
    FROM run WHERE r.run_id = %(run_id)s AND run.lease_epoch = %(epoch)s
      AND r.status NOT IN ('succeeded', 'failed', 'cancelled')
    RETURNING r.run_id
)
SELECT run.lease_epoch AS current_epoch,
       coalesce((SELECT to_jsonb(ins) FROM ins),
                (SELECT to_jsonb(a) FROM agentrun_approvals a
                 WHERE a.run_id = %(run_id)s AND a.approval_id = %(approval_id)s)) AS approval,
       (SELECT count(*) FROM park) AS parked
FROM run

-- name: get_approval
SELECT * FROM agentrun_approvals WHERE run_id = %(run_id)s AND approval_id = %(approval_id)s

-- name: list_approvals
SELECT * FROM agentrun_approvals WHERE run_id = %(run_id)s ORDER BY requested_at, approval_id

-- name: decide_approval
-- Exactly once: only a pending approval changes. The deadline and a decision are judged HERE, by one
-- comparison with Postgres's clock against the deadline Postgres computed: an expiry applies only once the
-- deadline has passed; a human decision only before it (or at any time under onTimeout: escalate, which never
-- expires the approval). Concurrent calls serialise on the row: whichever commits first wins, the other
-- finds the row no longer pending. An expiry with read_only also degrades the run.
WITH upd AS (
    UPDATE agentrun_approvals
    SET status = %(decision)s, decided_by = %(decided_by)s, decided_at = now(), comment = %(comment)s,
        payload = %(payload)s, deadline_action = %(deadline_action)s
    WHERE run_id = %(run_id)s AND approval_id = %(approval_id)s AND status = 'pending'
      AND CASE WHEN %(decision)s = 'expired' THEN deadline IS NOT NULL AND deadline <= now()
               ELSE deadline IS NULL OR now() < deadline
                    OR coalesce(policy ->> 'onTimeout', 'escalate') = 'escalate' END
    RETURNING run_id
), ro AS (
    UPDATE agentrun_runs SET read_only = true, updated_at = now()
    WHERE run_id IN (SELECT run_id FROM upd) AND %(read_only)s
    RETURNING run_id
)
SELECT (SELECT count(*) FROM upd) AS decided, (SELECT count(*) FROM ro) AS made_read_only,
       a.status AS status, a.deadline IS NOT NULL AND a.deadline <= now() AS past_deadline
FROM (SELECT 1) one
LEFT JOIN agentrun_approvals a  -- by its primary key (run, approval id: migration 24)
    ON a.run_id = %(run_id)s AND a.approval_id = %(approval_id)s

-- name: sync_approval_policy
-- spec.approval changed: the run's policy follows, but never while an approval is pending (that one keeps
-- the policy it was requested under; admission refuses such a change anyway).
UPDATE agentrun_runs r SET approval_policy = %(approval_policy)s, updated_at = now()
WHERE r.run_id = %(run_id)s AND r.approval_policy IS DISTINCT FROM %(approval_policy)s
  AND NOT EXISTS (SELECT 1 FROM agentrun_approvals a WHERE a.run_id = r.run_id AND a.status = 'pending')

-- name: mark_approval_resumed
UPDATE agentrun_approvals SET resumed_at = coalesce(resumed_at, now())
WHERE run_id = %(run_id)s AND approval_id = %(approval_id)s AND status <> 'pending'

-- ------------------------------------------------------------------------------------------- tenants

-- name: provision_tenant
-- The namespace's worker role (created, or its password replaced) and its agentrun_tenants row.
SELECT agentrun_provision_tenant(%(namespace)s, %(password)s) AS role_name

-- name: get_tenant
-- Only while its role exists: roles are global to the Postgres cluster and not in a database's dump, so a
-- database restored into another cluster (or a role dropped by hand) keeps rows whose roles are gone.
SELECT t.* FROM agentrun_tenants t JOIN pg_roles r ON r.rolname = t.role_name
WHERE t.namespace = %(namespace)s

-- name: end_blocking_tenant_sessions
-- A tenant's session that has kept another session waiting for a lock for at least %(min_wait_seconds)s is
-- ended (pg_terminate_backend): any role with UPDATE on a table may LOCK it in ACCESS EXCLUSIVE mode, and a
-- worker role needs UPDATE on the shared tables, so only ending the session can free the others. Only
-- sessions of worker roles (agentrun_tenants) are ever ended, never the operator's or an admin's; a worker
-- of the tenant's own that held a lock that long is a stuck or deposed one (its statements take
-- milliseconds), which fencing already makes harmless to end. The query text is not read: it is the
-- tenant's, and may hold its secrets. One statement: what is found is ended in the same pass.
SELECT blocker.pid,
       t.role_name,
       t.namespace,
       max(extract(epoch FROM now() - w.waitstart))::float8 AS blocked_seconds,
       count(DISTINCT w.pid)::int AS waiting,
       pg_terminate_backend(blocker.pid) AS ended
FROM pg_catalog.pg_locks w
CROSS JOIN LATERAL unnest(pg_catalog.pg_blocking_pids(w.pid)) AS blocker(pid)
JOIN pg_catalog.pg_stat_activity a ON a.pid = blocker.pid
JOIN public.agentrun_tenants t ON t.role_name = a.usename
WHERE NOT w.granted
  AND w.waitstart IS NOT NULL
  AND w.waitstart <= now() - make_interval(secs => %(min_wait_seconds)s)
  AND a.datname = current_database()
GROUP BY blocker.pid, t.role_name, t.namespace

-- name: list_idle_tenants
-- Namespaces with a worker role and no run left in this database: the ones whose role may be dropped once
-- Kubernetes no longer has the namespace.
SELECT t.namespace FROM agentrun_tenants t
WHERE NOT EXISTS (SELECT 1 FROM agentrun_runs r WHERE r.namespace = t.namespace)
ORDER BY t.namespace

-- name: drop_tenant
-- The namespace's worker role dropped (migration 14); false when a run of it is left or the role lives on.
SELECT agentrun_drop_tenant(%(namespace)s) AS dropped

-- name: protect_all
SELECT agentrun_protect_all() AS covered

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

-- name: record_steps
-- Step events and the run's current step in ONE statement (agent_worker/steps.py: one round trip per flush).
-- The events are history, recorded like attempt rows whatever the epoch; the current step is fenced: only
-- the epoch holding the run moves it. The events come as one batch row in its stored form (migrations 21,
-- 22), packed by the worker (agentrun_core/store/step_packing.py): the server parses, sorts and packs
-- nothing. Empty %(nodes)s: no batch, the current step alone.
WITH events AS (
    INSERT INTO agentrun_step_batches
        (run_id, attempt, nodes, step_deltas, first_started_at, gaps_us, duration_us, checkpoint_ids,
         checkpoint_us, effect_keys)
    SELECT %(run_id)s, %(attempt)s, %(nodes)s::text[], %(step_deltas)s::integer[],
           %(first_started_at)s::timestamptz, %(gaps_us)s::bigint[], %(duration_us)s::bigint[],
           %(checkpoint_ids)s::text[], %(checkpoint_us)s::bigint[], %(effect_keys)s::jsonb
    WHERE cardinality(%(nodes)s::text[]) > 0
    RETURNING cardinality(nodes) AS n
), moved AS (
    UPDATE agentrun_runs SET current_step = %(current_step)s, updated_at = now()
    WHERE run_id = %(run_id)s AND lease_epoch = %(epoch)s AND %(current_step)s::text IS NOT NULL
    RETURNING 1
)
SELECT (SELECT coalesce(sum(n), 0) FROM events) AS recorded, (SELECT count(*) FROM moved) AS moved

-- name: list_step_events
SELECT * FROM agentrun_step_events WHERE run_id = %(run_id)s ORDER BY id

-- ---------------------------------------------------------------------------------- checkpoint fencing
-- agent_worker/checkpointer.py: the rows of LangGraph's checkpoint tables are fenced by a trigger (migration
-- 16) for each connection the saver marked; these two statements ride inside its writes' pipelines.

-- name: mark_fence
-- The connection's fence, '<epoch>:<run id>' (agentrun_fence_checkpoint_row reads it); session-wide, but
-- transactional: rolled back with a write that fails. Refused (AR500) where the triggers are missing.
SELECT agentrun_mark_fence(%(fence)s)

-- name: abandon_write
-- Fails at once (SQLSTATE AR400), so the implicit transaction of the pipeline it is sent in commits nothing.
SELECT agentrun_abandon_write()

-- name: get_checkpoint_head
-- The head of one namespace ('' = root); NULL when none was written fenced (a run from before migration 2).
-- any_written: whether the namespace has any checkpoint at all (no head and none written: nothing to read,
-- the saver answers "no checkpoint" without LangGraph's own query).
SELECT CASE WHEN %(checkpoint_ns)s = '' THEN r.head_checkpoint_id ELSE h.checkpoint_id END AS checkpoint_id,
       EXISTS (SELECT 1 FROM checkpoints c
               WHERE c.thread_id = %(run_id)s AND c.checkpoint_ns = %(checkpoint_ns)s) AS any_written
FROM agentrun_runs r
LEFT JOIN agentrun_checkpoint_heads h ON h.run_id = r.run_id AND h.checkpoint_ns = %(checkpoint_ns)s
WHERE r.run_id = %(run_id)s

-- name: delta_chain
-- The parent chain of one checkpoint (depth 0) back to the nearest ancestor that stores a value for every
-- channel of %(channels)s (a DeltaChannel's _DeltaSnapshot blob, or an inline value): what rebuilding those
-- channels reads (agent_worker/checkpointer.py). It follows parent_checkpoint_id, never the order of the ids:
-- a worker whose clock is behind writes children whose ids sort before their parents'. Per row: its channel
-- versions and inline values, and which of the channels have a stored blob at their version there.
WITH RECURSIVE walk AS (
    SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id, c.checkpoint,
           %(channels)s::text[] AS unseeded, 0 AS depth
    FROM checkpoints c
    WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(checkpoint_ns)s
      AND c.checkpoint_id = %(checkpoint_id)s
    UNION ALL
    SELECT p.thread_id, p.checkpoint_ns, p.checkpoint_id, p.parent_checkpoint_id, p.checkpoint,
           ARRAY(SELECT ch FROM unnest(w.unseeded) ch
                 WHERE coalesce(jsonb_typeof(p.checkpoint -> 'channel_values' -> ch), 'null') = 'null'
                   AND NOT EXISTS (SELECT 1 FROM checkpoint_blobs b
                                   WHERE b.thread_id = p.thread_id AND b.checkpoint_ns = p.checkpoint_ns
                                     AND b.channel = ch AND b.version = p.checkpoint -> 'channel_versions' ->> ch
                                     AND b.type <> 'empty')),
           w.depth + 1
    FROM walk w
    JOIN checkpoints p
      ON p.thread_id = w.thread_id AND p.checkpoint_ns = w.checkpoint_ns AND p.checkpoint_id = w.parent_checkpoint_id
    WHERE cardinality(w.unseeded) > 0
)
SELECT w.checkpoint_id, w.parent_checkpoint_id, w.checkpoint -> 'channel_versions' AS versions,
       w.checkpoint -> 'channel_values' AS inline_values,
       ARRAY(SELECT ch FROM unnest(%(channels)s::text[]) ch
             WHERE EXISTS (SELECT 1 FROM checkpoint_blobs b
                           WHERE b.thread_id = w.thread_id AND b.checkpoint_ns = w.checkpoint_ns
                             AND b.channel = ch AND b.version = w.checkpoint -> 'channel_versions' ->> ch
                             AND b.type <> 'empty')) AS with_blob
FROM walk w
ORDER BY w.depth

-- ----------------------------------------------------------------------------------------- retention

-- name: mark_for_purge
-- The AgentRun is gone: purge the run after %(after_seconds)s (of Postgres' clock). A second mark keeps the
-- earlier moment (a TTL delete marks 0 s; the finalizer's generic mark must not postpone it).
INSERT INTO agentrun_retention (run_id, purge_after, reason)
VALUES (%(run_id)s, now() + make_interval(secs => %(after_seconds)s), %(reason)s)
ON CONFLICT (run_id) DO UPDATE
SET purge_after = least(agentrun_retention.purge_after, excluded.purge_after),
    reason = CASE WHEN excluded.purge_after < agentrun_retention.purge_after
                  THEN excluded.reason ELSE agentrun_retention.reason END
RETURNING run_id

-- name: purge_due
-- One bounded batch: the due runs (oldest first, skipping rows another purger holds), folded into the metric
-- rollups when not yet, their gauge figures taken back, then their checkpoints and rows deleted
-- (agentrun_attempts/effects/approvals/heartbeats/step_events go by ON DELETE CASCADE). One function
-- (migration 13), so the fold and the delete are one transaction whatever the connection's mode.
-- Only runs whose AgentRun is gone (migration 27): none of %(alive)s (uids of AgentRuns that exist), none of a
-- namespace in %(held_namespaces)s (not listed: whether its runs exist is unknown).
SELECT run_id FROM agentrun_purge_due(%(batch)s, %(alive)s::text[], %(held_namespaces)s::text[]) AS run_id

-- name: purge_due_namespaces
-- The namespaces of the runs due for purge ('' for a mark whose run row is gone already): the leader lists
-- the AgentRuns of these before a purge pass.
SELECT DISTINCT coalesce(r.namespace, '') AS namespace
FROM agentrun_retention t LEFT JOIN agentrun_runs r ON r.run_id = t.run_id
WHERE t.purge_after <= now()
ORDER BY 1

-- name: fold_runs
-- One bounded batch of final runs folded into the metric rollups (migration 13); how many.
SELECT agentrun_fold_runs(%(batch)s) AS folded

-- ------------------------------------------------------------------------------ steering (retry, resolve)
-- Every change a human makes to a stopped run is ONE statement that also raises lease_epoch (nothing that
-- ran before may write again) and records who did it in agentrun_interventions.

-- name: reopen_run
-- Retry (spec.retryGeneration raised): a stopped run goes back to 'admitted' under the new generation. Only
-- forward (a generation at or below the current one changes nothing); a succeeded run is never reopened.
-- Its failed effects: those whose failure proves nothing was performed (not_performed) get their next key
-- generation from the worker (rekeyed); the others may have happened, so they keep their key and go back to
-- 'pending', an unknown outcome the worker reconciles (lookup, a provider that dedupes) or a human resolves
-- (kept). Both lists are returned and recorded in the intervention.
WITH run AS (
    SELECT run_id, status FROM agentrun_runs
    WHERE run_id = %(run_id)s AND retry_generation < %(generation)s AND status <> 'succeeded'
    FOR UPDATE
), failed AS (
    SELECT e.idempotency_key, e.tool, e.step, e.not_performed, e.error
    FROM agentrun_effects e JOIN run ON e.run_id = run.run_id
    WHERE e.status = 'failed'
    FOR UPDATE OF e
), kept AS (
    UPDATE agentrun_effects e
    SET status = 'pending', needs_human = false, updated_at = now(),
        error = 'failed, may have been performed: kept its key on retry ' || %(generation)s
                || ' (unknown outcome): ' || coalesce(e.error, '')
    FROM failed f
    WHERE e.run_id = %(run_id)s AND e.idempotency_key = f.idempotency_key AND NOT f.not_performed
    RETURNING e.idempotency_key
), report AS (
    SELECT jsonb_build_object(
        'rekeyed', coalesce(jsonb_agg(jsonb_build_object('key', idempotency_key, 'tool', tool, 'step', step)
                                      ORDER BY idempotency_key) FILTER (WHERE not_performed), '[]'::jsonb),
        'kept', coalesce(jsonb_agg(jsonb_build_object('key', idempotency_key, 'tool', tool, 'step', step,
                                                      'error', left(error, 300))
                                   ORDER BY idempotency_key) FILTER (WHERE NOT not_performed), '[]'::jsonb)
    ) AS detail
    FROM failed
), upd AS (
    UPDATE agentrun_runs r
    SET status = 'admitted', status_reason = %(reason)s, error = NULL, result = NULL, finished_at = NULL,
        retry_generation = %(generation)s, reopened = r.reopened + 1, interventions = r.interventions + 1,
        lease_epoch = r.lease_epoch + 1, updated_at = now()
    FROM run WHERE r.run_id = run.run_id
    RETURNING r.*
), log AS (
    INSERT INTO agentrun_interventions (run_id, kind, generation, by, from_status, detail)
    SELECT run_id, 'retry', %(generation)s, %(by)s, status, report.detail FROM run, report
    RETURNING id
)
SELECT (SELECT to_jsonb(upd) FROM upd) AS run, (SELECT count(*) FROM log) AS logged,
       (SELECT detail FROM report) AS detail, (SELECT count(*) FROM kept) AS kept_count

-- name: resolve_effect
-- A human tells the ledger what happened to an effect of unknown outcome of a stopped run: a 'pending' row, or
-- a 'failed' one whose failure does not prove nothing was performed (not not_performed).
-- sent: the row becomes 'sent' with the given result (the graph gets it as the tool's return value);
-- not_sent: the row is removed (its content kept in the intervention record), so the next attempt performs
-- the effect once more under the same key. A run stopped by needs_human is reopened (next attempt resumes
-- from its checkpoint); a failed or cancelled run stays stopped until retried.
WITH run AS (
    SELECT run_id, status FROM agentrun_runs
    WHERE run_id = %(run_id)s AND status IN ('needs_human', 'failed', 'cancelled')
    FOR UPDATE
), eff AS (
    -- by its primary key (run, key), the status checked on the row
    SELECT e.* FROM agentrun_effects e JOIN run ON e.run_id = run.run_id
    WHERE e.run_id = %(run_id)s AND e.idempotency_key = %(key)s
      AND (e.status IS NOT DISTINCT FROM 'pending'
           OR (e.status IS NOT DISTINCT FROM 'failed' AND NOT e.not_performed))
    FOR UPDATE OF e
), sent AS (
    UPDATE agentrun_effects e
    SET status = 'sent', result = %(result)s, needs_human = false, error = NULL,
        sent_at = coalesce(e.sent_at, now()), updated_at = now()
    FROM eff WHERE e.run_id = eff.run_id AND e.idempotency_key = eff.idempotency_key AND %(outcome)s = 'sent'
    RETURNING e.idempotency_key
), gone AS (
    DELETE FROM agentrun_effects e USING eff
    WHERE e.run_id = eff.run_id AND e.idempotency_key = eff.idempotency_key AND %(outcome)s = 'not_sent'
    RETURNING e.idempotency_key
), log AS (
    INSERT INTO agentrun_interventions (run_id, kind, effect_key, by, from_status, detail)
    SELECT run.run_id, 'resolve_' || %(outcome)s, eff.idempotency_key, %(by)s, run.status,
           to_jsonb(eff) || jsonb_build_object('resolved_result', %(result)s::jsonb)
    FROM eff, run
    RETURNING id
), upd AS (
    UPDATE agentrun_runs r
    SET interventions = r.interventions + 1, lease_epoch = r.lease_epoch + 1, updated_at = now(),
        reopened = r.reopened + CASE WHEN run.status = 'needs_human' THEN 1 ELSE 0 END,
        status = CASE WHEN run.status = 'needs_human' THEN 'admitted' ELSE r.status END,
        status_reason = CASE WHEN run.status = 'needs_human' THEN %(reason)s ELSE r.status_reason END,
        error = CASE WHEN run.status = 'needs_human' THEN NULL ELSE r.error END,
        finished_at = CASE WHEN run.status = 'needs_human' THEN NULL ELSE r.finished_at END
    FROM run WHERE r.run_id = run.run_id AND EXISTS (SELECT 1 FROM eff)
    RETURNING r.status
)
SELECT (SELECT status FROM run) AS run_status,
       (SELECT e.status FROM agentrun_effects e
        WHERE e.run_id = %(run_id)s AND e.idempotency_key = %(key)s) AS effect_status,
       (SELECT e.not_performed FROM agentrun_effects e
        WHERE e.run_id = %(run_id)s AND e.idempotency_key = %(key)s) AS not_performed,
       (SELECT count(*) FROM log) AS resolved,
       (SELECT status FROM upd) AS new_status

-- name: list_interventions
SELECT * FROM agentrun_interventions WHERE run_id = %(run_id)s ORDER BY id

-- ------------------------------------------------------------------------------------------ notifications
-- spec.approval.notify: effects of tool 'notify', written by the operator only, fenced by the notifier
-- epoch (migration 0008), never by the run's lease epoch (no worker holds a parked run).

-- name: take_notifier_epoch
-- A new sender: every statement of an older epoch is refused from now on.
INSERT INTO agentrun_notifier (id, epoch, taken_by) VALUES (1, 1, %(by)s)
ON CONFLICT (id) DO UPDATE SET epoch = agentrun_notifier.epoch + 1, taken_by = %(by)s, taken_at = now()
RETURNING epoch

-- name: reserve_notification
-- ONE round trip: fencing check + insert-or-return (issued = false: no call yet). due_in_seconds: how long
-- until a scheduled retry may be issued (Postgres clock; 0 when due).
WITH fence AS (
    SELECT epoch FROM agentrun_notifier WHERE id = 1 FOR SHARE
), ins AS (
    INSERT INTO agentrun_effects (idempotency_key, run_id, step, action, tool, occurrence, args_hash, args,
                                  epoch, key_version)
    SELECT %(key)s, %(run_id)s, %(step)s, %(action)s, 'notify', 0, %(args_hash)s, %(args)s, %(epoch)s, 2
    FROM fence WHERE fence.epoch = %(epoch)s
      AND EXISTS (SELECT 1 FROM agentrun_runs r WHERE r.run_id = %(run_id)s)
    ON CONFLICT (run_id, idempotency_key) DO NOTHING
    RETURNING *
), found AS (
    SELECT to_jsonb(ins) AS doc, ins.retry_at FROM ins
    UNION ALL
    SELECT to_jsonb(e), e.retry_at FROM agentrun_effects e
    WHERE e.run_id = %(run_id)s AND e.idempotency_key = %(key)s AND NOT EXISTS (SELECT 1 FROM ins)
)
SELECT fence.epoch AS current_epoch, (SELECT count(*) FROM ins) AS inserted, found.doc AS effect,
       greatest(0, extract(epoch FROM found.retry_at - now()))::float8 AS due_in_seconds
FROM fence LEFT JOIN found ON true

-- name: record_notification
-- ONE round trip: fencing check + transition of a pending notification. issued: a call is about to be made
-- (true) or its outcome is now recorded (false). retry_seconds: schedule the next call after this backoff.
WITH fence AS (
    SELECT epoch FROM agentrun_notifier WHERE id = 1 FOR SHARE
), upd AS (
    UPDATE agentrun_effects e
    SET status = %(status)s,
        issued = %(issued)s,
        attempts = e.attempts + %(calls)s,
        error = coalesce(%(error)s, e.error),
        needs_human = %(needs_human)s,
        provider_ref = coalesce(%(provider_ref)s, e.provider_ref),
        result = coalesce(%(result)s, e.result),
        epoch = %(epoch)s,
        retry_at = CASE WHEN %(retry_seconds)s::double precision IS NULL THEN NULL
                        ELSE now() + make_interval(secs => %(retry_seconds)s::double precision) END,
        updated_at = now(),
        sent_at = CASE WHEN %(status)s = 'sent' THEN coalesce(e.sent_at, now()) ELSE e.sent_at END
    FROM fence
    -- by its primary key (run, key), the status checked on the row
    WHERE e.run_id = %(run_id)s AND e.idempotency_key = %(key)s AND e.tool = 'notify' AND fence.epoch = %(epoch)s
      AND e.status IS NOT DISTINCT FROM 'pending'
    RETURNING e.*
)
SELECT fence.epoch AS current_epoch, (SELECT to_jsonb(upd) FROM upd) AS updated
FROM fence

-- name: list_needs_human_effects
-- The effects (not notifications) that stopped a run for a human: one needs-human notification each.
-- Sorted outside (OFFSET 0 keeps the inner query apart): asked for that order, a generic plan made on a fresh
-- table walked agentrun_effects_pending_idx, every pending effect of every run, for its order.
SELECT idempotency_key, tool, step, error FROM (
    SELECT idempotency_key, tool, step, error, created_at FROM agentrun_effects
    WHERE run_id = %(run_id)s AND needs_human AND tool <> 'notify' AND status = 'pending'
    OFFSET 0
) e
ORDER BY created_at, idempotency_key

-- name: list_notifications
SELECT * FROM agentrun_effects WHERE run_id = %(run_id)s AND tool = 'notify' ORDER BY created_at, idempotency_key

-- name: list_open_notifications
SELECT idempotency_key, issued FROM agentrun_effects
WHERE run_id = %(run_id)s AND tool = 'notify' AND status = 'pending' AND NOT needs_human
