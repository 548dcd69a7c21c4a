//! `outbox cleanup`: old published outbox rows (and a consumer's old processed event ids) deleted
//! in bounded batches, each locking its rows with `SKIP LOCKED` (so relays running retention at
//! the same time share the work), with a progress bar on a terminal and plain progress lines
//! otherwise, and the rate at the end.

use std::time::{Duration, Instant};

use outbox_ops::Retention;
use sqlx::PgPool;

use crate::args::CleanupArgs;
use crate::error::CliError;
use crate::progress::Progress;

/// Old final outbox rows, counted through the index of final rows by time.
const OUTBOX_PRUNABLE: &str = "\
SELECT (SELECT count(*) FROM outbox_events
        WHERE status = 'published' AND published_at < now() - make_interval(secs => $1)),
       (SELECT count(*) FROM outbox_events
        WHERE status = 'skipped' AND quarantined_at < now() - make_interval(secs => $1))";

/// Published rows whose payload a scrub at this age (`$1` seconds) would clear, of those the
/// deletion at `$2` seconds leaves (the deletion runs first).
const SCRUBBABLE: &str = "\
SELECT count(*) FROM outbox_events
WHERE status = 'published' AND published_at < now() - make_interval(secs => $1)
  AND published_at >= now() - make_interval(secs => $2) AND payload_scrubbed_at IS NULL";

/// A pool over the database of `options` for `args`: it answers within `timeout` and holds the
/// outbox tables, and the inbox's too with `--inbox`.
///
/// # Errors
/// The connection's failure, or tables missing.
pub(crate) async fn open(
    options: sqlx::postgres::PgConnectOptions,
    timeout: Duration,
    args: &CleanupArgs,
) -> Result<PgPool, CliError> {
    let pool = crate::schema::outbox_pool(options, timeout).await?;
    if args.inbox.is_some() {
        let mut conn = pool.acquire().await?;
        crate::schema::check_inbox(&mut conn).await?;
    }
    Ok(pool)
}

/// Runs `outbox cleanup`.
///
/// # Errors
/// A database error; the batches before it stay deleted.
pub(crate) async fn run(pool: &PgPool, args: CleanupArgs) -> Result<(), CliError> {
    let summary = clean(pool, &args).await?;
    if args.json {
        println!("{summary}");
    }
    Ok(())
}

/// Cleans one database: prints the text lines (unless `--json`) and returns the summary `--json`
/// prints: with `--dry-run`, what would go (`outbox_rows`, `inbox_ids`, `payloads_to_scrub`); else
/// what went (`outbox`, `inbox`, `scrubbed_payloads`).
///
/// # Errors
/// A database error; the batches before it stay deleted.
pub(crate) async fn clean(pool: &PgPool, args: &CleanupArgs) -> Result<serde_json::Value, CliError> {
    let (published, skipped): (i64, i64) =
        sqlx::query_as(OUTBOX_PRUNABLE).bind(args.older_than.as_secs_f64()).fetch_one(pool).await?;
    let outbox_rows = published + if args.include_skipped { skipped } else { 0 };
    let scrubbable: Option<i64> = match args.scrub_payload_after {
        Some(age) => {
            let query = sqlx::query_scalar(SCRUBBABLE).bind(age.as_secs_f64()).bind(args.older_than.as_secs_f64());
            Some(query.fetch_one(pool).await?)
        }
        None => None,
    };
    let inbox = match (&args.inbox, args.dedup_window) {
        (Some(consumer), Some(window)) => {
            let n = outbox_inbox::retention::prunable(pool, consumer, window).await?;
            Some((consumer.clone(), window, n))
        }
        _ => None,
    };
    if args.dry_run {
        let inbox_rows = inbox.as_ref().map(|(_, _, n)| *n);
        if !args.json {
            if let Some(n) = scrubbable {
                println!("would scrub the payload of {n} published row(s)");
            }
            println!("would delete {outbox_rows} outbox row(s)");
            if let Some((consumer, _, n)) = &inbox {
                println!("would delete {n} processed event id(s) of {consumer}");
            }
        }
        return Ok(serde_json::json!({
            "dry_run": true, "outbox_rows": outbox_rows, "inbox_ids": inbox_rows, "payloads_to_scrub": scrubbable
        }));
    }
    let batch = i64::try_from(args.batch_size).unwrap_or(i64::MAX);
    let mut retention = Retention::builder(args.older_than).batch_size(batch).include_skipped(args.include_skipped);
    if let Some(age) = args.scrub_payload_after {
        retention = retention.scrub_payload_after(age);
    }
    let retention = retention.build()?;
    let outbox_done = report("outbox rows", outbox_rows, args.json, |p| outbox(pool, &retention, p)).await?;
    let scrubbed = match scrubbable {
        Some(n) => Some(scrub(pool, &retention, n, args.json).await?),
        None => None,
    };
    let mut inbox_done = None;
    if let Some((consumer, window, n)) = inbox {
        let what = format!("processed event ids of {consumer}");
        inbox_done = Some(report(&what, n, args.json, |p| inbox_ids(pool, &consumer, window, batch, p)).await?);
    }
    let json = |(n, secs): (u64, f64)| serde_json::json!({ "deleted": n, "seconds": secs, "rows_per_s": n as f64 / secs.max(1e-3) });
    Ok(serde_json::json!({ "outbox": json(outbox_done), "inbox": inbox_done.map(json), "scrubbed_payloads": scrubbed }))
}

