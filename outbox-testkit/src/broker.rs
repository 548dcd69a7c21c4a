use std::sync::Mutex;

use lapin::options::{
    ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::FieldTable;
use lapin::{Channel, Connection, ConnectionProperties, ExchangeKind};

use crate::Result;

/// The AMQP URL: `OUTBOX_TEST_AMQP_URL`, `AMQP_URL`, or the local server.
pub fn amqp_url() -> String {
    std::env::var("OUTBOX_TEST_AMQP_URL")
        .or_else(|_| std::env::var("AMQP_URL"))
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned())
}

/// Exchanges and queues of one test on the real RabbitMQ, named with a random suffix and deleted
/// afterwards ([`TestBroker::close`], or `Drop` on a helper thread if the test panics).
///
/// ```no_run
/// use outbox_testkit::TestBroker;
///
/// # async fn demo() -> Result<(), outbox_testkit::Error> {
/// let broker = TestBroker::new().await?;
/// let exchange = broker.declare_exchange("orders", lapin::ExchangeKind::Topic).await?;
/// let queue = broker.declare_queue("shipping").await?;
/// broker.bind(&queue, &exchange, "#").await?;
/// // ... publish to `exchange`, read `queue` ...
/// broker.close().await?;
/// # Ok(()) }
/// ```
pub struct TestBroker {
    url: String,
    suffix: String,
    connection: Connection,
    channel: Channel,
    exchanges: Mutex<Vec<String>>,
    queues: Mutex<Vec<String>>,
    closed: bool,
}

impl std::fmt::Debug for TestBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestBroker").field("suffix", &self.suffix).finish_non_exhaustive()
    }
}

impl TestBroker {
    /// Connects to the broker.
    ///
    /// # Errors
    /// If the broker cannot be reached.
    pub async fn new() -> Result<Self> {
        let url = amqp_url();
        let connection = Connection::connect(&url, ConnectionProperties::default()).await?;
        let channel = connection.create_channel().await?;
        Ok(Self {
            url,
            suffix: crate::unique_suffix(),
            connection,
            channel,
            exchanges: Mutex::new(Vec::new()),
            queues: Mutex::new(Vec::new()),
            closed: false,
        })
    }

    /// The broker URL (it may hold credentials: do not log it).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// `base` made unique to this test: `base.<random suffix>`.
    pub fn name(&self, base: &str) -> String {
        format!("{base}.{}", self.suffix)
    }

    /// A channel of the test's connection.
    pub fn channel(&self) -> &Channel {
        &self.channel
    }

    /// Declares a durable exchange named after `base`, deleted at the end.
    ///
    /// # Errors
    /// If the broker refuses.
    pub async fn declare_exchange(&self, base: &str, kind: ExchangeKind) -> Result<String> {
        let name = self.name(base);
        self.remember_exchange(&name);
        let options = ExchangeDeclareOptions { durable: true, ..ExchangeDeclareOptions::default() };
        self.channel.exchange_declare(name.as_str().into(), kind, options, FieldTable::default()).await?;
        Ok(name)
    }

    /// Declares a durable queue named after `base`, deleted at the end.
    ///
    /// # Errors
    /// If the broker refuses.
    pub async fn declare_queue(&self, base: &str) -> Result<String> {
        self.declare_queue_with(base, FieldTable::default()).await
    }

    /// Declares a durable queue named after `base` with arguments, deleted at the end.
    ///
    /// # Errors
    /// If the broker refuses.
    pub async fn declare_queue_with(&self, base: &str, arguments: FieldTable) -> Result<String> {
        let name = self.name(base);
        self.remember_queue(&name);
        let options = QueueDeclareOptions { durable: true, ..QueueDeclareOptions::default() };
        self.channel.queue_declare(name.as_str().into(), options, arguments).await?;
        Ok(name)
    }

