-- agentrun schema, migration 25: a schema-migration lock no tenant can hold (issue 35).
--
-- migrate() serialised migrators with a session advisory lock on a constant key: any role that can connect
-- may take any advisory lock, and a tenant's worker role that took that key and kept its session open stopped
-- every later migration (an operator upgrade waited for ever). The key is now a secret of this table, which
-- only its owner reads, and it changes at every migration (agentrun_core/store/schema.py):
--   * a migrator locks the key it read, then replaces it with a new random key that it locks in the same
--     transaction (nobody can read the new key before that commits), and releases the old one;
--   * before it releases, it replaces the key again: the key it held — which any session could see in
--     pg_locks meanwhile — is stale by the time anyone else can take it.
-- A waiter that got the old key finds the key changed and moves on to the current one. The constant key is
-- still taken where this table does not exist yet (a new database, or one migrated from before this file:
-- the first migration after it is the last one a tenant could hold up).
CREATE TABLE agentrun_migrate_lock (
    id      integer PRIMARY KEY CHECK (id = 1),  -- a single row
    key     bigint  NOT NULL
);
ALTER TABLE agentrun_migrate_lock ENABLE ROW LEVEL SECURITY;
REVOKE ALL ON agentrun_migrate_lock FROM PUBLIC;

-- A random 64-bit key (gen_random_uuid: a strong random source, core Postgres).
CREATE FUNCTION agentrun_random_key() RETURNS bigint
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
    SELECT ('x' || substr(replace(gen_random_uuid()::text, '-', ''), 1, 16))::bit(64)::bigint
$$;
REVOKE ALL ON FUNCTION agentrun_random_key() FROM PUBLIC;

-- The migrator applying this file holds the first key (session level: past this transaction's commit) before
-- anyone can read it; migrate() finds it held and releases it with the others.
INSERT INTO agentrun_migrate_lock (id, key) VALUES (1, agentrun_random_key());
SELECT pg_advisory_lock(key) FROM agentrun_migrate_lock;
