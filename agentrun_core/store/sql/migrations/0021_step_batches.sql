-- agentrun schema, migration 21: step events are stored one row per recorded batch; agentrun_step_events is
-- now a view with one row per event, with the columns of the table it replaces.
--
-- Why: a row per step cost ~137 bytes (tuple header, run id, an empty effect-key array, ids, timestamps),
-- more than the checkpoint of a step under durability "exit" (bare LangGraph: 103 B/step for a 200-turn
-- conversation), and each row paid its own foreign-key check, unfold trigger and row-level-security check
-- (3.4 ms for the final 100-event batch of an attempt). The worker already records events in batches
-- (agent_worker/steps.py, one statement per flush); a batch is now one row of parallel arrays. Durations
-- are whole microseconds (bigint): small integers that Postgres's compression shrinks, where float8
-- seconds do not compress at all. A 200-step batch takes ~11 B/step.
--
-- Rule: batches are history, written once (record_steps, or an insert into the view: one event, one
-- batch; a worker of the previous release, during a rolling upgrade, inserts into the view); an update
-- through the view changes one element; events are never deleted but with their run (ON DELETE CASCADE).
-- A batch that the view could not read back event by event is refused (agentrun_step_batches_shape). The view's id orders events as the old ids did: batch id * 65536 + position, so a
-- batch holds at most 65,536 events (record_steps splits larger ones). Readers (the trace, fork, the
-- collector's histograms, the rollup's contributions) read the view, unchanged. security_invoker: a tenant
-- reading the view sees what row-level security on the batches lets it see, never more.
-- Existing events are copied, one batch each (their durations rounded to the microsecond).

CREATE TABLE agentrun_step_batches (
    id              bigserial PRIMARY KEY,
    run_id          text          NOT NULL REFERENCES agentrun_runs (run_id) ON DELETE CASCADE,
    attempt         integer       NOT NULL,
    steps           text[]        NOT NULL,
    started_at      timestamptz[] NOT NULL,
    duration_us     bigint[]      NOT NULL,
    checkpoint_ids  text[],       -- NULL: no event of the batch has a checkpoint (durability "exit")
    checkpoint_us   bigint[],     -- NULL: no event of the batch has a timed checkpoint write
    effect_keys     jsonb,        -- an array of key arrays, one per event; NULL: no event recorded an effect
    recorded_at     timestamptz   NOT NULL DEFAULT now(),
    CONSTRAINT agentrun_step_batches_shape CHECK (
        cardinality(steps) BETWEEN 1 AND 65536
        AND array_ndims(steps) = 1 AND array_lower(steps, 1) = 1
        AND array_position(steps, NULL) IS NULL
        AND cardinality(started_at) = cardinality(steps) AND array_position(started_at, NULL) IS NULL
        AND cardinality(duration_us) = cardinality(steps) AND array_position(duration_us, NULL) IS NULL
        AND coalesce(cardinality(checkpoint_ids), cardinality(steps)) = cardinality(steps)
        AND coalesce(cardinality(checkpoint_us), cardinality(steps)) = cardinality(steps)
        -- one array of strings per event (CASE: each test only once the one before it held)
        AND (effect_keys IS NULL OR CASE
                 WHEN jsonb_typeof(effect_keys) <> 'array' THEN false
                 WHEN jsonb_array_length(effect_keys) <> cardinality(steps) THEN false
                 WHEN jsonb_path_exists(effect_keys, 'strict $[*] ? (@.type() != "array")') THEN false
                 ELSE NOT jsonb_path_exists(effect_keys, 'strict $[*][*] ? (@.type() != "string")') END))
);
CREATE INDEX agentrun_step_batches_run_idx ON agentrun_step_batches (run_id, id);

ALTER TABLE agentrun_step_events RENAME TO agentrun_step_events_before_21;

CREATE VIEW agentrun_step_events WITH (security_invoker = true) AS
SELECT (b.id << 16) + u.n - 1 AS id, b.run_id, b.attempt, u.step, u.checkpoint_id, u.started_at,
       u.duration_us / 1e6::float8 AS duration_seconds, u.checkpoint_us / 1e6::float8 AS checkpoint_seconds,
       ARRAY(SELECT jsonb_array_elements_text(b.effect_keys -> (u.n::integer - 1))) AS effect_keys,
       b.recorded_at
FROM agentrun_step_batches b,
     unnest(b.steps, b.started_at, b.duration_us, b.checkpoint_ids, b.checkpoint_us)
         WITH ORDINALITY AS u (step, started_at, duration_us, checkpoint_id, checkpoint_us, n);

