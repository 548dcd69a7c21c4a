//! The producer benchmark: what `Outbox::enqueue` adds to a business transaction.
//!
//! One fresh database, a business table `orders` of [`ORDERS`] rows, [`CLIENTS`] tokio tasks
//! each holding its own connection and running transactions back to back. Each transaction
//! picks a random order, so two clients rarely touch the same row. Variants:
//!
//! - `business`: `UPDATE orders ...` alone;
//! - `raw_insert`: the same plus a hand-written `INSERT` of an equivalent, unordered outbox row
//!   into a table like `outbox_events` without its trigger: the physical limit;
//! - `enqueue`: the same update plus `Outbox::enqueue` of one event with the entity key
//!   `order-<id>` (so a sequence number is assigned);
//! - `enqueue_unordered`: the same update plus `Outbox::enqueue` of one event without entity key;
//! - `enqueue_keyed`: as `enqueue`, the event with an idempotency key of its own (a fresh UUID, as
//!   a request id would be), so the key is written beside the event;
//! - `enqueue_sealed`: as `enqueue`, through an outbox that seals the payload (encryption at rest,
//!   the benchmark's key);
//! - `batch`: `Outbox::enqueue_many` of [`BATCH`] events per transaction, entity keys spread
//!   over the orders (no business update: this measures the outbox write path alone).
//!
//! - `enqueue` once more while a relay is registered as waiting for notifications, so that every
//!   commit notifies (`producer_enqueue_idle_relay_tps`, the low-load path).
//!
//! Every variant starts from the same table state (outbox tables truncated, `VACUUM ANALYZE`,
//! `CHECKPOINT`), warms up, then counts the transactions committed within a fixed window.

use std::time::Duration;

use outbox_producer::Outbox;
use outbox_testkit::TestDb;
use outbox_types::NewEvent;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgConnection, PgPool};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::db::with_db;
use crate::error::BoxError;
use crate::figure::{Value, comment, figure};
use crate::wait::{FLOOR, allow, join_tasks, secs, within};

/// Concurrent clients, each with a connection of its own.
const CLIENTS: usize = 8;
/// Rows of the business table; ids run from 1 to `ORDERS`.
const ORDERS: i64 = 10_000;
/// Events per transaction in the batch variant.
const BATCH: usize = 100;
/// The event type of every event written.
pub(crate) const EVENT_TYPE: &str = "order.updated";

/// The business table every variant updates.
const CREATE_ORDERS: &str = "\
CREATE TABLE orders (id bigint PRIMARY KEY, version bigint NOT NULL, updated_at timestamptz NOT NULL)";
const SEED_ORDERS: &str = "\
INSERT INTO orders (id, version, updated_at) SELECT g, 0, now() FROM generate_series(1, $1) AS g";

const UPDATE_ORDER: &str = "UPDATE orders SET version = version + 1, updated_at = now() WHERE id = $1";

/// The physical limit: a bare insert of the same row into a table with the same columns, defaults
/// and indexes as `outbox_events` but no trigger (so not even the commit-time wake-up check).
const CREATE_BARE: &str = "CREATE TABLE outbox_events_bare (LIKE outbox_events INCLUDING ALL)";
const RAW_INSERT: &str = "\
INSERT INTO outbox_events_bare (id, event_type, event_version, payload, content_type, headers, entity_key, seq)
VALUES ($1, $2, $3, $4, $5, '{}'::jsonb, NULL, NULL)";

/// A relay waiting for notifications, as a relay's presence session does it, so that every commit
/// notifies (the low-load path).
const LISTEN: &str = "SELECT outbox_relay_present('bench') AND outbox_relay_wait('bench', 86400000)";
/// The relay stops, and its wait hint with it (the variants after it run as under load).
const UNLISTEN: &str = "SELECT outbox_relay_leave('bench'), setval('outbox_relay_wait_hint', 0)";

