//! The RabbitMQ publisher: lapin, publisher confirms, `mandatory`, reconnection with backoff.

use std::sync::Arc;
use std::time::Duration;

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions};
use lapin::protocol::{AMQPErrorKind, AMQPHardError, AMQPSoftError};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Confirmation, Connection, ConnectionProperties};
use outbox_core::wire::WireMessage;
use outbox_core::{
    ConfirmFuture, ExchangeKind, FailureKind, HeaderValue, OutgoingMessage, PublishFailure, PublishOutcome, Publisher,
};
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::Error;

/// RabbitMQ's default `max_message_size` (128 MiB).
const DEFAULT_MAX_MESSAGE_BYTES: usize = 128 * 1024 * 1024;

/// Publishes to RabbitMQ with lapin: persistent messages, publisher confirms with the whole batch
/// in flight, and `mandatory` set, so an unroutable message comes back as a failure
/// ([`FailureKind::Rejected`]) instead of vanishing.
///
/// The connection is opened on first use and re-opened after any loss, with exponential backoff
/// (100 ms doubling to 5 s, a WARN line per failed attempt); while it has no connection, publishes
/// fail at once as [`FailureKind::Unavailable`], which the relay charges to no event: it pauses
/// until [`Publisher::connect`] succeeds. A confirm lost with the connection (dropped, reset, the
/// broker stopping) is `Unavailable` too.
/// The URL may hold credentials: it is never logged or shown in errors.
///
/// ```no_run
/// use outbox_relay::AmqpPublisher;
///
/// let publisher = AmqpPublisher::builder("amqp://guest:guest@127.0.0.1:5672/%2f")
///     .connection_name("orders-relay")
///     .build();
/// ```
#[derive(Clone)]
pub struct AmqpPublisher {
    inner: Arc<Inner>,
}

struct Inner {
    url: String,
    connection_name: String,
    connect_timeout: Duration,
    max_message_bytes: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    connection: Option<Connection>,
    channel: Option<Channel>,
    exchanges: Vec<(String, ExchangeKind)>,
    failures: u32,
    retry_at: Option<Instant>,
    last_failure: Option<PublishFailure>,
}

impl std::fmt::Debug for AmqpPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AmqpPublisher").field("connection_name", &self.inner.connection_name).finish_non_exhaustive()
    }
}

/// Builder of an [`AmqpPublisher`].
#[derive(Debug, Clone)]
pub struct AmqpPublisherBuilder {
    url: String,
    connection_name: String,
    connect_timeout: Duration,
    max_message_bytes: usize,
}

impl AmqpPublisherBuilder {
    /// Sets the connection name shown in RabbitMQ's management UI. Defaults to `outbox-relay`.
    #[must_use]
    pub fn connection_name(mut self, name: impl Into<String>) -> Self {
        self.connection_name = name.into();
        self
    }

    /// Sets how long one connection attempt may take. Defaults to 5 s.
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets the largest message body the broker accepts (its `max_message_size`); a larger event
    /// is rejected without being sent, and quarantined. Defaults to 128 MiB, RabbitMQ's default.
    #[must_use]
    pub fn max_message_bytes(mut self, bytes: usize) -> Self {
        self.max_message_bytes = bytes;
        self
    }

    /// Builds the publisher after checking the URL, so that a malformed one fails at once instead
    /// of on every connection attempt. It connects on first use (or on [`Publisher::connect`]).
    ///
    /// # Errors
    /// [`Error::InvalidAmqpUrl`] with a reason that does not quote the URL.
    pub fn try_build(self) -> Result<AmqpPublisher, Error> {
        check_url(&self.url).map_err(Error::InvalidAmqpUrl)?;
        Ok(self.build())
    }

    /// Builds the publisher. It connects on first use; a malformed URL shows as a failure to
    /// connect (see [`AmqpPublisherBuilder::try_build`] to refuse it at once).
    pub fn build(self) -> AmqpPublisher {
        AmqpPublisher {
            inner: Arc::new(Inner {
                url: self.url,
                connection_name: self.connection_name,
                connect_timeout: self.connect_timeout,
                max_message_bytes: self.max_message_bytes,
                state: Mutex::new(State::default()),
            }),
        }
    }
}

