-- An entity's last applied sequence is read from its last applied event rather than from a row of
-- inbox_entities that every applied event updated (twice: once to lock it, once to move it). A
-- row updated per event grows a chain of row versions that vacuum cannot remove while another
-- session holds an old snapshot, and every later event of the entity walked the whole chain. The
-- entity's last applied event is found at the end of inbox_events_entity_seq whatever the history.
--
-- inbox_entities keeps, per consumer and entity, a floor: where the entity started (the start
-- policy), where an operator moved it past a gap, and the highest sequence retention deleted. The
-- last applied sequence is the greater of the floor and the entity's last processed event.
-- Every ordered event's row, whatever its status: the statements that read it write the status as
-- `(status || '') = 'processed'`, which inbox_events_processed (consumer, processed_at) cannot serve,
-- so that no plan made on a nearly empty table walks every processed row of the consumer instead.
CREATE INDEX inbox_events_entity_seq ON inbox_events (consumer, entity_key, seq)
    WHERE entity_key IS NOT NULL;

-- Deliveries of one entity to one consumer wait for each other on a transaction-scoped advisory
-- lock (class 1768841826, 'inbx', and the hash of consumer and key; two entities whose hashes meet
-- merely wait for each other). Creates the entity at `initial` if it is new, and returns its last
-- applied sequence. VOLATILE: under READ COMMITTED its queries take a fresh snapshot after the
-- lock, and see what the transaction it waited for applied. Its queries keep the plans PL/pgSQL
-- made on their first calls, perhaps on an empty table never analyzed: the last applied event is
-- read as the first entry of a backward walk of the index, and sequential and bitmap scans are off
-- inside the function, so that no such plan reads every event of the entity.
CREATE FUNCTION inbox_lock_entity(p_consumer text, p_entity text, p_initial bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(1768841826, hashtext(p_consumer || '/' || p_entity));
    INSERT INTO inbox_entities (consumer, entity_key, last_seq) VALUES (p_consumer, p_entity, p_initial)
    ON CONFLICT ON CONSTRAINT inbox_entities_pkey DO NOTHING;
    RETURN greatest(
        (SELECT e.last_seq FROM inbox_entities e WHERE e.consumer = p_consumer AND e.entity_key = p_entity),
        (SELECT i.seq FROM inbox_events i
         WHERE i.consumer = p_consumer AND i.entity_key = p_entity AND (i.status || '') = 'processed'
         ORDER BY i.seq DESC LIMIT 1));
END
$$;
