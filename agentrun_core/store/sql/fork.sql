-- Forks (kubectl agentrun fork): the operator, at admission, as the owner of the tables (RLS does not apply
-- to it), resolves the source run IN THE FORK'S OWN NAMESPACE and copies one of its checkpoints into the
-- fork's thread. A tenant's worker never reads another run's checkpoints.

-- name: find_fork_source
-- The source run (by uid when the request named one, else the newest admitted run of that name), the
-- checkpoint to start from (the one given, or the one written after the latest completed step of that
-- name; step events are named 'node:step-number', so 'draft' matches 'draft:3') and the state channels it holds. Columns are NULL when a part is not found; the caller says which.
WITH src AS (
    SELECT run_id, name FROM agentrun_runs
    WHERE namespace = %(namespace)s AND name = %(name)s
      AND (%(run_uid)s::text IS NULL OR run_id = %(run_uid)s)
    ORDER BY admitted_at DESC LIMIT 1
), wanted AS (
    SELECT coalesce(%(checkpoint_id)s::text,
                    (SELECT e.checkpoint_id FROM agentrun_step_events e, src
                     WHERE e.run_id = src.run_id AND e.checkpoint_id IS NOT NULL
                       AND (e.step = %(step)s OR split_part(e.step, ':', 1) = %(step)s)
                     ORDER BY e.id DESC LIMIT 1)) AS checkpoint_id
), cp AS (
    SELECT c.checkpoint_id, c.checkpoint FROM checkpoints c, src, wanted
    WHERE c.thread_id = src.run_id AND c.checkpoint_ns = '' AND c.checkpoint_id = wanted.checkpoint_id
)
SELECT (SELECT run_id FROM src) AS run_id,
       (SELECT checkpoint_id FROM cp) AS checkpoint_id,
       (SELECT array_agg(k ORDER BY k) FROM cp, jsonb_object_keys(cp.checkpoint -> 'channel_versions') k
        WHERE k NOT LIKE '\_\_%%' AND k NOT LIKE '%%:%%') AS channels,
       (SELECT array_agg(DISTINCT split_part(e.step, ':', 1)) FROM agentrun_step_events e, src
        WHERE e.run_id = src.run_id AND e.checkpoint_id IS NOT NULL) AS steps,
       -- The source's approvals decided before that checkpoint: requested before the worker wrote it (its
       -- ts; none: taken as after every approval). The checkpoint a run parks at is written before its
       -- approval is requested, so it carries no decision; every later one carries it.
       (SELECT array_agg(a.approval_id || ' (' || a.status || ')' ORDER BY a.requested_at, a.approval_id)
        FROM agentrun_approvals a, src, cp
        WHERE a.run_id = src.run_id AND a.status <> 'pending'
          AND a.requested_at <= coalesce((cp.checkpoint ->> 'ts')::timestamptz, 'infinity')) AS carried