const RESET: &str = "TRUNCATE outbox_events, outbox_events_bare, outbox_entity_sequences, outbox_idempotency_keys";
const VACUUM: &str =
    "VACUUM ANALYZE orders, outbox_events, outbox_events_bare, outbox_entity_sequences, outbox_idempotency_keys";

/// Durations of one benchmark run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    /// Transactions run before the measured window, per variant.
    warmup: Duration,
    /// The measured window, per variant.
    measure: Duration,
    /// How many interleaved rounds of raw insert, ordered and unordered enqueue are run.
    rounds: usize,
}

impl Plan {
    /// 7 rounds of 4 s per variant after 1 s of warm-up; with `quick`, 3 rounds of 1 s after 0.3 s.
    pub(crate) fn new(quick: bool) -> Self {
        if quick {
            Self { warmup: Duration::from_millis(300), measure: Duration::from_secs(1), rounds: 3 }
        } else {
            Self { warmup: Duration::from_secs(1), measure: Duration::from_secs(4), rounds: 7 }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    Business,
    RawInsert,
    Enqueue,
    EnqueueUnordered,
    EnqueueKeyed,
    EnqueueSealed,
    Batch,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Self::Business => "business",
            Self::RawInsert => "raw_insert",
            Self::Enqueue => "enqueue",
            Self::EnqueueUnordered => "enqueue_unordered",
            Self::EnqueueKeyed => "enqueue_keyed",
            Self::EnqueueSealed => "enqueue_sealed",
            Self::Batch => "batch",
        }
    }

    fn events_per_transaction(self) -> u64 {
        match self {
            Self::Business => 0,
            Self::RawInsert | Self::Enqueue | Self::EnqueueUnordered | Self::EnqueueKeyed | Self::EnqueueSealed => 1,
            Self::Batch => BATCH as u64,
        }
    }
}

/// Runs the producer benchmark in a fresh database and prints its figures.
pub(crate) async fn run(plan: Plan) -> Result<(), BoxError> {
    with_db(async |db| bench(db, plan).await).await
}