/// The wait before the next connection attempt after `failures` failed ones in a row: 100 ms,
/// doubling, at most 5 s.
fn reconnect_backoff(failures: u32) -> Duration {
    outbox_core::Backoff::new(Duration::from_millis(100), Duration::from_secs(5)).delay(failures)
}

/// Checks that `url` is an AMQP URL lapin can connect with. The reason never quotes the URL: it
/// may hold a password (lapin's own parse error does quote it).
pub(crate) fn check_url(url: &str) -> Result<(), String> {
    let scheme = url.split_once("://").map(|(scheme, _)| scheme);
    if !matches!(scheme, Some("amqp" | "amqps")) {
        return Err("expected amqp://user:password@host:port/vhost (or amqps://)".to_owned());
    }
    url.parse::<lapin::uri::AMQPUri>().map(drop).map_err(|e| {
        if e.contains(url) || url.split('@').next().is_some_and(|auth| e.contains(auth)) {
            "not a valid URL".to_owned()
        } else {
            e
        }
    })
}

fn ready(outcome: PublishOutcome) -> ConfirmFuture {
    Box::pin(std::future::ready(outcome))
}

fn failed_all(n: usize, failure: &PublishFailure) -> Vec<ConfirmFuture> {
    (0..n).map(|_| ready(PublishOutcome::Failed(failure.clone()))).collect()
}

/// Classifies a lapin error. Reply codes and texts come from the broker and never hold message
/// content; the URL is never part of a lapin error's text.
pub(crate) fn classify(error: &lapin::Error) -> PublishFailure {
    match error.kind() {
        lapin::ErrorKind::ProtocolError(amqp) => {
            let text = amqp.get_message().as_str();
            let kind = match amqp.kind() {
                AMQPErrorKind::Soft(AMQPSoftError::ACCESSREFUSED) => FailureKind::Auth,
                AMQPErrorKind::Soft(AMQPSoftError::CONTENTTOOLARGE) => FailureKind::Rejected,
                AMQPErrorKind::Soft(AMQPSoftError::PRECONDITIONFAILED) if text.contains("message size") => {
                    FailureKind::Rejected
                }
                AMQPErrorKind::Hard(AMQPHardError::NOTALLOWED) => FailureKind::Auth,
                _ => FailureKind::Transient,
            };
            PublishFailure::new(kind, format!("broker error {}: {text}", amqp.get_id()))
        }
        lapin::ErrorKind::AuthProviderError(_) => PublishFailure::new(FailureKind::Auth, "authentication failed"),
        // An I/O error's text names the cause (connection refused, name not resolved), never the URL.
        lapin::ErrorKind::IOError(e) => PublishFailure::new(FailureKind::Transient, format!("connection error: {e}")),
        _ => PublishFailure::new(FailureKind::Transient, format!("{error}")),
    }
}

fn connect_failure(error: &lapin::Error) -> PublishFailure {
    let mut failure = classify(error);
    // RabbitMQ closes the socket on bad credentials during the handshake (ACCESS_REFUSED, 403).
    if matches!(error.kind(), lapin::ErrorKind::ProtocolError(e) if e.get_id() == 403) {
        failure.kind = FailureKind::Auth;
    }
    failure.reason = format!("cannot connect to the broker: {}", failure.reason);
    failure
}

fn to_amqp(value: &HeaderValue) -> AMQPValue {
    match value {
        HeaderValue::Bool(b) => AMQPValue::Boolean(*b),
        HeaderValue::Int(i) => AMQPValue::LongLongInt(*i),
        HeaderValue::String(s) => AMQPValue::LongString(LongString::from(s.as_str())),
        HeaderValue::Float(f) => AMQPValue::Double(*f),
        HeaderValue::Bytes(b) => AMQPValue::ByteArray(b.clone().into()),
        HeaderValue::List(items) => AMQPValue::FieldArray(items.iter().map(to_amqp).collect::<Vec<_>>().into()),
        HeaderValue::Table(t) => AMQPValue::FieldTable(table(t)),
        _ => AMQPValue::Void,
    }
}

fn table(headers: &outbox_core::Headers) -> FieldTable {
    let mut t = FieldTable::default();
    for (k, v) in headers {
        t.insert(ShortString::from(k.as_str()), to_amqp(v));
    }
    t
}