-- name: admit_fork
-- admit_run plus the starting state, in ONE statement: the run row (fork_of recorded, its head the copied
-- checkpoint), the checkpoint row, the blobs its channel_versions reference, and its pending writes but the
-- answers to interrupts (an interrupt waiting at that checkpoint is asked again, as the fork's own approval,
-- even when the source's was decided). Admitting again returns
-- the first row and copies nothing.
-- A DeltaChannel (LangGraph 1.2: e.g. a long chat's messages) stores no value at most checkpoints: it is
-- rebuilt from the writes of the checkpoint's ancestors back to the nearest one holding a snapshot. So the
-- copy is that keep set: the chain of parents (parent ids, never id order) back to the nearest ancestor that
-- stores a value for every DeltaChannel the checkpoint itself does not hold (those named in its metadata's
-- counters_since_delta_snapshot), each with its blobs and writes; the oldest kept row loses its parent. Without
-- a DeltaChannel the set is the checkpoint alone.
WITH RECURSIVE ins AS (
    INSERT INTO agentrun_runs (run_id, namespace, name, graph, input, spec_hash, durability, approval_policy,
                               retry_generation, fork_of, head_checkpoint_id)
    VALUES (%(run_id)s, %(namespace)s, %(name)s, %(graph)s, %(input)s, %(spec_hash)s, %(durability)s,
            %(approval_policy)s, %(retry_generation)s, %(fork_of)s, %(checkpoint_id)s)
    ON CONFLICT (run_id) DO NOTHING
    RETURNING *
), need AS (  -- the DeltaChannels the checkpoint does not hold a value of
    SELECT coalesce(array_agg(k), '{}') AS channels
    FROM checkpoints c
    CROSS JOIN LATERAL jsonb_object_keys(coalesce(c.metadata -> 'counters_since_delta_snapshot', '{}')) k
    WHERE c.thread_id = %(source_run_id)s AND c.checkpoint_ns = '' AND c.checkpoint_id = %(checkpoint_id)s
      AND c.checkpoint -> 'channel_versions' ? k
      AND coalesce(jsonb_typeof(c.checkpoint -> 'channel_values' -> k), 'null') = 'null'
      AND NOT EXISTS (SELECT 1 FROM checkpoint_blobs b
                      WHERE b.thread_id = c.thread_id AND b.checkpoint_ns = '' AND b.channel = k
                        AND b.version = c.checkpoint -> 'channel_versions' ->> k AND b.type <> 'empty')
), keep AS (  -- the checkpoint (depth 0), then its parents until every needed channel found a value
    SELECT c.checkpoint_id, c.parent_checkpoint_id, c.checkpoint, need.channels AS unseeded
    FROM checkpoints c, need
    WHERE c.thread_id = %(source_run_id)s AND c.checkpoint_ns = '' AND c.checkpoint_id = %(checkpoint_id)s
    UNION ALL
    SELECT p.checkpoint_id, p.parent_checkpoint_id, p.checkpoint,
           ARRAY(SELECT ch FROM unnest(k.unseeded) ch
                 WHERE coalesce(jsonb_typeof(p.checkpoint -> 'channel_values' -> ch), 'null') = 'null'
                   AND NOT EXISTS (SELECT 1 FROM checkpoint_blobs b
                                   WHERE b.thread_id = p.thread_id AND b.checkpoint_ns = ''
                                     AND b.channel = ch AND b.version = p.checkpoint -> 'channel_versions' ->> ch
                                     AND b.type <> 'empty'))
    FROM keep k
    JOIN checkpoints p
      ON p.thread_id = %(source_run_id)s AND p.checkpoint_ns = '' AND p.checkpoint_id = k.parent_checkpoint_id
    WHERE cardinality(k.unseeded) > 0
), cp AS (
    INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint,
                             metadata)
    SELECT %(run_id)s, '', c.checkpoint_id,
           CASE WHEN c.parent_checkpoint_id IN (SELECT checkpoint_id FROM keep) THEN c.parent_checkpoint_id END,
           c.type, c.checkpoint, c.metadata || jsonb_build_object('forked_from', %(source_run_id)s::text)
    FROM checkpoints c
    WHERE c.thread_id = %(source_run_id)s AND c.checkpoint_ns = ''
      AND c.checkpoint_id IN (SELECT checkpoint_id FROM keep)
      AND EXISTS (SELECT 1 FROM ins)
    ON CONFLICT DO NOTHING
    RETURNING checkpoint_id
), blobs AS (
    INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob)
    SELECT DISTINCT ON (b.channel, b.version) %(run_id)s, '', b.channel, b.version, b.type, b.blob
    FROM keep k
    CROSS JOIN LATERAL jsonb_each_text(k.checkpoint -> 'channel_versions') v(channel, version)
    JOIN checkpoint_blobs b
      ON b.thread_id = %(source_run_id)s AND b.checkpoint_ns = '' AND b.channel = v.channel
     AND b.version = v.version
    WHERE EXISTS (SELECT 1 FROM ins)
    ON CONFLICT DO NOTHING
    RETURNING channel
), writes AS (
    INSERT INTO checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, blob,
                                   task_path)
    SELECT %(run_id)s, '', w.checkpoint_id, w.task_id, w.idx, w.channel, w.type, w.blob, w.task_path
    FROM checkpoint_writes w
    WHERE w.thread_id = %(source_run_id)s AND w.checkpoint_ns = ''
      AND w.checkpoint_id IN (SELECT checkpoint_id FROM keep)
      -- At the forked checkpoint, never a human's answer: not LangGraph's __resume__ write of
      -- Command(resume=...), nor what the interrupted task wrote once resumed with it (the decision, its
      -- route); only its __interrupt__. At the checkpoint a run parked at, the fork then asks for its approval
      -- again, as its own, instead of acting on the source's decision (issue 35.3). Writes of other tasks of
      -- that step are kept, and so are the ancestors' writes (a DeltaChannel is rebuilt from them: history).
      AND (w.checkpoint_id <> %(checkpoint_id)s OR (
            w.channel <> '__resume__'
            AND (w.channel = '__interrupt__' OR NOT EXISTS (
                  SELECT 1 FROM checkpoint_writes i
                  WHERE i.thread_id = w.thread_id AND i.checkpoint_ns = '' AND i.checkpoint_id = w.checkpoint_id
                    AND i.task_id = w.task_id AND i.channel = '__interrupt__'))))
      AND EXISTS (SELECT 1 FROM ins)
    ON CONFLICT DO NOTHING
    RETURNING task_id
)
SELECT ins.*, (SELECT count(*) FROM cp) AS copied_checkpoints, (SELECT count(*) FROM blobs) AS copied_blobs,
       (SELECT count(*) FROM writes) AS copied_writes
FROM ins
UNION ALL
SELECT r.*, 0, 0, 0 FROM agentrun_runs r WHERE r.run_id = %(run_id)s AND NOT EXISTS (SELECT 1 FROM ins)

-- name: list_forks
-- The runs forked from this one (for its trace: "forks").
SELECT run_id, namespace, name, fork_of, admitted_at FROM agentrun_runs
WHERE fork_of ->> 'run_id' = %(run_id)s ORDER BY admitted_at, run_id