async fn bench(db: &TestDb, plan: Plan) -> Result<(), BoxError> {
    let admin = db.pool();
    let setup = async {
        sqlx::query(CREATE_ORDERS).execute(admin).await?;
        sqlx::query(SEED_ORDERS).bind(ORDERS).execute(admin).await?;
        sqlx::query(CREATE_BARE).execute(admin).await
    };
    within(format_args!("the business table of {ORDERS} orders"), FLOOR, setup).await?;
    let clients = PgPoolOptions::new()
        .max_connections(CLIENTS as u32)
        .min_connections(CLIENTS as u32)
        .connect_with(db.connect_options().clone())
        .await?;
    comment(format_args!(
        "producer: {CLIENTS} clients, {ORDERS} orders, payload {} bytes, {:?} warm-up + {:?} measured per variant",
        payload(ORDERS)?.len(),
        plan.warmup,
        plan.measure
    ));

    let outcome = variants(admin, &clients, plan).await;
    // Every client is done or aborted: their connections are back or closed.
    let _ = tokio::time::timeout(FLOOR, clients.close()).await;
    let Rates {
        business,
        raw,
        ordered,
        unordered,
        keyed,
        sealed,
        batch,
        ratio,
        ratio_unordered,
        ratio_keyed,
        ratio_sealed,
    } = outcome?;

    figure("producer_clients", Value::Count(CLIENTS as u64), "clients");
    figure("producer_business_tps", Value::Rate(business), "tps");
    figure("producer_raw_insert_tps", Value::Rate(raw), "tps");
    figure("producer_enqueue_tps", Value::Rate(ordered), "tps");
    figure("producer_enqueue_unordered_tps", Value::Rate(unordered), "tps");
    figure("producer_enqueue_keyed_tps", Value::Rate(keyed), "tps");
    figure("producer_enqueue_sealed_tps", Value::Rate(sealed), "tps");
    figure("producer_overhead_ratio", Value::Ratio(ratio), "x");
    figure("producer_overhead_unordered_ratio", Value::Ratio(ratio_unordered), "x");
    figure("producer_overhead_keyed_ratio", Value::Ratio(ratio_keyed), "x");
    figure("producer_overhead_sealed_ratio", Value::Ratio(ratio_sealed), "x");
    figure("producer_batch_events_per_s", Value::Rate(batch), "events/s");
    comment("target: producer_overhead_ratio <= 1.3, producer_overhead_unordered_ratio <= 1.1");
    Ok(())
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n == 0 {
        0.0
    } else if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// The rates of every variant (tps; the batch's in events/s) and the overhead ratios.
struct Rates {
    business: f64,
    raw: f64,
    ordered: f64,
    unordered: f64,
    keyed: f64,
    sealed: f64,
    batch: f64,
    ratio: f64,
    ratio_unordered: f64,
    ratio_keyed: f64,
    ratio_sealed: f64,
}

/// Runs every variant and returns their rates and the overhead ratios.
///
/// On this shared two-core machine a variant's rate drifts with whatever else runs, by 10 % and
/// more within a minute. So the five variants the ratios are made of run in interleaved rounds
/// (raw, ordered, unordered, keyed, sealed, raw, ...); each ratio is the median of the per-round ratios (both
/// sides of a ratio measured seconds apart), and each rate the median of its rounds.
async fn variants(admin: &PgPool, clients: &PgPool, plan: Plan) -> Result<Rates, BoxError> {
    let business = measure(admin, clients, plan, Variant::Business, 1).await?;
    let batch = measure(admin, clients, plan, Variant::Batch, 1).await?;
    // With a relay waiting for notifications every commit notifies, and notifying commits take a
    // server-wide lock in turn. Relays wait only when they are idle, i.e. at low load.
    let mut relay =
        within("a relay's presence session", FLOOR, PgConnection::connect_with(&admin.connect_options())).await?;
    let waits: bool =
        within("a relay waiting for notifications", FLOOR, sqlx::query_scalar(LISTEN).fetch_one(&mut relay)).await?;
    if !waits {
        return Err("the benchmark's relay session could not wait for notifications".into());
    }
    let notify = measure(admin, clients, plan, Variant::Enqueue, 1).await;
    within("the waiting relay withdrawn", FLOOR, sqlx::query(UNLISTEN).execute(&mut relay)).await?;
    figure("producer_enqueue_idle_relay_tps", Value::Rate(notify?), "tps");
    let (mut raw, mut ordered, mut unordered, mut keyed, mut sealed) = (vec![], vec![], vec![], vec![], vec![]);
    let (mut ratio, mut ratio_unordered, mut ratio_keyed, mut ratio_sealed) = (vec![], vec![], vec![], vec![]);
    for round in 1..=plan.rounds as u64 {
        let r = measure(admin, clients, plan, Variant::RawInsert, round).await?;
        let o = measure(admin, clients, plan, Variant::Enqueue, round).await?;
        let u = measure(admin, clients, plan, Variant::EnqueueUnordered, round).await?;
        let k = measure(admin, clients, plan, Variant::EnqueueKeyed, round).await?;
        let s = measure(admin, clients, plan, Variant::EnqueueSealed, round).await?;
        ratio_sealed.push(r / s);
        sealed.push(s);
        ratio.push(r / o);
        ratio_unordered.push(r / u);
        ratio_keyed.push(r / k);
        raw.push(r);
        ordered.push(o);
        unordered.push(u);
        keyed.push(k);
    }
    Ok(Rates {
        business,
        raw: median(raw),
        ordered: median(ordered),
        unordered: median(unordered),
        keyed: median(keyed),
        sealed: median(sealed),
        batch,
        ratio: median(ratio),
        ratio_unordered: median(ratio_unordered),
        ratio_keyed: median(ratio_keyed),
        ratio_sealed: median(ratio_sealed),
    })
}

/// Resets the tables, runs one variant with every client and returns its rate: transactions per
/// second, or events per second for the batch variant.
async fn measure(admin: &PgPool, clients: &PgPool, plan: Plan, variant: Variant, round: u64) -> Result<f64, BoxError> {
    reset(admin).await?;
    let start = Instant::now() + plan.warmup;
    let end = start + plan.measure;
    let outbox = match variant {
        Variant::EnqueueSealed => Outbox::builder().cipher(crate::sealed::cipher()).build(),
        _ => Outbox::new(),
    };
    let mut tasks = JoinSet::new();
    for client in 0..CLIENTS {
        let pool = clients.clone();
        let outbox = outbox.clone();
        let seed = round << 32 | (variant as u64) << 8 | client as u64;
        tasks.spawn(async move {
            let mut conn = pool.acquire().await?;
            let mut rng = SmallRng::seed_from_u64(seed);
            let mut committed = 0_u64;
            loop {
                transaction(&mut conn, &outbox, variant, client, &mut rng).await?;
                let now = Instant::now();
                if now >= end {
                    break;
                }
                if now >= start {
                    committed += 1;
                }
            }
            Ok::<u64, BoxError>(committed)
        });
    }
    let what = format!("{CLIENTS} clients to run {} transactions for {:?}", variant.name(), plan.warmup + plan.measure);
    let committed: u64 = join_tasks(what, allow(plan.warmup + plan.measure), tasks).await?.into_iter().sum();
    let secs = plan.measure.as_secs_f64();
    let tps = committed as f64 / secs;
    let events_per_s = (committed * variant.events_per_transaction()) as f64 / secs;
    comment(format_args!(
        "run {round} {}: {committed} transactions, {tps:.1} tps, {events_per_s:.1} events/s",
        variant.name(),
    ));
    Ok(match variant {
        Variant::Batch => events_per_s,
        _ => tps,
    })
}

/// Brings every variant to the same starting point: empty outbox tables, fresh statistics, no
/// dead rows, and a checkpoint so full-page writes weigh the same at every start.
/// Each statement may take [`FLOOR`].
async fn reset(admin: &PgPool) -> Result<(), BoxError> {
    within("the outbox tables truncated", FLOOR, sqlx::raw_sql(RESET).execute(admin)).await?;
    within("VACUUM ANALYZE of the tables", FLOOR, sqlx::raw_sql(VACUUM).execute(admin)).await?;
    match tokio::time::timeout(FLOOR, sqlx::raw_sql("CHECKPOINT").execute(admin)).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => comment(format_args!("CHECKPOINT skipped: {e}")),
        Err(_) => return Err(format!("waited {} for a CHECKPOINT, without an answer", secs(FLOOR)).into()),
    }
    Ok(())
}

