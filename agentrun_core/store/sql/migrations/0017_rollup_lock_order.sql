-- agentrun schema, migration 17: the rollup rows are upserted in one order by every writer.
--
-- agentrun_rollup_add (migration 13) upserted a batch's contributions in the order the aggregation produced
-- them, which depends on the batch (hash aggregation): two folders, or a folder and a write unfolding
-- another run, could lock two shared rollup rows in opposite orders and deadlock; Postgres then aborted one
-- of them (the operator's Purger retried it at its next interval; the CI saw it). Every caller now locks the
-- rows it touches in the key order, so two callers queue on their first common row instead.

CREATE OR REPLACE FUNCTION agentrun_rollup_add(p_runs text[], p_sign integer, p_gauges_only boolean)
RETURNS void
LANGUAGE sql SET search_path FROM CURRENT AS $$
    INSERT INTO agentrun_metric_rollups AS t (family, namespace, label1, label2, n, v1, v2, v3, total, buckets)
    SELECT c.family, c.ns, c.label1, c.label2, p_sign * c.n,
           CASE WHEN p_gauges_only AND c.family <> 'effects' THEN 0 ELSE p_sign * c.v1 END,
           CASE WHEN p_gauges_only THEN 0 ELSE p_sign * c.v2 END,
           CASE WHEN p_gauges_only THEN 0 ELSE p_sign * c.v3 END,
           CASE WHEN p_gauges_only THEN 0 ELSE p_sign * c.total END,
           CASE WHEN p_gauges_only OR c.buckets IS NULL THEN NULL
                ELSE ARRAY(SELECT p_sign * x FROM unnest(c.buckets) WITH ORDINALITY u (x, i) ORDER BY i) END
    FROM agentrun_metric_contributions(p_runs) c
    WHERE NOT p_gauges_only OR c.family IN ('runs', 'effects', 'divergences')
    ORDER BY c.family, c.ns, c.label1, c.label2
    ON CONFLICT (family, namespace, label1, label2) DO UPDATE
    SET n = t.n + excluded.n, v1 = t.v1 + excluded.v1, v2 = t.v2 + excluded.v2, v3 = t.v3 + excluded.v3,
        total = t.total + excluded.total, buckets = agentrun_buckets_add(t.buckets, excluded.buckets)
$$;