    /// Binds `queue` to `exchange` with `routing_key`.
    ///
    /// # Errors
    /// If the broker refuses.
    pub async fn bind(&self, queue: &str, exchange: &str, routing_key: &str) -> Result<()> {
        self.channel
            .queue_bind(
                queue.into(),
                exchange.into(),
                routing_key.into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await?;
        Ok(())
    }

    /// Records a queue declared elsewhere (for example by the code under test) for deletion.
    pub fn remember_queue(&self, name: &str) {
        if let Ok(mut q) = self.queues.lock() {
            q.push(name.to_owned());
        }
    }

    /// A [`Topology`](outbox_amqp::Topology) of one queue bound with `#` whose names are made from
    /// `exchange` and `queue` like this broker's own, recorded for deletion with its dead letters:
    /// what the code under test declares (the relay's and the runner's `topology`).
    pub fn topology(&self, exchange: &str, queue: &str) -> outbox_amqp::Topology {
        let topology = outbox_amqp::Topology::queue(self.name(exchange), self.name(queue));
        self.remember_topology(&topology);
        topology
    }

    /// Records every exchange and queue of `topology` for deletion.
    pub fn remember_topology(&self, topology: &outbox_amqp::Topology) {
        for queue in topology.queues.iter().chain([&topology.dead_letter_queue]) {
            self.remember_queue(queue);
        }
        self.remember_exchange(&topology.exchange);
        self.remember_exchange(&topology.dead_letter_exchange);
    }

    /// Records an exchange declared elsewhere for deletion.
    pub fn remember_exchange(&self, name: &str) {
        if let Ok(mut e) = self.exchanges.lock() {
            e.push(name.to_owned());
        }
    }

    /// Deletes every recorded queue and exchange and closes the connection.
    ///
    /// # Errors
    /// If the broker cannot be reached.
    pub async fn close(mut self) -> Result<()> {
        let (queues, exchanges) = self.take_names();
        self.closed = true;
        delete_all(&self.url, queues, exchanges).await?;
        outbox_amqp::close(&self.connection, &[&self.channel], "test done").await;
        Ok(())
    }

    fn take_names(&self) -> (Vec<String>, Vec<String>) {
        let queues = self.queues.lock().map(|mut q| std::mem::take(&mut *q)).unwrap_or_default();
        let exchanges = self.exchanges.lock().map(|mut e| std::mem::take(&mut *e)).unwrap_or_default();
        (queues, exchanges)
    }
}

/// Deletes on a fresh connection, so that a test whose channel was closed by an error still cleans up.
async fn delete_all(url: &str, queues: Vec<String>, exchanges: Vec<String>) -> Result<()> {
    if queues.is_empty() && exchanges.is_empty() {
        return Ok(());
    }
    let connection = Connection::connect(url, ConnectionProperties::default()).await?;
    // One channel, replaced only when the broker closed it over a failed delete; closed (and the
    // close awaited) before the connection, or lapin logs a connection error for the dropped one.
    let mut channel = connection.create_channel().await?;
    for q in queues {
        if !channel.status().connected() {
            channel = connection.create_channel().await?;
        }
        let _ = channel.queue_delete(q.as_str().into(), QueueDeleteOptions::default()).await;
    }
    for e in exchanges {
        if !channel.status().connected() {
            channel = connection.create_channel().await?;
        }
        let _ = channel.exchange_delete(e.as_str().into(), ExchangeDeleteOptions::default()).await;
    }
    outbox_amqp::close(&connection, &[&channel], "test cleanup").await;
    Ok(())
}

impl Drop for TestBroker {
    fn drop(&mut self) {
        if self.closed {
            return;
        }
        let (queues, exchanges) = self.take_names();
        let url = self.url.clone();
        let handle = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build();
            if let Ok(rt) = rt
                && let Err(e) = rt.block_on(delete_all(&url, queues, exchanges))
            {
                tracing::warn!(error = %e, "could not delete the test's queues and exchanges");
            }
        });
        let _ = handle.join();
    }
}

impl TestBroker {
    /// Publishes events exactly as the relay would (wire contract v1, persistent, confirmed), to
    /// `exchange` with `routing_key`. For consumer tests that need precise control over what
    /// arrives, in which order and how many times.
    ///
    /// # Errors
    /// [`crate::Error::NotConfirmed`] naming the first event the broker did not confirm.
    pub async fn publish_events(
        &self,
        exchange: &str,
        routing_key: &str,
        events: &[outbox_types::Event],
    ) -> Result<()> {
        let routed: Vec<(String, outbox_types::Event)> =
            events.iter().map(|e| (routing_key.to_owned(), e.clone())).collect();
        self.publish_routed(exchange, &routed).await
    }

    /// Like [`TestBroker::publish_events`], each event with its own routing key, in the order given.
    ///
    /// # Errors
    /// [`crate::Error::NotConfirmed`] naming the first event the broker did not confirm.
    pub async fn publish_routed(&self, exchange: &str, events: &[(String, outbox_types::Event)]) -> Result<()> {
        use outbox_types::{OutgoingMessage, PublishOutcome, Publisher};
        let publisher = outbox_relayer::AmqpPublisher::builder(self.url.clone()).build_unchecked();
        for chunk in events.chunks(1000) {
            let batch = chunk
                .iter()
                .map(|(key, e)| OutgoingMessage {
                    event_id: e.id,
                    exchange: exchange.to_owned(),
                    routing_key: key.clone(),
                    message: outbox_types::wire::encode(e, Some("testkit")),
                })
                .collect();
            let confirms = publisher.publish(batch).await;
            for ((_, event), confirm) in chunk.iter().zip(confirms) {
                if confirm.await != PublishOutcome::Confirmed {
                    publisher.close().await;
                    return Err(crate::Error::NotConfirmed(event.id));
                }
            }
        }
        publisher.close().await;
        Ok(())
    }
}

/// Closes, from the broker's side, every open connection whose client-provided connection name
/// contains `name` (as an operator or a broker restart would), and returns how many it closed.
/// Uses `rabbitmqctl` on this machine; only the named connections are touched, so tests running in
/// parallel are not disturbed. Give the component under test a unique connection name.
///
/// # Errors
/// [`crate::Error::Io`] if `rabbitmqctl` cannot be run.
pub async fn close_connections_named(name: &str) -> Result<usize> {
    let out = tokio::process::Command::new("rabbitmqctl")
        .args(["list_connections", "pid", "client_properties", "-q"])
        .output()
        .await?;
    let listing = String::from_utf8_lossy(&out.stdout);
    let mut closed = 0;
    for line in listing.lines().filter(|l| l.contains(name)) {
        let Some(pid) = line.split_whitespace().next() else { continue };
        let status = tokio::process::Command::new("rabbitmqctl")
            .args(["close_connection", pid, "closed by the test"])
            .status()
            .await?;
        if status.success() {
            closed += 1;
        }
    }
    Ok(closed)
}