/// One transaction of `variant`, committed.
async fn transaction(
    conn: &mut PgConnection,
    outbox: &Outbox,
    variant: Variant,
    client: usize,
    rng: &mut SmallRng,
) -> Result<(), BoxError> {
    let mut tx = conn.begin().await?;
    let order = rng.random_range(1..=ORDERS);
    match variant {
        Variant::Business => update(&mut tx, order).await?,
        Variant::RawInsert => {
            update(&mut tx, order).await?;
            sqlx::query(RAW_INSERT)
                .bind(uuid::Uuid::now_v7())
                .bind(EVENT_TYPE)
                .bind(1_i64)
                .bind(payload(order)?)
                .bind(outbox_types::CONTENT_TYPE_JSON)
                .execute(&mut *tx)
                .await?;
        }
        Variant::Enqueue => {
            update(&mut tx, order).await?;
            let event = event(order)?.entity(format!("order-{order}"));
            outbox.enqueue(&mut tx, event).await?;
        }
        Variant::EnqueueSealed => {
            update(&mut tx, order).await?;
            let event = event(order)?.entity(format!("order-{order}"));
            outbox.enqueue(&mut tx, event).await?;
        }
        Variant::EnqueueKeyed => {
            update(&mut tx, order).await?;
            let key = uuid::Uuid::now_v7().to_string();
            let event = event(order)?.entity(format!("order-{order}")).idempotency_key(key);
            outbox.enqueue(&mut tx, event).await?;
        }
        Variant::EnqueueUnordered => {
            update(&mut tx, order).await?;
            outbox.enqueue(&mut tx, event(order)?).await?;
        }
        Variant::Batch => {
            // Each client draws its keys from its own slice of the orders: with 100 keys per
            // transaction, shared keys would make clients queue on each other's counter rows.
            let slice = ORDERS / CLIENTS as i64;
            let first = client as i64 * slice + 1;
            let events = (0..BATCH)
                .map(|_| {
                    let order = rng.random_range(first..first + slice);
                    Ok(event(order)?.entity(format!("order-{order}")))
                })
                .collect::<Result<Vec<_>, BoxError>>()?;
            outbox.enqueue_many(&mut tx, events).await?;
        }
    }
    tx.commit().await?;
    Ok(())
}

