-- Least-privilege roles of the outbox: one for the relay, one for the consumers, one for the
-- producing application. Not a migration: run it once after `outbox migrate`, as the owner of the
-- tables (or a superuser), and again after each upgrade of the tables; it is idempotent.
--
--   psql "$DATABASE_URL" -v ON_ERROR_STOP=1 \
--        -v relay_role=outbox_relay -v consumer_role=outbox_consumer -v producer_role=outbox_producer \
--        -f migrations/roles.sql
--
-- or `outbox grant --relay-role NAME --consumer-role NAME --producer-role NAME` (prints this script
-- with the names filled in; `--apply` runs it on DATABASE_URL). Roles that do not exist yet are
-- created without LOGIN (creating them needs CREATEROLE); give each a login and a password
-- yourself: `ALTER ROLE outbox_relay LOGIN PASSWORD '...'`.
--
-- What each role may do on the product's tables, and nothing more: the script first revokes
-- everything there, then grants this (on a database that holds only the outbox's tables, or only
-- the inbox's, the grants on the absent ones are left out):
--
-- relay     outbox_events: SELECT, UPDATE (claims and outcomes), DELETE (retention);
--           outbox_entity_sequences: SELECT, INSERT, UPDATE (retention keeps there the highest
--           sequence it deleted per entity);
--           outbox_relay_listeners: SELECT, INSERT, UPDATE, DELETE (it writes its row once, when
--           it first waits for a notification; while it waits it holds an advisory lock, which
--           needs no privilege); the sequence outbox_relay_wait_hint: SELECT, UPDATE (a waiting
--           relay keeps it ahead of the clock); outbox_idempotency_keys: SELECT, UPDATE, DELETE (retention of
--           expired keys); _outbox_migrations: SELECT (its start-up check); outbox_replay_jobs:
--           SELECT, INSERT, UPDATE (`outbox replay` run as this role); the sequence of
--           outbox_events.position: SELECT (the claim's low water reads the last position drawn).
--           LISTEN needs no privilege. VACUUM needs the table's ownership (PostgreSQL 17 and later:
--           the MAINTAIN privilege, granted below on those versions). On older servers run the relay
--           with `--vacuum-after-rows 0` and let autovacuum keep the table lean (docs/security.md).
--           pg_read_all_stats (server-wide): the start of other roles' sessions, for the age of
--           the oldest snapshot held in the database (outbox_oldest_snapshot_seconds; see the end).
-- consumer  inbox_events: SELECT, INSERT, UPDATE, DELETE (retention); inbox_entities: SELECT,
--           INSERT, UPDATE. Its own business tables are yours to grant, for example
--           `GRANT SELECT, INSERT, UPDATE ON shipments TO outbox_consumer`.
-- producer  outbox_events: INSERT; EXECUTE on outbox_next_seq(text) (an entity's next sequence,
--           read from its last event by the function's owner); outbox_relay_listeners: SELECT (the
--           commit trigger looks for a waiting relay, trying its advisory lock); the sequence
--           outbox_relay_wait_hint: SELECT (whether any relay may wait); outbox_idempotency_keys:
--           SELECT, INSERT, UPDATE, DELETE
--           (keyed enqueue takes a key, or an expired one over; a refused batch gives back the keys
--           it took). Grant these to the application's own role, or grant the producer role to it:
--           `GRANT outbox_producer TO orders_app`.
--
-- The operator commands (`outbox status`, `events`, `quarantine`, `inbox`, `migrate`) run as the
-- owner of the tables.

-- Under psql, a name not given with -v is outbox_relay, outbox_consumer or outbox_producer.
\if :{?relay_role}
\else
\set relay_role outbox_relay
\endif
\if :{?consumer_role}
\else
\set consumer_role outbox_consumer
\endif
\if :{?producer_role}
\else
\set producer_role outbox_producer
\endif

BEGIN;

-- The names, for the blocks below.
SET LOCAL outbox.relay_role = :'relay_role';
SET LOCAL outbox.consumer_role = :'consumer_role';
SET LOCAL outbox.producer_role = :'producer_role';

-- The roles that do not exist yet, and the use of the schema that holds the tables.
DO $$
DECLARE
    name text;
BEGIN
    IF to_regclass('outbox_events') IS NULL AND to_regclass('inbox_events') IS NULL THEN
        RAISE EXCEPTION 'no outbox or inbox tables in schema %: run `outbox migrate` first', current_schema();
    END IF;
    FOREACH name IN ARRAY ARRAY[current_setting('outbox.relay_role'), current_setting('outbox.consumer_role'),
                                current_setting('outbox.producer_role')] LOOP
        IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = name) THEN
            EXECUTE format('CREATE ROLE %I', name);
        END IF;
        EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', current_schema(), name);
    END LOOP;
END
$$;

