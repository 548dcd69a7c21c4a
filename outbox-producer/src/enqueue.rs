//! The write side: events enter the outbox inside the caller's transaction.

use std::borrow::Cow;
use std::time::Duration;

use outbox_types::{EventId, Headers, Limits, NewEvent, PayloadCipher};
use sqlx::PgConnection;

use crate::idempotency::{self, KEYED_ORDERED, KEYED_UNORDERED};

use crate::{Error, Result};

/// Writes events into the outbox as part of the caller's own database transaction.
///
/// `Outbox` holds only configuration; it is cheap to clone and share. Its methods take
/// `&mut PgConnection`, so they join whatever transaction the caller opened (`&mut *tx`) and never
/// commit, roll back or open one of their own. The event exists if and only if that transaction
/// commits (guarantee G1). Events with an entity key get the entity's next sequence number; the
/// counter row stays locked until the transaction ends, so numbers are gapless and follow commit
/// order, and a rolled-back transaction consumes none. The relay is woken by a notification that
/// PostgreSQL delivers only at commit.
///
/// ```no_run
/// use outbox_types::NewEvent;
/// use outbox_producer::Outbox;
///
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// let outbox = Outbox::builder().max_payload_bytes(256 * 1024).build();
/// let mut tx = pool.begin().await?;
/// sqlx::query("UPDATE orders SET status = 'paid' WHERE id = $1")
///     .bind(42_i64)
///     .execute(&mut *tx)
///     .await?;
/// let event = NewEvent::json("order.paid", &serde_json::json!({ "order_id": 42 }))?.entity("order-42");
/// let id = outbox.enqueue(&mut *tx, event).await?;
/// tx.commit().await?;
/// println!("enqueued {id}");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Outbox {
    limits: Limits,
    idempotency_window: Duration,
    cipher: Option<PayloadCipher>,
    persistent: bool,
}

impl Default for Outbox {
    fn default() -> Self {
        let (limits, idempotency_window) = (Limits::default(), DEFAULT_IDEMPOTENCY_WINDOW);
        Self { limits, idempotency_window, cipher: None, persistent: true }
    }
}

/// How long an idempotency key is kept by default: 24 hours.
pub const DEFAULT_IDEMPOTENCY_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// Builder of an [`Outbox`].
#[derive(Debug, Clone)]
pub struct OutboxBuilder {
    limits: Limits,
    idempotency_window: Duration,
    cipher: Option<PayloadCipher>,
    persistent: bool,
}

impl Default for OutboxBuilder {
    fn default() -> Self {
        let (limits, idempotency_window) = (Limits::default(), DEFAULT_IDEMPOTENCY_WINDOW);
        Self { limits, idempotency_window, cipher: None, persistent: true }
    }
}

impl OutboxBuilder {
    /// Sets the largest payload accepted, in bytes. Defaults to 1 MiB.
    #[must_use]
    pub fn max_payload_bytes(mut self, bytes: usize) -> Self {
        self.limits = self.limits.max_payload_bytes(bytes);
        self
    }

    /// Sets the largest total size of an event's extra headers, in bytes. Defaults to 16 KiB.
    #[must_use]
    pub fn max_header_bytes(mut self, bytes: usize) -> Self {
        self.limits = self.limits.max_header_bytes(bytes);
        self
    }

    /// Sets how long an event's idempotency key is kept ([`NewEvent::idempotency_key`]): within
    /// it, a second enqueue with the key writes nothing and answers with the first event's id.
    /// Defaults to 24 hours. Retention deletes expired keys.
    #[must_use]
    pub fn idempotency_window(mut self, window: Duration) -> Self {
        self.idempotency_window = window;
        self
    }

    /// Seals every payload with `cipher` before it is written (encryption at rest): the row holds
    /// the sealed bytes and the key's id, and only a relay with the key publishes it (in plain,
    /// the wire contract unchanged). Defaults to none (payloads stored as given).
    #[must_use]
    pub fn cipher(mut self, cipher: PayloadCipher) -> Self {
        self.cipher = Some(cipher);
        self
    }

