-- The next sequence number of an entity is read from its last event rather than from a counter row
-- that every enqueue updates. A row updated once per event grows a chain of row versions that
-- vacuum cannot remove while another session holds an old snapshot (a long report, pg_dump, a
-- forgotten idle transaction), and every later enqueue of that entity walked the whole chain. The
-- entity's last event is found at the end of the unique (entity_key, seq) index whatever the history.
--
-- Enqueues of one entity wait for each other on a transaction-scoped advisory lock (class
-- 1869968482, 'outb', and the hash of the entity key; two entities whose keys share a hash merely
-- wait for each other), so the sequence still follows commit order and a rollback leaves no gap.
-- The function is VOLATILE: under READ COMMITTED its query takes a fresh snapshot after the lock,
-- and sees the event of the transaction it waited for. It runs as its owner, so producers need no
-- privilege to read the outbox; only its owner and the roles granted EXECUTE may call it
-- (migrations/roles.sql grants it to the producer role). Its queries keep the plans PL/pgSQL made
-- on their first calls, perhaps on an empty table never analyzed: the last event is read as the
-- first entry of a backward walk of the index, and sequential and bitmap scans are off inside the
-- function, so that no such plan reads every event of the entity.
--
-- outbox_entity_sequences now keeps, per entity, the highest sequence retention deleted (and, for
-- entities that existed before this migration, their last sequence then): an entity whose rows are
-- all gone continues after it, and a number is never reused.
CREATE FUNCTION outbox_next_seq(entity text) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(1869968482, hashtext(entity));
    RETURN greatest(
        (SELECT e.seq FROM outbox_events e WHERE e.entity_key = entity ORDER BY e.seq DESC LIMIT 1),
        (SELECT s.last_seq FROM outbox_entity_sequences s WHERE s.entity_key = entity),
        0) + 1;
END
$$;

-- Runs as its owner, so it reads only the schema it was made in, never a caller's temporary tables.
-- Only the owner and the roles granted EXECUTE call it; on upgrade, the roles that could upsert the
-- old counters (producers) may call it, the roles that may delete outbox rows (relays, for
-- retention) may keep the highest sequence deleted, and the roles that may update outbox rows
-- (relays) may read the last position drawn (the claim's low water). migrations/roles.sql grants
-- exactly these from now on.
DO $$
DECLARE
    r record;
BEGIN
    EXECUTE format('ALTER FUNCTION outbox_next_seq(text) SET search_path = %I, pg_temp', current_schema());
    REVOKE ALL ON FUNCTION outbox_next_seq(text) FROM PUBLIC;
    FOR r IN SELECT DISTINCT grantee, table_name, privilege_type FROM information_schema.role_table_grants
             WHERE table_schema = current_schema() AND grantee NOT IN ('PUBLIC', current_user)
               AND ((table_name = 'outbox_entity_sequences' AND privilege_type = 'INSERT')
                 OR (table_name = 'outbox_events' AND privilege_type IN ('DELETE', 'UPDATE'))) LOOP
        IF r.table_name = 'outbox_entity_sequences' THEN
            EXECUTE format('GRANT EXECUTE ON FUNCTION outbox_next_seq(text) TO %I', r.grantee);
        ELSIF r.privilege_type = 'DELETE' THEN
            EXECUTE format('GRANT INSERT, UPDATE ON outbox_entity_sequences TO %I', r.grantee);
        ELSE
            EXECUTE format('GRANT SELECT ON SEQUENCE %s TO %I',
                           pg_get_serial_sequence('outbox_events', 'position'), r.grantee);
        END IF;
    END LOOP;
END
$$;
