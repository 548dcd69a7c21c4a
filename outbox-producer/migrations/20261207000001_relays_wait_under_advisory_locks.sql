-- A relay's waiting held as an advisory lock and a sequence's value, not written as row versions.
--
-- A relay registered as waiting by upserting its row in outbox_relay_listeners (refreshed every
-- poll interval) and withdrew by deleting it whenever a claim found work: a row version every
-- second per idle relay, and two at every pause of the traffic. While another session holds an
-- old snapshot (a forgotten idle transaction, pg_dump), vacuum removes none of them, and the
-- commit trigger's probe of this small table read every one, once per inserted event (measured:
-- 86,400 registrations, a day of one idle relay, took enqueues from 4,778 to 1,223 tps).
--
-- Now a relay's row is written once, when the relay first waits, and stays until it stops. While
-- it waits, its own session holds the advisory lock (1869574001, hashtext(relay_id)); busy, it
-- releases it. A waiting relay also keeps outbox_relay_wait_hint (epoch milliseconds, set with
-- setval, which writes no row version) ahead of the clock by three poll intervals. The commit
-- trigger reads the hint; only while it is ahead does it try each listed relay's lock in shared
-- mode, and where that fails the relay waits and the commit notifies. Under load the relays are
-- busy, the hint runs out, and a commit reads one sequence. A relay whose session ends (stopped,
-- crashed, cut off) holds no lock any more, so commits stop notifying it at once.
--
-- Relays of earlier versions, which register by time, are no longer notified: until upgraded they
-- find new events at their poll interval.
--
-- The first keys of the relays' advisory locks: 1869574001 waiting, 1869574002 alive (held by the
-- relay's session for as long as it runs, so that another relay can tell a stopped relay's row
-- from a busy one's and delete it), 1869574003 (transaction-level) moving the hint.

CREATE SEQUENCE outbox_relay_wait_hint MINVALUE 0 START 0;

-- Keeps the hint at least `for_ms` milliseconds ahead of the clock.
CREATE FUNCTION outbox_relay_hint(for_ms bigint) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    until bigint := (extract(epoch FROM clock_timestamp()) * 1000)::bigint + for_ms;
BEGIN
    PERFORM pg_advisory_xact_lock(1869574003, 0);
    IF until > (SELECT last_value FROM outbox_relay_wait_hint) THEN
        PERFORM setval('outbox_relay_wait_hint', until);
    END IF;
END;
$$;

CREATE FUNCTION outbox_relay_present(relay text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    -- Another live session under the same name: it keeps the row; this one polls.
    IF NOT pg_try_advisory_lock(1869574002, hashtext(relay)) THEN
        RETURN false;
    END IF;
    INSERT INTO outbox_relay_listeners (relay_id, listening_until)
    VALUES (relay, '-infinity')
    ON CONFLICT (relay_id) DO NOTHING;
    -- Rows of relays that stopped without deleting theirs (their alive lock is free), and rows of
    -- relays of earlier versions whose registration ran out.
    DELETE FROM outbox_relay_listeners l
    WHERE l.relay_id <> relay
      AND (l.listening_until < clock_timestamp() - interval '1 hour'
           OR (l.listening_until = '-infinity' AND pg_try_advisory_xact_lock(1869574002, hashtext(l.relay_id))));
    RETURN true;
END;
$$;

-- The relay waits from now on, for at most `for_ms` before it says so again: the hint first (a
-- commit that reads it after this must find it ahead), then the lock. False while a committing
-- transaction is between its trigger and the end of its commit.
CREATE FUNCTION outbox_relay_wait(relay text, for_ms bigint) RETURNS boolean LANGUAGE sql AS $$
    SELECT outbox_relay_hint(for_ms);
    SELECT pg_try_advisory_lock(1869574001, hashtext(relay));
$$;

-- The relay waits still: the hint moves on.
CREATE FUNCTION outbox_relay_still(for_ms bigint) RETURNS void LANGUAGE sql AS $$
    SELECT outbox_relay_hint(for_ms);
$$;

CREATE FUNCTION outbox_relay_busy(relay text) RETURNS boolean LANGUAGE sql AS $$
    SELECT pg_advisory_unlock(1869574001, hashtext(relay));
$$;

-- The relay stops: its row goes, and so do its locks.
CREATE FUNCTION outbox_relay_leave(relay text) RETURNS void LANGUAGE sql AS $$
    DELETE FROM outbox_relay_listeners WHERE relay_id = relay;
    SELECT pg_advisory_unlock_all();
$$;

-- How many relays wait for a notification now, in this database (for operators and tests).
CREATE FUNCTION outbox_relays_waiting() RETURNS bigint LANGUAGE sql STABLE AS $$
    SELECT count(*) FROM pg_locks
    WHERE locktype = 'advisory' AND classid = 1869574001 AND objsubid = 2 AND mode = 'ExclusiveLock' AND granted
      AND database = (SELECT oid FROM pg_database WHERE datname = current_database());
$$;

CREATE OR REPLACE FUNCTION outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT last_value FROM outbox_relay_wait_hint) > (extract(epoch FROM clock_timestamp()) * 1000)::bigint
       AND EXISTS (SELECT 1 FROM outbox_relay_listeners l
                   WHERE NOT pg_try_advisory_xact_lock_shared(1869574001, hashtext(l.relay_id))) THEN
        PERFORM pg_notify('outbox_events', '');
    END IF;
    RETURN NULL;
END;
$$;
