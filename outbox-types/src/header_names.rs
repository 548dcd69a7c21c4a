//! The wire contract's header names: a leaf module (no imports), so that the contract's encoding
//! (`wire`) and the validation of an event's own headers (`header`) both read them without
//! depending on each other. Re-exported by [`crate::wire`].

/// Header carrying the event version.
pub const HEADER_EVENT_VERSION: &str = "x-event-version";
/// Header carrying the entity key.
pub const HEADER_ENTITY: &str = "x-entity";
/// Header carrying the entity sequence.
pub const HEADER_SEQ: &str = "x-seq";
/// Header carrying the causation id.
pub const HEADER_CAUSATION_ID: &str = "x-causation-id";
/// Header carrying the creation time in unix milliseconds.
pub const HEADER_CREATED_AT_MS: &str = "x-created-at-ms";
/// Header carrying the W3C trace context.
pub const HEADER_TRACEPARENT: &str = "traceparent";
/// Header carrying the id of the key an end-to-end sealed payload is sealed with (the body is then
/// the sealed bytes; see `PayloadCipher`). Absent when the payload is in plain.
pub const HEADER_PAYLOAD_KEY: &str = "x-outbox-payload-key";
/// Header carrying the wire contract's version when it is above 1 (absent: version 1). A decoder
/// refuses a message of a newer contract than its own instead of reading it as its own.
pub const HEADER_CONTRACT: &str = "x-outbox-contract";
/// Header marking a replayed delivery: the id of the replay job that sent the event again (same
/// event id, sequence, headers and payload as its first delivery). Absent on a first delivery.
pub const HEADER_REPLAY: &str = "x-outbox-replay";
