//! The shape of the producer and inbox parts: for each entity set (10 hot entities, 1,000
//! entities) one run free and one with the snapshot held, each in a fresh database, and the figures
//! of each set: both rates and their ratio.

use outbox_testkit::TestDb;

use super::hold::{Snapshot, in_fresh_db};
use crate::error::BoxError;
use crate::figure::{Value, comment, figure};
use crate::steal::Steal;

/// The entity sets, as figures name them: a few hot entities, and many.
const SETS: [(&str, u64); 2] = [("hot", 10), ("many", 1_000)];

/// Runs `run(db, entities, label)` for each set, free then held (the snapshot taken before `run`
/// starts, released after it ends), and prints `snapshot_<part>_<set>_free`, `..._held` (the rates
/// `run` returns, in `unit`) and `snapshot_<part>_<set>_ratio` (held ÷ free). `label` names the
/// run in `#` lines: `<part> <set> <free|held>`.
pub(super) async fn free_and_held(
    part: &str,
    unit: &str,
    run: impl AsyncFn(&TestDb, u64, &str) -> Result<f64, BoxError>,
) -> Result<(), BoxError> {
    for (set, entities) in SETS {
        let mut rates = Vec::with_capacity(2);
        for snapshot in Snapshot::BOTH {
            let label = format!("{part} {set} {}", snapshot.name());
            let steal = Steal::start();
            let rate = in_fresh_db(snapshot, &label, async |db| run(db, entities, &label).await).await?;
            comment(format_args!("{label}: {rate:.1} {unit} at the end, {} over the run", steal.describe()));
            rates.push(rate);
        }
        let (free, held) = (rates[0], rates[1]);
        figure(&format!("snapshot_{part}_{set}_free"), Value::Rate(free), unit);
        figure(&format!("snapshot_{part}_{set}_held"), Value::Rate(held), unit);
        figure(&format!("snapshot_{part}_{set}_ratio"), Value::Ratio(held / free), "x");
    }
    Ok(())
}