    /// Sets whether the outbox's statements are prepared once per connection under a name (sqlx's
    /// persistent statements) or sent unnamed, parsed on every use. Set `false` behind a pooler in
    /// transaction mode (PgBouncer, most managed poolers), which gives each transaction another
    /// server connection where a named statement is unknown or already taken (`prepared statement
    /// "sqlx_s_1" already exists`). Defaults to `true`: faster on a direct connection.
    #[must_use]
    pub fn persistent_statements(mut self, persistent: bool) -> Self {
        self.persistent = persistent;
        self
    }

    /// Builds the outbox.
    pub fn build(self) -> Outbox {
        crate::metrics::describe();
        let (limits, idempotency_window, cipher, persistent) =
            (self.limits, self.idempotency_window, self.cipher, self.persistent);
        Outbox { limits, idempotency_window, cipher, persistent }
    }
}

const INSERT_UNORDERED: &str = "\
INSERT INTO outbox_events
    (id, event_type, event_version, payload, content_type, headers, correlation_id, causation_id, traceparent,
     payload_key_id)
VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8, $9, $10)";

/// An ordered event: its sequence is the entity's next (`outbox_next_seq` waits for any other
/// transaction enqueueing for the entity, then reads its last event).
const INSERT_ORDERED: &str = "\
INSERT INTO outbox_events
    (id, event_type, event_version, payload, content_type, headers, correlation_id, causation_id, traceparent,
     entity_key, seq, payload_key_id)
VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8, $9, $10, outbox_next_seq($10), $11)";

/// One statement for a whole batch: arrays in, the next sequence of each distinct entity taken
/// once, in the order of the locks `outbox_next_seq` takes (the key's hash, then the key: two
/// batches never wait for each other in a circle, even where two keys share a hash; the function
/// is evaluated after the sort), consecutive sequence numbers within the batch in the order given.
const INSERT_MANY: &str = "\
WITH input AS (
    SELECT * FROM UNNEST($1::uuid[], $2::text[], $3::int8[], $4::bytea[], $5::text[], $6::text[],
                         $7::text[], $8::text[], $9::text[], $10::text[], $11::text[])
        WITH ORDINALITY AS t(id, event_type, event_version, payload, content_type, headers,
                             correlation_id, causation_id, traceparent, entity_key, payload_key_id, ord)
), counts AS (
    SELECT entity_key, count(*) AS n FROM input WHERE entity_key IS NOT NULL GROUP BY entity_key
), next AS (
    SELECT entity_key, outbox_next_seq(entity_key) AS first FROM counts ORDER BY hashtext(entity_key), entity_key
), numbered AS (
    SELECT i.*, next.first - 1 + row_number() OVER (PARTITION BY i.entity_key ORDER BY i.ord) AS seq
    FROM input i
    LEFT JOIN next USING (entity_key)
)
INSERT INTO outbox_events
    (id, event_type, event_version, payload, content_type, headers, correlation_id, causation_id, traceparent,
     entity_key, seq, payload_key_id)
SELECT id, event_type, event_version, payload, content_type, headers::jsonb, correlation_id, causation_id,
       traceparent, entity_key, CASE WHEN entity_key IS NULL THEN NULL ELSE seq END, payload_key_id
FROM numbered ORDER BY ord";

fn headers_json(headers: &Headers) -> String {
    // Headers hold only strings, integers and booleans after validation: always serializable.
    serde_json::to_string(headers).unwrap_or_else(|_| String::from("{}"))
}

fn version(event: &NewEvent) -> i64 {
    i64::from(event.event_version())
}

impl Outbox {
    /// An outbox with the default limits (1 MiB payloads, 16 KiB of extra headers).
    pub fn new() -> Self {
        crate::metrics::describe();
        Self::default()
    }