/// Maps the neutral wire form onto lapin's properties.
pub(crate) fn properties(message: &WireMessage) -> BasicProperties {
    let p = &message.properties;
    let mut props = BasicProperties::default().with_headers(table(&message.headers));
    if let Some(v) = &p.message_id {
        props = props.with_message_id(v.as_str().into());
    }
    if let Some(v) = &p.kind {
        props = props.with_type(v.as_str().into());
    }
    if let Some(v) = &p.correlation_id {
        props = props.with_correlation_id(v.as_str().into());
    }
    if let Some(v) = p.timestamp {
        props = props.with_timestamp(v);
    }
    if let Some(v) = &p.content_type {
        props = props.with_content_type(v.as_str().into());
    }
    if let Some(v) = &p.app_id {
        props = props.with_app_id(v.as_str().into());
    }
    if let Some(v) = p.delivery_mode {
        props = props.with_delivery_mode(v);
    }
    props
}

fn lapin_kind(kind: ExchangeKind) -> lapin::ExchangeKind {
    match kind {
        ExchangeKind::Direct => lapin::ExchangeKind::Direct,
        ExchangeKind::Fanout => lapin::ExchangeKind::Fanout,
        ExchangeKind::Headers => lapin::ExchangeKind::Headers,
        _ => lapin::ExchangeKind::Topic,
    }
}

async fn declare(channel: &Channel, name: &str, kind: ExchangeKind) -> Result<(), lapin::Error> {
    let options = ExchangeDeclareOptions { durable: true, ..ExchangeDeclareOptions::default() };
    channel.exchange_declare(name.into(), lapin_kind(kind), options, FieldTable::default()).await
}

impl AmqpPublisher {
    /// Starts a builder for the broker at `url` (`amqp://` or `amqps://`).
    pub fn builder(url: impl Into<String>) -> AmqpPublisherBuilder {
        AmqpPublisherBuilder {
            url: url.into(),
            connection_name: "outbox-relay".to_owned(),
            connect_timeout: Duration::from_secs(5),
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
        }
    }

    /// Closes the connection (the next publish opens a new one).
    pub async fn close(&self) {
        let mut state = self.inner.state.lock().await;
        if let Some(ch) = state.channel.take()
            && ch.status().connected()
        {
            let _ = ch.close(200, "outbox relay closing".into()).await;
        }
        if let Some(conn) = state.connection.take() {
            let _ = conn.close(200, "outbox relay closing".into()).await;
        }
    }

    /// A live confirm channel, connecting if needed; or the failure that every message of the
    /// batch gets while the broker is unreachable.
    async fn channel(&self) -> Result<Channel, PublishFailure> {
        let mut state = self.inner.state.lock().await;
        if let Some(ch) = &state.channel
            && ch.status().connected()
        {
            return Ok(ch.clone());
        }
        state.channel = None;
        if let (Some(at), Some(f)) = (state.retry_at, &state.last_failure)
            && Instant::now() < at
        {
            return Err(f.clone());
        }
        match self.open(&mut state).await {
            Ok(ch) => {
                state.failures = 0;
                state.retry_at = None;
                state.last_failure = None;
                state.channel = Some(ch.clone());
                Ok(ch)
            }
            Err(failure) => {
                state.failures = state.failures.saturating_add(1);
                let backoff = reconnect_backoff(state.failures);
                state.retry_at = Some(Instant::now() + backoff);
                state.last_failure = Some(failure.clone());
                tracing::warn!(kind = %failure.kind, reason = %failure.reason, retry_in_ms = backoff.as_millis() as u64, "outbox.broker_unavailable");
                Err(failure)
            }
        }
    }

    async fn open(&self, state: &mut State) -> Result<Channel, PublishFailure> {
        check_url(&self.inner.url)
            .map_err(|why| PublishFailure::new(FailureKind::Transient, format!("invalid AMQP URL: {why}")))?;
        let connected = matches!(&state.connection, Some(c) if c.status().connected());
        if !connected {
            if let Some(old) = state.connection.take() {
                let _ = old.close(200, "reconnecting".into()).await;
            }
            let props =
                ConnectionProperties::default().with_connection_name(self.inner.connection_name.as_str().into());
            let conn = tokio::time::timeout(self.inner.connect_timeout, Connection::connect(&self.inner.url, props))
                .await
                .map_err(|_| PublishFailure::new(FailureKind::Transient, "cannot connect to the broker: timed out"))?
                .map_err(|e| connect_failure(&e))?;
            state.connection = Some(conn);
        }
        let conn =
            state.connection.as_ref().ok_or_else(|| PublishFailure::new(FailureKind::Transient, "no connection"))?;
        let channel = conn.create_channel().await.map_err(|e| classify(&e))?;
        channel.confirm_select(ConfirmSelectOptions::default()).await.map_err(|e| classify(&e))?;
        for (name, kind) in &state.exchanges {
            declare(&channel, name, *kind).await.map_err(|e| classify(&e))?;
        }
        Ok(channel)
    }