async fn update(conn: &mut PgConnection, order: i64) -> Result<(), sqlx::Error> {
    sqlx::query(UPDATE_ORDER).bind(order).execute(conn).await?;
    Ok(())
}

/// Commits one event of order `order` (entity key `order-<order>`) through `outbox` in a
/// transaction of its own, as a workload writing one event per transaction does; returns its id.
pub(crate) async fn commit_one(conn: &mut PgConnection, outbox: &Outbox, order: i64) -> Result<uuid::Uuid, BoxError> {
    let mut tx = conn.begin().await?;
    let id = outbox.enqueue(&mut tx, event(order)?.entity(format!("order-{order}"))).await?;
    tx.commit().await?;
    Ok(*id.as_uuid())
}

/// Commits one event for each of `orders` through `outbox.enqueue_many` in one transaction.
pub(crate) async fn commit_several(conn: &mut PgConnection, outbox: &Outbox, orders: Vec<i64>) -> Result<(), BoxError> {
    let events = orders.into_iter().map(|order| Ok::<_, BoxError>(event(order)?.entity(format!("order-{order}"))));
    let events = events.collect::<Result<Vec<_>, _>>()?;
    let mut tx = conn.begin().await?;
    outbox.enqueue_many(&mut tx, events).await?;
    tx.commit().await?;
    Ok(())
}

/// The event every variant writes, with the same payload as the hand-written insert.
pub(crate) fn event(order: i64) -> Result<NewEvent, BoxError> {
    Ok(NewEvent::json(EVENT_TYPE, &payload_value(order))?)
}

/// The JSON payload of order `order`, serialized: about 300 bytes.
fn payload(order: i64) -> Result<Vec<u8>, serde_json::Error> {
    serde_json::to_vec(&payload_value(order))
}

fn payload_value(order: i64) -> serde_json::Value {
    serde_json::json!({
        "order_id": order,
        "customer_id": format!("cust-{:08}", order * 7 % 100_003),
        "status": "confirmed",
        "currency": "EUR",
        "total_cents": 12_990 + order % 1000,
        "items": [
            { "sku": "SKU-000123", "quantity": 2, "unit_price_cents": 4_995 },
            { "sku": "SKU-004567", "quantity": 1, "unit_price_cents": 3_000 },
        ],
        "shipping": { "method": "standard", "country": "DE", "postal_code": "10115" },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_is_about_300_bytes() {
        for order in [1, 42, ORDERS] {
            let len = payload(order).expect("json").len();
            assert!((280..=320).contains(&len), "payload of {len} bytes");
        }
    }
}