    /// Starts a builder.
    pub fn builder() -> OutboxBuilder {
        OutboxBuilder::default()
    }

    /// The payload as it is stored (sealed with the cipher, if there is one) and its key id.
    fn seal<'e>(&self, event: &'e NewEvent) -> Result<(Cow<'e, [u8]>, Option<String>)> {
        let plain = event.event_payload().bytes();
        match &self.cipher {
            None => Ok((Cow::Borrowed(plain), None)),
            Some(cipher) => {
                let (key_id, sealed) = cipher.seal(event.event_id(), plain)?;
                Ok((Cow::Owned(sealed), Some(key_id)))
            }
        }
    }

    /// The limits events are validated against.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Writes one event into the outbox within the transaction `conn` belongs to, and returns its id.
    ///
    /// The event is validated first; an invalid event returns [`Error::InvalidEvent`] without
    /// sending any SQL, so the caller's transaction stays usable. One round trip to the database.
    ///
    /// With an idempotency key ([`NewEvent::idempotency_key`]) the key is written in the same
    /// statement. If an event of the same type took the key within the window, nothing is written
    /// and the answer is [`Error::AlreadyEnqueued`] with that event's id; the transaction stays
    /// usable. If that event's transaction has not ended yet, this one waits for it (under READ
    /// COMMITTED; under REPEATABLE READ or SERIALIZABLE PostgreSQL answers with a serialization
    /// failure instead, and the transaction is retried as such transactions always are). Enqueue
    /// the keyed event first in the transaction: a retried request then stops before its business
    /// change, and a `?` rolls that change back.
    ///
    /// An event of an entity takes the entity's next sequence number: a second transaction
    /// enqueueing for the same entity waits until this one ends. Under REPEATABLE READ, a
    /// transaction whose snapshot is older than another's committed event of the entity fails with
    /// a unique violation on `outbox_events_entity_seq` (retry it, as such transactions are);
    /// SERIALIZABLE reports it as a serialization failure.
    ///
    /// # Errors
    /// [`Error::InvalidEvent`] for a rejected event, [`Error::AlreadyEnqueued`] for a key already
    /// taken, [`Error::Database`] if the insert fails.
    #[tracing::instrument(name = "outbox.enqueue", skip_all, fields(
        event_id = %event.event_id(),
        event_type = event.event_type(),
        entity = event.event_entity(),
        correlation_id = event.event_correlation_id(),
    ))]
    pub async fn enqueue(&self, conn: &mut PgConnection, event: NewEvent) -> Result<EventId> {
        event.validate(&self.limits)?;
        #[cfg(feature = "otel")]
        let event = crate::otel::with_current_trace(event);
        let id = event.event_id();
        let (payload, key_id) = self.seal(&event)?;
        let sql = match (event.event_entity(), event.event_idempotency_key()) {
            (Some(_), None) => INSERT_ORDERED,
            (None, None) => INSERT_UNORDERED,
            (Some(_), Some(_)) => KEYED_ORDERED,
            (None, Some(_)) => KEYED_UNORDERED,
        };
        let query = sqlx::query(sql)
            .persistent(self.persistent)
            .bind(id.as_uuid())
            .bind(event.event_type())
            .bind(version(&event))
            .bind(payload.as_ref())
            .bind(event.event_payload().content_type())
            .bind(headers_json(event.event_headers()))
            .bind(event.event_correlation_id())
            .bind(event.event_causation_id())
            .bind(event.event_traceparent());
        let query = match event.event_entity() {
            Some(key) => query.bind(key),
            None => query,
        };
        let query = match event.event_idempotency_key() {
            Some(key) => query.bind(key).bind(self.idempotency_window.as_secs_f64()),
            None => query,
        };
        let done = query.bind(key_id.as_deref()).execute(&mut *conn).await?;
        if done.rows_affected() == 0 {
            let key = event.event_idempotency_key().unwrap_or_default();
            let existing = idempotency::existing(conn, event.event_type(), key, self.persistent).await?;
            tracing::debug!(event_id = %existing, event_type = event.event_type(), "outbox.enqueue_already_enqueued");
            return Err(Error::AlreadyEnqueued { event_id: existing, index: None });
        }
        tracing::debug!(event_id = %id, event_type = event.event_type(), entity = event.event_entity(), "outbox.enqueue");
        metrics::counter!(crate::metrics::CREATED).increment(1);
        Ok(id)
    }

    /// Writes many events in one statement (one round trip) within the caller's transaction and
    /// returns their ids in the order given.
    ///
    /// Events of the same entity get consecutive sequence numbers in the order given. Every event
    /// is validated before anything is sent; if one is invalid, nothing is written.
    ///
    /// Idempotency keys work as in [`Outbox::enqueue`]: if any event's key is taken, nothing of the
    /// batch is written and the answer names the first such event. Two events of one batch may not
    /// share a type and a key.
    ///
    /// # Errors
    /// [`Error::InvalidBatchEvent`] naming the first rejected event, [`Error::AlreadyEnqueued`]
    /// naming the first event whose key was taken, [`Error::Database`] if the insert fails.
    #[tracing::instrument(name = "outbox.enqueue_many", skip_all)]
    pub async fn enqueue_many<I>(&self, conn: &mut PgConnection, events: I) -> Result<Vec<EventId>>
    where
        I: IntoIterator<Item = NewEvent>,
    {
        let events: Vec<NewEvent> = events.into_iter().collect();
        for (index, event) in events.iter().enumerate() {
            event.validate(&self.limits).map_err(|source| Error::InvalidBatchEvent { index, source })?;
        }
        idempotency::check_batch(&events)?;
        if events.is_empty() {
            return Ok(Vec::new());
        }
        #[cfg(feature = "otel")]
        let events = crate::otel::with_current_trace_all(events);
        let n = events.len();
        let mut ids = Vec::with_capacity(n);
        let mut types = Vec::with_capacity(n);
        let mut versions = Vec::with_capacity(n);
        let mut payloads = Vec::with_capacity(n);
        let mut content_types = Vec::with_capacity(n);
        let mut headers = Vec::with_capacity(n);
        let mut correlations = Vec::with_capacity(n);
        let mut causations = Vec::with_capacity(n);
        let mut traces = Vec::with_capacity(n);
        let mut entities = Vec::with_capacity(n);
        let mut key_ids = Vec::with_capacity(n);
        for event in &events {
            let (payload, key_id) = self.seal(event)?;
            payloads.push(payload);
            key_ids.push(key_id);
            ids.push(*event.event_id().as_uuid());
            types.push(event.event_type());
            versions.push(version(event));
            content_types.push(event.event_payload().content_type());
            headers.push(headers_json(event.event_headers()));
            correlations.push(event.event_correlation_id());
            causations.push(event.event_causation_id());
            traces.push(event.event_traceparent());
            entities.push(event.event_entity());
        }
        // Keys are taken once every payload is sealed: a batch refused before its insert holds no key.
        idempotency::take_batch_keys(conn, &events, self.idempotency_window, self.persistent).await?;
        let payloads: Vec<&[u8]> = payloads.iter().map(AsRef::as_ref).collect();
        let done = sqlx::query(INSERT_MANY)
            .persistent(self.persistent)
            .bind(&ids)
            .bind(&types)
            .bind(&versions)
            .bind(&payloads)
            .bind(&content_types)
            .bind(&headers)
            .bind(&correlations)
            .bind(&causations)
            .bind(&traces)
            .bind(&entities)
            .bind(&key_ids)
            .execute(&mut *conn)
            .await?;
        debug_assert_eq!(done.rows_affected(), n as u64);
        tracing::debug!(events = n, "outbox.enqueue_many");
        metrics::counter!(crate::metrics::CREATED).increment(n as u64);
        Ok(ids.into_iter().map(EventId::from_uuid).collect())
    }
}