    async fn forget_channel(&self, broken: &Channel) {
        let mut state = self.inner.state.lock().await;
        if state.channel.as_ref().is_some_and(|c| c.id() == broken.id()) {
            state.channel = None;
        }
    }
}

/// The broker's size limit from its channel-close text ("message size N is larger than configured
/// max size M").
fn size_limit(reason: &str) -> Option<usize> {
    let rest = &reason[reason.find("max size")? + "max size".len()..];
    rest.split(|c: char| !c.is_ascii_digit()).find(|s| !s.is_empty())?.parse().ok()
}

/// When the broker closes the channel over one oversized message, every confirm pending on that
/// channel fails with the same error: only the message that is actually too large is rejected,
/// the others are merely unknown (transient).
fn blame(outcome: PublishOutcome, body_len: usize) -> PublishOutcome {
    match outcome {
        PublishOutcome::Failed(mut f) if f.kind == FailureKind::Rejected && f.reason.contains("message size") => {
            if size_limit(&f.reason).is_some_and(|max| body_len <= max) {
                f.kind = FailureKind::Transient;
                f.reason = format!("channel closed by another message's rejection ({})", f.reason);
            }
            PublishOutcome::Failed(f)
        }
        other => other,
    }
}

async fn confirm(pending: lapin::PublisherConfirm, body_len: usize, inner: Arc<Inner>) -> PublishOutcome {
    blame(confirm_outcome(pending, &inner).await, body_len)
}

async fn confirm_outcome(pending: lapin::PublisherConfirm, inner: &Inner) -> PublishOutcome {
    match pending.await {
        Ok(Confirmation::Ack(None)) => PublishOutcome::Confirmed,
        Ok(Confirmation::Ack(Some(returned))) => PublishOutcome::Failed(PublishFailure::new(
            FailureKind::Rejected,
            format!("returned by the broker: {} {}", returned.reply_code, returned.reply_text.as_str()),
        )),
        Ok(Confirmation::Nack(_)) => {
            PublishOutcome::Failed(PublishFailure::new(FailureKind::Transient, "nacked by the broker"))
        }
        Ok(Confirmation::NotRequested) => {
            PublishOutcome::Failed(PublishFailure::new(FailureKind::Transient, "publisher confirms are not enabled"))
        }
        Err(e) => PublishOutcome::Failed(inner.lost_or_classified(&e).await),
    }
}

impl Inner {
    /// A message not sent, or a confirm lost, because the connection is gone (dropped, reset,
    /// heartbeat missed) is not the message's failure: `unavailable`. A channel the broker closed
    /// while the connection stays up (over this message or another one) is classified as usual, so
    /// a message that makes the broker close the channel is charged and, in the end, quarantined.
    async fn lost_or_classified(&self, error: &lapin::Error) -> PublishFailure {
        let gone = match error.kind() {
            lapin::ErrorKind::IOError(_)
            | lapin::ErrorKind::InvalidConnectionState(_)
            | lapin::ErrorKind::MissingHeartbeatError
            | lapin::ErrorKind::RuntimeShutdownError(_) => true,
            lapin::ErrorKind::InvalidChannelState(..) => !self.connected().await,
            // The broker closing every connection as it stops or restarts.
            lapin::ErrorKind::ProtocolError(e) => {
                matches!(e.kind(), AMQPErrorKind::Hard(AMQPHardError::CONNECTIONFORCED))
            }
            _ => false,
        };
        let failure = classify(error);
        if gone {
            PublishFailure::new(FailureKind::Unavailable, format!("connection lost: {}", failure.reason))
        } else {
            failure
        }
    }