/// Deletes with `delete`, showing progress against `expected`, then prints the count and rate
/// (unless the result goes out as JSON); returns the count and the seconds it took.
async fn report<F, Fut>(what: &str, expected: i64, json: bool, delete: F) -> Result<(u64, f64), CliError>
where
    F: FnOnce(Progress) -> Fut,
    Fut: Future<Output = Result<u64, CliError>>,
{
    let started = Instant::now();
    let progress = Progress::new(&format!("deleting {what}"), "deleted", what, u64::try_from(expected).unwrap_or(0));
    let deleted = delete(progress.clone()).await;
    progress.finish();
    let deleted = deleted?;
    let secs = started.elapsed().as_secs_f64();
    if !json {
        println!("deleted {deleted} {what} in {secs:.1} s ({:.0} rows/s)", deleted as f64 / secs.max(1e-3));
    }
    Ok((deleted, secs))
}

/// Clears the payloads retention's scrubbing age allows, batch after batch; prints how many.
async fn scrub(pool: &PgPool, retention: &Retention, expected: i64, json: bool) -> Result<u64, CliError> {
    let started = Instant::now();
    let progress = Progress::new("scrubbing payloads", "scrubbed", "payloads", u64::try_from(expected).unwrap_or(0));
    let mut total = 0;
    loop {
        let n = retention.scrub_batch(pool).await;
        let n = match n {
            Ok(n) => n,
            Err(e) => {
                progress.finish();
                return Err(e.into());
            }
        };
        total += n;
        progress.advance(n);
        if n == 0 {
            break;
        }
    }
    progress.finish();
    if !json {
        println!("scrubbed the payload of {total} published row(s) in {:.1} s", started.elapsed().as_secs_f64());
    }
    Ok(total)
}

async fn outbox(pool: &PgPool, retention: &Retention, progress: Progress) -> Result<u64, CliError> {
    let mut total = 0;
    loop {
        let n = retention.run_batch(pool).await?;
        total += n;
        progress.advance(n);
        if n == 0 {
            return Ok(total);
        }
    }
}

async fn inbox_ids(
    pool: &PgPool,
    consumer: &str,
    window: Duration,
    batch: i64,
    progress: Progress,
) -> Result<u64, CliError> {
    let mut total = 0;
    loop {
        let n = outbox_inbox::retention::prune(pool, consumer, window, batch).await?;
        total += n;
        progress.advance(n);
        if n == 0 {
            return Ok(total);
        }
    }
}
