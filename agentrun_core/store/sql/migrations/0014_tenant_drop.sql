-- agentrun schema, migration 14: the worker role of a namespace that is gone is dropped (issue 11).
-- Before, agentrun_provision_tenant (migration 5) created a LOGIN role per namespace and nothing ever removed
-- it: each deleted namespace left a role with a valid password behind.
--
-- The operator's leader calls agentrun_drop_tenant(namespace) for a namespace Kubernetes no longer has (it
-- checks; Postgres cannot), and it does something only once no run of that namespace is left in this
-- database (retention purged them: the runs' rows are what the role could reach). The agentrun_tenants row
-- is locked and deleted first, so a provisioning of a recreated namespace of that name waits, then creates a
-- new role. What the role owns here is reassigned to the caller (tenants create nothing, but nothing is lost
-- silently) and its privileges here revoked (DROP OWNED), then the role is dropped. If it still has
-- privileges or objects in another database (roles are global to the Postgres cluster), DROP ROLE refuses:
-- the role is then only disabled (NOLOGIN, no password) and its row kept, and the function says false.
CREATE FUNCTION agentrun_drop_tenant(p_namespace text) RETURNS boolean
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    role text;
BEGIN
    SELECT role_name INTO role FROM agentrun_tenants WHERE namespace = p_namespace FOR UPDATE;
    IF role IS NULL OR EXISTS (SELECT 1 FROM agentrun_runs WHERE namespace = p_namespace) THEN
        RETURN false;
    END IF;
    BEGIN
        DELETE FROM agentrun_tenants WHERE role_name = role;
        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = role) THEN
            -- A CREATEROLE (not superuser) caller has only ADMIN OPTION on the roles it created (Postgres 16):
            -- REASSIGN/DROP OWNED need the role's privileges, so it takes them for the last moments.
            EXECUTE format('GRANT %I TO %I', role, current_user);
            EXECUTE format('REASSIGN OWNED BY %I TO %I', role, current_user);
            EXECUTE format('DROP OWNED BY %I', role);
            EXECUTE format('DROP ROLE %I', role);
        END IF;
    EXCEPTION WHEN dependent_objects_still_exist THEN
        EXECUTE format('ALTER ROLE %I WITH NOLOGIN PASSWORD NULL', role);
        RETURN false;
    END;
    RETURN true;
END
$$;
REVOKE ALL ON FUNCTION agentrun_drop_tenant(text) FROM PUBLIC;