    async fn connected(&self) -> bool {
        self.state.lock().await.connection.as_ref().is_some_and(|c| c.status().connected())
    }
}

impl Publisher for AmqpPublisher {
    async fn publish(&self, batch: Vec<OutgoingMessage>) -> Vec<ConfirmFuture> {
        let channel = match self.channel().await {
            Ok(ch) => ch,
            // Nothing was sent: not the events' failure, whatever the cause of the connection's.
            Err(failure) => {
                return failed_all(batch.len(), &PublishFailure::new(FailureKind::Unavailable, failure.reason));
            }
        };
        let mut out: Vec<ConfirmFuture> = Vec::with_capacity(batch.len());
        let mut broken: Option<PublishFailure> = None;
        for msg in batch {
            if let Some(f) = &broken {
                out.push(ready(PublishOutcome::Failed(f.clone())));
                continue;
            }
            if msg.message.body.len() > self.inner.max_message_bytes {
                out.push(ready(PublishOutcome::Failed(PublishFailure::new(
                    FailureKind::Rejected,
                    format!(
                        "message is {} bytes, the broker accepts at most {}",
                        msg.message.body.len(),
                        self.inner.max_message_bytes
                    ),
                ))));
                continue;
            }
            let options = BasicPublishOptions { mandatory: true, ..BasicPublishOptions::default() };
            let props = properties(&msg.message);
            let body_len = msg.message.body.len();
            match channel
                .basic_publish(
                    msg.exchange.as_str().into(),
                    msg.routing_key.as_str().into(),
                    options,
                    &msg.message.body,
                    props,
                )
                .await
            {
                Ok(pending) => out.push(Box::pin(confirm(pending, body_len, self.inner.clone()))),
                Err(e) => {
                    let failure = match blame(PublishOutcome::Failed(self.inner.lost_or_classified(&e).await), body_len)
                    {
                        PublishOutcome::Failed(f) => f,
                        PublishOutcome::Confirmed => PublishFailure::new(FailureKind::Transient, "unknown"),
                    };
                    tracing::warn!(event_id = %msg.event_id, kind = %failure.kind, reason = %failure.reason, "outbox.publish_failed");
                    self.forget_channel(&channel).await;
                    out.push(ready(PublishOutcome::Failed(failure.clone())));
                    broken = Some(failure);
                }
            }
        }
        out
    }

    async fn declare_exchange(&self, exchange: &str, kind: ExchangeKind) -> Result<(), PublishFailure> {
        {
            let mut state = self.inner.state.lock().await;
            if !state.exchanges.iter().any(|(n, _)| n == exchange) {
                state.exchanges.push((exchange.to_owned(), kind));
            }
        }
        let channel = self.channel().await?;
        declare(&channel, exchange, kind).await.map_err(|e| classify(&e))
    }

    async fn connect(&self) -> Result<(), PublishFailure> {
        self.channel().await.map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_urls_are_refused_without_quoting_them() {
        assert_eq!(check_url("amqp://guest:guest@127.0.0.1:5672/%2f"), Ok(()));
        assert_eq!(check_url("amqps://u:p@broker.example/vhost"), Ok(()));
        for bad in
            ["amqp:guest:s3cret@127.0.0.1", "http://guest:s3cret@127.0.0.1", "amqp://guest:s3cret@127.0.0.1:abc/"]
        {
            let why = check_url(bad).expect_err(bad);
            assert!(!why.contains("s3cret"), "{why}");
        }
    }

    #[test]
    fn reconnect_backoff_starts_at_100_ms_and_stops_at_5_s() {
        let waits: Vec<u64> = (1..=9).map(|n| reconnect_backoff(n).as_millis() as u64).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000]);
    }

    #[test]
    fn only_the_oversized_message_is_blamed() {
        let reason = "broker error 406: PRECONDITION_FAILED - message size 135266512 is larger than configured max size 134217728";
        assert_eq!(size_limit(reason), Some(134_217_728));
        let failed = || PublishOutcome::Failed(PublishFailure::new(FailureKind::Rejected, reason));
        assert!(matches!(blame(failed(), 135_266_512), PublishOutcome::Failed(f) if f.kind == FailureKind::Rejected));
        assert!(matches!(blame(failed(), 300), PublishOutcome::Failed(f) if f.kind == FailureKind::Transient));
    }
}