-- The privileges, on the tables this database holds (the outbox's, the inbox's, or both): first
-- everything revoked from the three roles, then exactly these granted.
DO $$
DECLARE
    roles text[] := ARRAY[current_setting('outbox.relay_role'), current_setting('outbox.consumer_role'),
                          current_setting('outbox.producer_role')];
    tables text[] := ARRAY['outbox_events', 'outbox_entity_sequences', 'outbox_relay_listeners',
                           'outbox_idempotency_keys', '_outbox_migrations', 'outbox_replay_jobs', 'inbox_events',
                           'inbox_entities'];
    g record;
BEGIN
    FOR g IN SELECT t.tbl, r.role FROM unnest(tables) AS t(tbl), unnest(roles) AS r(role)
             WHERE to_regclass(t.tbl) IS NOT NULL LOOP
        EXECUTE format('REVOKE ALL ON %I FROM %I', g.tbl, g.role);
    END LOOP;
    FOR g IN SELECT * FROM (VALUES
        ('outbox_events',           roles[1], 'SELECT, UPDATE, DELETE'),
        ('outbox_entity_sequences', roles[1], 'SELECT, INSERT, UPDATE'),
        ('outbox_relay_listeners',  roles[1], 'SELECT, INSERT, UPDATE, DELETE'),
        ('outbox_idempotency_keys', roles[1], 'SELECT, UPDATE, DELETE'),
        ('_outbox_migrations',      roles[1], 'SELECT'),
        ('outbox_replay_jobs',      roles[1], 'SELECT, INSERT, UPDATE'),
        ('inbox_events',            roles[2], 'SELECT, INSERT, UPDATE, DELETE'),
        ('inbox_entities',          roles[2], 'SELECT, INSERT, UPDATE'),
        ('outbox_events',           roles[3], 'INSERT'),
        ('outbox_relay_listeners',  roles[3], 'SELECT'),
        ('outbox_idempotency_keys', roles[3], 'SELECT, INSERT, UPDATE, DELETE')
    ) AS v(tbl, role, privileges) WHERE to_regclass(v.tbl) IS NOT NULL LOOP
        EXECUTE format('GRANT %s ON %I TO %I', g.privileges, g.tbl, g.role);
    END LOOP;
    IF to_regprocedure('outbox_next_seq(text)') IS NOT NULL THEN
        FOR g IN SELECT unnest(roles) AS role LOOP
            EXECUTE format('REVOKE ALL ON FUNCTION outbox_next_seq(text) FROM %I', g.role);
        END LOOP;
        EXECUTE format('GRANT EXECUTE ON FUNCTION outbox_next_seq(text) TO %I', roles[3]);
    END IF;
    IF to_regclass('outbox_events') IS NOT NULL THEN
        FOR g IN SELECT unnest(roles) AS role LOOP
            EXECUTE format('REVOKE ALL ON SEQUENCE %s FROM %I', pg_get_serial_sequence('outbox_events', 'position'), g.role);
        END LOOP;
        EXECUTE format('GRANT SELECT ON SEQUENCE %s TO %I', pg_get_serial_sequence('outbox_events', 'position'), roles[1]);
    END IF;
    IF to_regclass('outbox_relay_wait_hint') IS NOT NULL THEN
        FOR g IN SELECT unnest(roles) AS role LOOP
            EXECUTE format('REVOKE ALL ON SEQUENCE outbox_relay_wait_hint FROM %I', g.role);
        END LOOP;
        EXECUTE format('GRANT SELECT, UPDATE ON SEQUENCE outbox_relay_wait_hint TO %I', roles[1]);
        EXECUTE format('GRANT SELECT ON SEQUENCE outbox_relay_wait_hint TO %I', roles[3]);
    END IF;
    IF to_regclass('outbox_events') IS NOT NULL AND current_setting('server_version_num')::int >= 170000 THEN
        EXECUTE format('GRANT MAINTAIN ON outbox_events TO %I', roles[1]);
    END IF;
END
$$;

-- The relay's gauge of the oldest snapshot held in the database (outbox_oldest_snapshot_seconds,
-- alert OutboxSnapshotHeld) needs to see when other roles' sessions began their transactions:
-- PostgreSQL shows that only to members of pg_read_all_stats. Membership lets the role read every
-- session's activity on the server, the text of their current statements included (the relay
-- never reads it). Granting it takes a superuser, the ADMIN option on pg_read_all_stats
-- (PostgreSQL 16 and later) or CREATEROLE (before 16); without that, the script warns and goes on:
-- grant it later as a superuser, or go without the gauge (outbox_horizon_xid_age and the pid in
-- `outbox status` still show the session, but not its age).
DO $$
BEGIN
    EXECUTE format('GRANT pg_read_all_stats TO %I', current_setting('outbox.relay_role'));
EXCEPTION WHEN insufficient_privilege THEN
    RAISE WARNING 'could not grant pg_read_all_stats to %: the relay cannot see how old other roles'' snapshots are (outbox_oldest_snapshot_seconds reads 0 for them); grant it as a superuser',
        current_setting('outbox.relay_role');
END
$$;

COMMIT;
