-- A replay job's second part, the events of no entity, by id: without this index each batch would
-- walk the primary key over every event of an entity to find the few of none. Only events of no
-- entity are in it, so an ordered event's enqueue and publishing write no entry here.
CREATE INDEX outbox_events_unordered ON outbox_events (id) WHERE entity_key IS NULL;
