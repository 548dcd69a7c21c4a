//! What a run was measured on: processors, memory, and the database server's durability and
//! autovacuum settings.

use sqlx::PgPool;

use crate::figure::comment;
use crate::process::status_kib;
use crate::wait::{FLOOR, within};

/// The PostgreSQL settings that decide commit cost, and whether autovacuum runs (without it no
/// table is vacuumed or analyzed unless a benchmark does it), in the order they are printed.
const SETTINGS: &str = "\
SELECT current_setting('server_version'), current_setting('fsync'), current_setting('synchronous_commit'),
       current_setting('shared_buffers'), current_setting('autovacuum')";

/// Prints the machine and the database server as `#` lines. What cannot be read (within
/// [`FLOOR`]) is said so.
pub(crate) async fn describe(pool: &PgPool) {
    let cpus = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let model = std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|info| cpu_model(&info).map(str::to_owned));
    let memory = std::fs::read_to_string("/proc/meminfo").ok().and_then(|info| status_kib(&info, "MemTotal"));
    comment(format_args!(
        "machine: {cpus} CPUs ({}), {} RAM, release build: {}",
        model.as_deref().unwrap_or("model unknown"),
        memory.map_or_else(|| "unknown".to_owned(), |kib| format!("{:.1} GiB", kib as f64 / (1024.0 * 1024.0))),
        !cfg!(debug_assertions),
    ));
    let settings = sqlx::query_as::<_, (String, String, String, String, String)>(SETTINGS).fetch_one(pool);
    match within("the database server's settings", FLOOR, settings).await {
        Ok((version, fsync, synchronous_commit, shared_buffers, autovacuum)) => comment(format_args!(
            "PostgreSQL {version}: fsync {fsync}, synchronous_commit {synchronous_commit}, \
             shared_buffers {shared_buffers}, autovacuum {autovacuum}"
        )),
        Err(e) => comment(format_args!("PostgreSQL settings unknown: {e}")),
    }
}

/// The first `model name` of a `/proc/cpuinfo` text.
fn cpu_model(cpuinfo: &str) -> Option<&str> {
    cpuinfo.lines().find_map(|l| {
        let (key, value) = l.split_once(':')?;
        (key.trim() == "model name").then(|| value.trim())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_model_is_the_first_model_name() {
        let info = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel\t\t: 106\nmodel name\t: Intel(R) Xeon(R) \
                    Processor\n\nprocessor\t: 1\nmodel name\t: other\n";
        assert_eq!(cpu_model(info), Some("Intel(R) Xeon(R) Processor"));
        assert_eq!(cpu_model("processor\t: 0\n"), None);
    }

    #[test]
    fn total_memory_is_read_in_kib() {
        assert_eq!(status_kib("MemTotal:       24683664 kB\nMemFree: 1 kB\n", "MemTotal"), Some(24_683_664));
    }
}