-- One event inserted through the view: a batch of one (tests, ad-hoc tools; the worker writes batches).
CREATE FUNCTION agentrun_step_events_insert() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_id bigint;
BEGIN
    INSERT INTO agentrun_step_batches
        (run_id, attempt, steps, started_at, duration_us, checkpoint_ids, checkpoint_us, effect_keys, recorded_at)
    VALUES (NEW.run_id, NEW.attempt, ARRAY[NEW.step], ARRAY[NEW.started_at],
            ARRAY[round(NEW.duration_seconds * 1e6)::bigint],
            CASE WHEN NEW.checkpoint_id IS NOT NULL THEN ARRAY[NEW.checkpoint_id] END,
            CASE WHEN NEW.checkpoint_seconds IS NOT NULL THEN ARRAY[round(NEW.checkpoint_seconds * 1e6)::bigint] END,
            CASE WHEN cardinality(NEW.effect_keys) > 0 THEN jsonb_build_array(to_jsonb(NEW.effect_keys)) END,
            coalesce(NEW.recorded_at, now()))
    RETURNING id INTO v_id;
    NEW.id := v_id << 16;
    NEW.effect_keys := coalesce(NEW.effect_keys, '{}');
    RETURN NEW;
END
$$;
CREATE TRIGGER agentrun_step_events_insert INSTEAD OF INSERT ON agentrun_step_events
    FOR EACH ROW EXECUTE FUNCTION agentrun_step_events_insert();

-- The events recorded before, through the view: one batch each, as the insert trigger makes them (before
-- the unfold trigger exists: their contribution to the rollup does not change).
INSERT INTO agentrun_step_events
    (run_id, attempt, step, checkpoint_id, started_at, duration_seconds, checkpoint_seconds, effect_keys,
     recorded_at)
SELECT run_id, attempt, step, checkpoint_id, started_at, duration_seconds, checkpoint_seconds, effect_keys,
       recorded_at
FROM agentrun_step_events_before_21 ORDER BY id;
DROP TABLE agentrun_step_events_before_21;

-- arr with element i set to v (arr[i] := v in an expression).
CREATE FUNCTION agentrun_array_put(arr anyarray, i integer, v anyelement) RETURNS anyarray
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    arr[i] := v;
    RETURN arr;
END
$$;

-- One event changed through the view: its element of its batch. Its run and attempt are its batch's.
CREATE FUNCTION agentrun_step_events_update() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    i integer := (OLD.id & 65535)::integer + 1;
BEGIN
    IF NEW.run_id IS DISTINCT FROM OLD.run_id OR NEW.attempt IS DISTINCT FROM OLD.attempt
       OR NEW.id IS DISTINCT FROM OLD.id THEN
        RAISE EXCEPTION 'a step event keeps its run, attempt and id' USING ERRCODE = 'check_violation';
    END IF;
    UPDATE agentrun_step_batches b SET
        steps[i] = NEW.step,
        started_at[i] = NEW.started_at,
        duration_us[i] = round(NEW.duration_seconds * 1e6)::bigint,
        checkpoint_ids = CASE WHEN NEW.checkpoint_id IS NOT DISTINCT FROM OLD.checkpoint_id THEN b.checkpoint_ids
            ELSE agentrun_array_put(coalesce(b.checkpoint_ids, array_fill(NULL::text, ARRAY[cardinality(b.steps)])),
                                    i, NEW.checkpoint_id) END,
        checkpoint_us = CASE WHEN NEW.checkpoint_seconds IS NOT DISTINCT FROM OLD.checkpoint_seconds
            THEN b.checkpoint_us
            ELSE agentrun_array_put(coalesce(b.checkpoint_us, array_fill(NULL::bigint, ARRAY[cardinality(b.steps)])),
                                    i, round(NEW.checkpoint_seconds * 1e6)::bigint) END,
        effect_keys = CASE WHEN NEW.effect_keys IS NOT DISTINCT FROM OLD.effect_keys THEN b.effect_keys
            ELSE jsonb_set(coalesce(b.effect_keys, (SELECT jsonb_agg('[]'::jsonb) FROM unnest(b.steps))),
                           ARRAY[(i - 1)::text], to_jsonb(coalesce(NEW.effect_keys, '{}'))) END
    WHERE b.id = OLD.id >> 16;
    RETURN NEW;
END
$$;
CREATE TRIGGER agentrun_step_events_update INSTEAD OF UPDATE ON agentrun_step_events
    FOR EACH ROW EXECUTE FUNCTION agentrun_step_events_update();

-- A folded run's batches change: its contribution to the rollup is taken back out first (migration 13).
CREATE TRIGGER agentrun_step_batches_unfold BEFORE INSERT OR UPDATE OR DELETE ON agentrun_step_batches
    FOR EACH ROW EXECUTE FUNCTION agentrun_unfold_on_write();

SELECT agentrun_protect('agentrun_step_batches', 'run_id', 'SELECT, INSERT');
GRANT SELECT, INSERT ON agentrun_step_events TO agentrun_worker;
GRANT USAGE ON SEQUENCE agentrun_step_batches_id_seq TO agentrun_worker;
