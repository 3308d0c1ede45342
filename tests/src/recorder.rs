//! A metrics recorder that keeps every value in memory, for tests to read
//! back. One per process: tests run in parallel, so each filters by the
//! labels of its own group.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};

/// A metric's labels, by name.
pub type Labels = BTreeMap<String, String>;

type Series<T> = Mutex<BTreeMap<(String, Labels), Arc<T>>>;

/// Every metric registered in this process, with its current value.
#[derive(Default)]
pub struct Captured {
    counters: Series<CounterCell>,
    gauges: Series<GaugeCell>,
    histograms: Series<HistogramCell>,
    descriptions: Mutex<BTreeMap<String, (Option<Unit>, String)>>,
}

#[derive(Default)]
struct CounterCell(AtomicU64);

impl CounterFn for CounterCell {
    fn increment(&self, value: u64) {
        self.0.fetch_add(value, Ordering::Relaxed);
    }

    fn absolute(&self, value: u64) {
        self.0.fetch_max(value, Ordering::Relaxed);
    }
}

/// The gauge's value as the bits of an f64.
#[derive(Default)]
struct GaugeCell(AtomicU64);

impl GaugeCell {
    fn update(&self, change: impl Fn(f64) -> f64) {
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some(change(f64::from_bits(bits)).to_bits())
            });
    }

    fn get(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }
}

impl GaugeFn for GaugeCell {
    fn increment(&self, value: f64) {
        self.update(|v| v + value);
    }

    fn decrement(&self, value: f64) {
        self.update(|v| v - value);
    }

    fn set(&self, value: f64) {
        self.update(|_| value);
    }
}

#[derive(Default)]
struct HistogramCell(Mutex<Vec<f64>>);

impl HistogramFn for HistogramCell {
    fn record(&self, value: f64) {
        lock(&self.0).push(value);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A test that panicked while recording leaves the values usable.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn series_key(key: &Key) -> (String, Labels) {
    let labels = key
        .labels()
        .map(|l| (l.key().to_owned(), l.value().to_owned()))
        .collect();
    (key.name().to_owned(), labels)
}

fn cell<T: Default>(series: &Series<T>, key: &Key) -> Arc<T> {
    lock(series).entry(series_key(key)).or_default().clone()
}

/// The series named `name` whose labels include every pair of `filter`.
fn select<T, V>(
    series: &Series<T>,
    name: &str,
    filter: &[(&str, &str)],
    value: impl Fn(&T) -> V,
) -> Vec<(Labels, V)> {
    lock(series)
        .iter()
        .filter(|((n, labels), _)| {
            n == name
                && filter
                    .iter()
                    .all(|(k, v)| labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|((_, labels), cell)| (labels.clone(), value(cell)))
        .collect()
}

impl Captured {
    /// Counters named `name` with labels including `filter`.
    pub fn counters(&self, name: &str, filter: &[(&str, &str)]) -> Vec<(Labels, u64)> {
        select(&self.counters, name, filter, |c| {
            c.0.load(Ordering::Relaxed)
        })
    }

    /// The sum of the counters named `name` with labels including `filter`.
    pub fn counter_sum(&self, name: &str, filter: &[(&str, &str)]) -> u64 {
        self.counters(name, filter).iter().map(|(_, v)| v).sum()
    }

    /// Gauges named `name` with labels including `filter`.
    pub fn gauges(&self, name: &str, filter: &[(&str, &str)]) -> Vec<(Labels, f64)> {
        select(&self.gauges, name, filter, GaugeCell::get)
    }

    /// The sum of the gauges named `name` with labels including `filter`.
    pub fn gauge_sum(&self, name: &str, filter: &[(&str, &str)]) -> f64 {
        self.gauges(name, filter).iter().map(|(_, v)| v).sum()
    }

    /// Every sample of the histograms named `name` with labels including
    /// `filter`.
    pub fn samples(&self, name: &str, filter: &[(&str, &str)]) -> Vec<f64> {
        select(&self.histograms, name, filter, |h| lock(&h.0).clone())
            .into_iter()
            .flat_map(|(_, samples)| samples)
            .collect()
    }

    /// The unit and description `name` was described with.
    pub fn description(&self, name: &str) -> Option<(Option<Unit>, String)> {
        lock(&self.descriptions).get(name).cloned()
    }

    fn describe(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        lock(&self.descriptions).insert(
            key.into_inner().into_owned(),
            (unit, description.into_owned()),
        );
    }
}

impl Recorder for Captured {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.describe(key, unit, description);
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.describe(key, unit, description);
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.describe(key, unit, description);
    }

    fn register_counter(&self, key: &Key, _metadata: &Metadata<'_>) -> Counter {
        Counter::from_arc(cell(&self.counters, key))
    }

    fn register_gauge(&self, key: &Key, _metadata: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(cell(&self.gauges, key))
    }

    fn register_histogram(&self, key: &Key, _metadata: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(cell(&self.histograms, key))
    }
}

static CAPTURED: OnceLock<&'static Captured> = OnceLock::new();

/// The process's recorder, installed as the global one on first use
/// (before any member is built: handles registered earlier go nowhere).
pub fn installed() -> &'static Captured {
    CAPTURED.get_or_init(|| {
        let captured: &'static Captured = Box::leak(Box::default());
        if metrics::set_global_recorder(captured).is_err() {
            panic!("another metrics recorder is installed");
        }
        captured
    })
}
