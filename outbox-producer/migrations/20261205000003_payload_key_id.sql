-- Payload encryption at rest: the id of the key a row's payload is sealed with, NULL for a payload
-- stored in plain. The newest configured key seals; every configured key opens, so keys rotate
-- while rows sealed under older ones are still waiting (`SELECT payload_key_id, count(*) ... GROUP
-- BY 1` shows how many rows each key still holds).
ALTER TABLE outbox_events ADD COLUMN payload_key_id text NULL;
