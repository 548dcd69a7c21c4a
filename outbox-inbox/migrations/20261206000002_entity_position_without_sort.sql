-- inbox_lock_entity's read of the entity's last applied event keeps the plan PL/pgSQL made on its
-- first calls. Made on a nearly empty table, that plan could walk the consumer's primary key
-- (consumer, event_id), read every event of the consumer and sort them: on a busy consumer, tens
-- of milliseconds per entity and batch. With sorting off inside the function the only plan left
-- without a sort is the backward walk of inbox_events_entity_seq, which stops at the entity's last
-- event whatever the history.
ALTER FUNCTION inbox_lock_entity(text, text, bigint) SET enable_sort = off;
