-- agentrun schema, migration 22: a step batch stores its step names and start times in a form Postgres's
-- compression can shrink: node names apart from their step numbers, the numbers as differences, the start
-- times as gaps.
--
-- Why: after migration 21 a 200-step batch under durability "exit" still took ~11 B/step, most of it the
-- step names ('turn:1', 'turn:2', ...: all distinct, 3.4 B each compressed) and the start times (distinct
-- 8-byte values, 4.2 B each). Node names repeat ('turn', 'turn', ...), consecutive step numbers differ by 1
-- and a step starts a few microseconds after the one before it ends: measured on that batch, names 688 ->
-- 52 + 33 B, start times 851 -> 245 B.
--
-- Rule: the stored form is read back in ONE place, agentrun_unpack_steps (the view), and made by
-- agentrun_pack_steps here or by its twin agentrun_core/store/step_packing.py in the worker, which sends
-- it as it is stored (record_steps: the server parses, sorts and packs nothing; a test pins the two equal).
-- Both exact: a name round-trips byte for byte, a start time to the microsecond. Whatever is written in the
-- plain form, `steps` and `started_at` (the columns of migration 21), is packed by a trigger
-- (agentrun_step_batches_pack) before the row is stored, and they are stored NULL: the view's insert and
-- update triggers, a worker of the previous release (its record_steps, during a rolling upgrade) and this
-- migration's conversion of the batches already stored. A plain batch that cannot be packed is refused,
-- under the shape constraint's name, saying why.
--
-- Stored form, per event i of a batch (arrays in event order):
--   nodes[i]         the step's name without its number ('turn' for 'turn:17'); the whole name when it does
--                    not end in ':<integer>' (the integer written canonically, so the name round-trips)
--   step_deltas[i]   its number minus the number of the last numbered event before it (0 before the first);
--                    NULL: the name has no number
--   first_started_at the first event's start
--   gaps_us[i]       microseconds from the end of event i-1 (its start + duration) to the start of event i;
--                    gaps_us[1] = 0. Negative when steps overlap (clock steps, a parallel superstep)
--   duration_us etc. as in migration 21

