//! A metrics recorder that keeps the library's counters and histogram samples, so a benchmark can
//! report how much work (claims, for example) a phase took and where its time went; gauges are
//! dropped.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use metrics::{Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit};

#[derive(Default)]
struct Counters {
    values: Mutex<HashMap<String, Arc<AtomicU64>>>,
    histograms: Mutex<HashMap<String, Arc<Samples>>>,
}

/// Every value a histogram recorded while sampling was on, since it was last taken.
#[derive(Default)]
struct Samples(Mutex<Vec<f64>>);

/// Whether histograms keep their values: only while a phase wants them, so that a long phase
/// after it neither grows the benchmark's memory nor pays for the lock.
static SAMPLING: AtomicBool = AtomicBool::new(false);

impl HistogramFn for Samples {
    fn record(&self, value: f64) {
        if SAMPLING.load(Ordering::Relaxed)
            && let Ok(mut v) = self.0.lock()
        {
            v.push(value);
        }
    }
}

/// Turns the keeping of histogram values on or off.
pub(crate) fn sample_histograms(on: bool) {
    SAMPLING.store(on, Ordering::Relaxed);
}

static COUNTERS: OnceLock<&'static Counters> = OnceLock::new();

/// Installs the recorder as the process's global one (once; later calls do nothing).
pub(crate) fn install() {
    COUNTERS.get_or_init(|| {
        let counters: &'static Counters = Box::leak(Box::default());
        // Fails only if another recorder was installed first; the counters then stay at zero.
        let _ = metrics::set_global_recorder(counters);
        counters
    });
}

/// The value of a counter, named `name{label="value",...}` (labels in the order they were given).
pub(crate) fn get(name: &str) -> u64 {
    COUNTERS
        .get()
        .and_then(|c| c.values.lock().ok().and_then(|v| v.get(name).map(|a| a.load(Ordering::Relaxed))))
        .unwrap_or(0)
}

/// Takes the values a histogram (named like a counter in [`get`]) recorded since the last take.
pub(crate) fn take_samples(name: &str) -> Vec<f64> {
    COUNTERS
        .get()
        .and_then(|c| c.histograms.lock().ok().and_then(|h| h.get(name).cloned()))
        .and_then(|s| s.0.lock().ok().map(|mut v| std::mem::take(&mut *v)))
        .unwrap_or_default()
}

fn key_name(key: &Key) -> String {
    let labels: Vec<String> = key.labels().map(|l| format!("{}=\"{}\"", l.key(), l.value())).collect();
    if labels.is_empty() { key.name().to_owned() } else { format!("{}{{{}}}", key.name(), labels.join(",")) }
}

impl Recorder for Counters {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let Ok(mut values) = self.values.lock() else {
            return Counter::noop();
        };
        Counter::from_arc(values.entry(key_name(key)).or_default().clone())
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let Ok(mut histograms) = self.histograms.lock() else {
            return Histogram::noop();
        };
        Histogram::from_arc(histograms.entry(key_name(key)).or_default().clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_each_labelled_counter_on_its_own() {
        install();
        metrics::counter!("bench_test_total", "found" => "rows").increment(2);
        metrics::counter!("bench_test_total", "found" => "rows").increment(1);
        metrics::counter!("bench_test_total", "found" => "none").increment(5);
        assert_eq!(get("bench_test_total{found=\"rows\"}"), 3);
        assert_eq!(get("bench_test_total{found=\"none\"}"), 5);
        assert_eq!(get("bench_test_total"), 0);
    }

    #[test]
    fn histogram_samples_are_kept_while_sampling_and_taken_once() {
        install();
        sample_histograms(true);
        metrics::histogram!("bench_test_seconds").record(0.5);
        metrics::histogram!("bench_test_seconds").record(1.5);
        sample_histograms(false);
        metrics::histogram!("bench_test_seconds").record(2.5);
        assert_eq!(take_samples("bench_test_seconds"), vec![0.5, 1.5]);
        assert!(take_samples("bench_test_seconds").is_empty());
    }
}
