-- Parked and failed payloads encrypted at rest: the id of the key a stored payload is sealed with
-- (`InboxLayer::cipher`), NULL for a payload stored in plain. Processed rows hold no payload.
ALTER TABLE inbox_events ADD COLUMN payload_key_id text NULL;