CREATE FUNCTION agentrun_pack_steps(
    steps text[], started_at timestamptz[], duration_us bigint[],
    OUT nodes text[], OUT step_deltas integer[], OUT first_started_at timestamptz, OUT gaps_us bigint[])
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
WITH u AS (
    SELECT u.*, split_part(u.step, ':', -1) AS tail  -- after the last ':' (a regex costs 3 us an event more)
    FROM unnest(steps, started_at, duration_us) WITH ORDINALITY AS u (step, started_at, duration_us, n)
), e AS (
    SELECT u.n, u.started_at, u.duration_us,
           CASE WHEN numbered THEN left(u.step, -1 - length(u.tail)) ELSE u.step END AS node,
           CASE WHEN numbered THEN u.tail::integer END AS number
    FROM u, LATERAL (SELECT strpos(u.step, ':') > 0 AND u.tail ~ '^(0|-?[1-9][0-9]{0,8})$' AS numbered) AS z
), w AS (
    SELECT e.*,
           -- the position of the last numbered event before this one (positions grow: max finds it)
           max(e.n) FILTER (WHERE e.number IS NOT NULL)
               OVER (ORDER BY e.n ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS numbered_before,
           lag(e.started_at) OVER (ORDER BY e.n) AS previous_start,
           lag(e.duration_us) OVER (ORDER BY e.n) AS previous_duration
    FROM e
)
SELECT array_agg(w.node ORDER BY w.n),
       array_agg(w.number - coalesce(p.number, 0) ORDER BY w.n),
       min(w.started_at) FILTER (WHERE w.n = 1),
       array_agg(CASE WHEN w.n = 1 THEN 0
                      ELSE (extract(epoch FROM w.started_at - w.previous_start) * 1000000)::bigint
                           - w.previous_duration END ORDER BY w.n)
FROM w LEFT JOIN e AS p ON p.n = w.numbered_before
$$;

-- The events of a stored batch, in order: agentrun_pack_steps undone.
CREATE FUNCTION agentrun_unpack_steps(
    nodes text[], step_deltas integer[], first_started_at timestamptz, gaps_us bigint[], duration_us bigint[],
    checkpoint_ids text[], checkpoint_us bigint[])
RETURNS TABLE (n bigint, step text, started_at timestamptz, duration_us bigint, checkpoint_id text,
               checkpoint_us bigint)
-- STABLE, as timestamptz + interval is: a function no more volatile than its body is inlined into the view.
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT e.n,
       CASE WHEN e.delta IS NULL THEN e.node ELSE e.node || ':' || sum(e.delta) OVER w END,
       -- exact: a whole number of microseconds (below 2^53) times one microsecond
       first_started_at + interval '1 microsecond'
           * (sum(e.gap_us) OVER w + sum(e.duration_us) OVER w - e.duration_us)::float8,
       e.duration_us, e.checkpoint_id, e.checkpoint_us
FROM unnest(nodes, step_deltas, gaps_us, duration_us, checkpoint_ids, checkpoint_us)
         WITH ORDINALITY AS e (node, delta, gap_us, duration_us, checkpoint_id, checkpoint_us, n)
WINDOW w AS (ORDER BY e.n ROWS UNBOUNDED PRECEDING)
$$;

ALTER TABLE agentrun_step_batches
    DROP CONSTRAINT agentrun_step_batches_shape,
    ALTER COLUMN steps DROP NOT NULL,
    ALTER COLUMN started_at DROP NOT NULL,
    ADD COLUMN nodes text[],
    ADD COLUMN step_deltas integer[],
    ADD COLUMN first_started_at timestamptz,
    ADD COLUMN gaps_us bigint[];
COMMENT ON COLUMN agentrun_step_batches.steps IS
    'written, never stored: packed into nodes and step_deltas (migration 22)';
COMMENT ON COLUMN agentrun_step_batches.started_at IS
    'written, never stored: packed into first_started_at and gaps_us (migration 22)';

-- The plain form written, packed; refused with the reason when it is not one step name, start and duration
-- per event (what the view could not read back).
CREATE FUNCTION agentrun_step_batches_pack() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_n integer := cardinality(NEW.steps);
    v_why text;
BEGIN
    v_why := CASE
        WHEN NEW.steps IS NULL OR NEW.started_at IS NULL THEN 'steps and started_at are written together'
        WHEN v_n NOT BETWEEN 1 AND 65536 THEN 'a batch holds 1 to 65,536 events'
        WHEN array_ndims(NEW.steps) <> 1 OR array_lower(NEW.steps, 1) <> 1 THEN 'steps is not a list'
        WHEN array_position(NEW.steps, NULL) IS NOT NULL THEN 'a step name is missing'
        WHEN cardinality(NEW.started_at) <> v_n OR array_position(NEW.started_at, NULL) IS NOT NULL
            THEN 'a start time is missing'
        WHEN cardinality(NEW.duration_us) IS DISTINCT FROM v_n OR array_position(NEW.duration_us, NULL) IS NOT NULL
            THEN 'a duration is missing'
    END;
    IF v_why IS NOT NULL THEN
        RAISE EXCEPTION 'new row for relation "agentrun_step_batches" violates check constraint '
                        '"agentrun_step_batches_shape": %', v_why
            USING ERRCODE = 'check_violation', CONSTRAINT = 'agentrun_step_batches_shape',
                  TABLE = 'agentrun_step_batches';
    END IF;
    SELECT p.nodes, p.step_deltas, p.first_started_at, p.gaps_us
    INTO NEW.nodes, NEW.step_deltas, NEW.first_started_at, NEW.gaps_us
    FROM agentrun_pack_steps(NEW.steps, NEW.started_at, NEW.duration_us) p;
    NEW.steps := NULL;
    NEW.started_at := NULL;
    RETURN NEW;
END
$$;
-- Named to fire before agentrun_step_batches_unfold (triggers of a kind fire in name order).
CREATE TRIGGER agentrun_step_batches_pack BEFORE INSERT OR UPDATE ON agentrun_step_batches
    FOR EACH ROW WHEN (NEW.steps IS NOT NULL OR NEW.started_at IS NOT NULL)
    EXECUTE FUNCTION agentrun_step_batches_pack();

-- Compressed to the last column: once a row passes ~2 KB the toaster compresses its largest values only
-- until the row is under toast_tuple_target (~2 KB by default), so a batch just over it kept some arrays raw
-- (measured: 1,881 B against 1,199 B for the same 200 events). Storage MAIN: with a low target the toaster
-- would otherwise move any compressed value still over it to the TOAST table (a row and an index entry
-- more per batch); MAIN values stay in line up to ~8 KB.
ALTER TABLE agentrun_step_batches
    SET (toast_tuple_target = 128),
    ALTER COLUMN run_id SET STORAGE MAIN,
    ALTER COLUMN steps SET STORAGE MAIN,
    ALTER COLUMN started_at SET STORAGE MAIN,
    ALTER COLUMN nodes SET STORAGE MAIN,
    ALTER COLUMN step_deltas SET STORAGE MAIN,
    ALTER COLUMN gaps_us SET STORAGE MAIN,
    ALTER COLUMN duration_us SET STORAGE MAIN,
    ALTER COLUMN checkpoint_ids SET STORAGE MAIN,
    ALTER COLUMN checkpoint_us SET STORAGE MAIN,
    ALTER COLUMN effect_keys SET STORAGE MAIN;

-- The batches stored before, packed by the trigger (their events and the rollups' sums do not change).
ALTER TABLE agentrun_step_batches DISABLE TRIGGER agentrun_step_batches_unfold;
UPDATE agentrun_step_batches SET steps = steps;
ALTER TABLE agentrun_step_batches ENABLE TRIGGER agentrun_step_batches_unfold;

ALTER TABLE agentrun_step_batches
    ALTER COLUMN nodes SET NOT NULL,
    ALTER COLUMN step_deltas SET NOT NULL,
    ALTER COLUMN first_started_at SET NOT NULL,
    ALTER COLUMN gaps_us SET NOT NULL,
    ADD CONSTRAINT agentrun_step_batches_shape CHECK (
        steps IS NULL AND started_at IS NULL
        AND cardinality(nodes) BETWEEN 1 AND 65536
        AND array_ndims(nodes) = 1 AND array_lower(nodes, 1) = 1
        AND array_position(nodes, NULL) IS NULL
        AND cardinality(step_deltas) = cardinality(nodes)
        AND cardinality(gaps_us) = cardinality(nodes) AND array_position(gaps_us, NULL) IS NULL
        AND gaps_us[1] = 0
        AND cardinality(duration_us) = cardinality(nodes) AND array_position(duration_us, NULL) IS NULL
        AND coalesce(cardinality(checkpoint_ids), cardinality(nodes)) = cardinality(nodes)
        AND coalesce(cardinality(checkpoint_us), cardinality(nodes)) = cardinality(nodes)
        -- one array of strings per event (CASE: each test only once the one before it held)
        AND (effect_keys IS NULL OR CASE
                 WHEN jsonb_typeof(effect_keys) <> 'array' THEN false
                 WHEN jsonb_array_length(effect_keys) <> cardinality(nodes) THEN false
                 WHEN jsonb_path_exists(effect_keys, 'strict $[*] ? (@.type() != "array")') THEN false
                 ELSE NOT jsonb_path_exists(effect_keys, 'strict $[*][*] ? (@.type() != "string")') END));

CREATE OR REPLACE VIEW agentrun_step_events WITH (security_invoker = true) AS
SELECT (b.id << 16) + u.n - 1 AS id, b.run_id, b.attempt, u.step, u.checkpoint_id, u.started_at,
       u.duration_us / 1e6::float8 AS duration_seconds, u.checkpoint_us / 1e6::float8 AS checkpoint_seconds,
       ARRAY(SELECT jsonb_array_elements_text(b.effect_keys -> (u.n::integer - 1))) AS effect_keys,
       b.recorded_at
FROM agentrun_step_batches b,
     agentrun_unpack_steps(b.nodes, b.step_deltas, b.first_started_at, b.gaps_us, b.duration_us,
                           b.checkpoint_ids, b.checkpoint_us) AS u;

-- One event changed through the view: its batch read back whole, the event changed, written plain (packed
-- again by the trigger: a start or duration changed moves the next event's gap). Run and attempt are its
-- batch's.
CREATE OR REPLACE FUNCTION agentrun_step_events_update() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    i integer := (OLD.id & 65535)::integer + 1;
    v_steps text[];
    v_started timestamptz[];
BEGIN
    IF NEW.run_id IS DISTINCT FROM OLD.run_id OR NEW.attempt IS DISTINCT FROM OLD.attempt
       OR NEW.id IS DISTINCT FROM OLD.id THEN
        RAISE EXCEPTION 'a step event keeps its run, attempt and id' USING ERRCODE = 'check_violation';
    END IF;
    SELECT array_agg(u.step ORDER BY u.n), array_agg(u.started_at ORDER BY u.n) INTO v_steps, v_started
    FROM agentrun_step_batches b,
         agentrun_unpack_steps(b.nodes, b.step_deltas, b.first_started_at, b.gaps_us, b.duration_us,
                               b.checkpoint_ids, b.checkpoint_us) AS u
    WHERE b.id = OLD.id >> 16;
    v_steps[i] := NEW.step;
    v_started[i] := NEW.started_at;
    UPDATE agentrun_step_batches b SET
        steps = v_steps,
        started_at = v_started,
        duration_us[i] = round(NEW.duration_seconds * 1e6)::bigint,
        checkpoint_ids = CASE WHEN NEW.checkpoint_id IS NOT DISTINCT FROM OLD.checkpoint_id THEN b.checkpoint_ids
            ELSE agentrun_array_put(coalesce(b.checkpoint_ids, array_fill(NULL::text, ARRAY[cardinality(b.nodes)])),
                                    i, NEW.checkpoint_id) END,
        checkpoint_us = CASE WHEN NEW.checkpoint_seconds IS NOT DISTINCT FROM OLD.checkpoint_seconds
            THEN b.checkpoint_us
            ELSE agentrun_array_put(coalesce(b.checkpoint_us, array_fill(NULL::bigint, ARRAY[cardinality(b.nodes)])),
                                    i, round(NEW.checkpoint_seconds * 1e6)::bigint) END,
        effect_keys = CASE WHEN NEW.effect_keys IS NOT DISTINCT FROM OLD.effect_keys THEN b.effect_keys
            ELSE jsonb_set(coalesce(b.effect_keys, (SELECT jsonb_agg('[]'::jsonb) FROM unnest(b.nodes))),
                           ARRAY[(i - 1)::text], to_jsonb(coalesce(NEW.effect_keys, '{}'))) END
    WHERE b.id = OLD.id >> 16;
    RETURN NEW;
END
$$;
