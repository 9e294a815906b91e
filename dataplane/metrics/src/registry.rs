//! Metric families, series and the Prometheus text format.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A monotonically increasing count.
#[derive(Default, Debug)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds `n`.
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    /// Adds 1.
    pub fn inc(&self) {
        self.add(1);
    }
    /// The current value.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A value that goes up and down.
#[derive(Default, Debug)]
pub struct Gauge(AtomicI64);

impl Gauge {
    /// Sets the value.
    pub fn set(&self, v: i64) {
        self.0.store(v, Ordering::Relaxed);
    }
    /// Adds `d` (may be negative).
    pub fn add(&self, d: i64) {
        self.0.fetch_add(d, Ordering::Relaxed);
    }
    /// The current value.
    pub fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Number of finite buckets: upper bounds 1, 2, 4, ... 2^23 µs (~8.4 s).
pub const BUCKETS: usize = 24;

/// A latency histogram with power-of-two microsecond buckets.
#[derive(Debug)]
pub struct Histogram {
    buckets: [AtomicU64; BUCKETS + 1],
    sum_ns: AtomicU64,
    count: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_ns: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }
}

impl Histogram {
    /// Records one observation of `ns` nanoseconds.
    pub fn observe_ns(&self, ns: u64) {
        let us = ns.div_ceil(1000);
        // Bucket i holds values <= 2^i µs: i = ceil(log2(us)).
        let idx = if us <= 1 {
            0
        } else {
            (64 - (us - 1).leading_zeros()) as usize
        };
        self.buckets[idx.min(BUCKETS)].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// Sum of all observations, nanoseconds.
    pub fn sum_ns(&self) -> u64 {
        self.sum_ns.load(Ordering::Relaxed)
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Upper bound in seconds of finite bucket `i`.
    fn bound_seconds(i: usize) -> f64 {
        (1u64 << i) as f64 / 1e6
    }
}

#[derive(Clone)]
enum Series {
    Counter(Arc<Counter>),
    Gauge(Arc<Gauge>),
    Histogram(Arc<Histogram>),
}

struct Family {
    name: String,
    help: String,
    kind: &'static str,
    series: Vec<(Vec<(String, String)>, Series)>,
}

/// All metrics of a process.
#[derive(Default)]
pub struct Registry {
    families: Mutex<Vec<Family>>,
}

/// Why a metric could not be registered.
#[derive(Debug, PartialEq, Eq)]
pub enum RegisterError {
    /// The name or a label name is not a valid Prometheus identifier.
    InvalidName(String),
    /// The name is registered with another type.
    TypeMismatch(String),
}

impl std::fmt::Display for RegisterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::InvalidName(n) => write!(f, "invalid metric or label name {n:?}"),
            Self::TypeMismatch(n) => write!(f, "metric {n} is registered with another type"),
        }
    }
}

impl std::error::Error for RegisterError {}

fn valid_name(n: &str) -> bool {
    let mut chars = n.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn register(
        &self,
        name: &str,
        help: &str,
        kind: &'static str,
        labels: &[(&str, &str)],
        make: impl FnOnce() -> Series,
    ) -> Result<Series, RegisterError> {
        if !valid_name(name) {
            return Err(RegisterError::InvalidName(name.into()));
        }
        if let Some((l, _)) = labels
            .iter()
            .find(|(l, _)| !valid_name(l) || l.starts_with("__"))
        {
            return Err(RegisterError::InvalidName((*l).into()));
        }
        let labels: Vec<(String, String)> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let mut fams = self.families.lock().unwrap_or_else(|p| p.into_inner());
        let fam = match fams.iter_mut().position(|f| f.name == name) {
            Some(i) => &mut fams[i],
            None => {
                fams.push(Family {
                    name: name.into(),
                    help: help.into(),
                    kind,
                    series: Vec::new(),
                });
                fams.last_mut().expect("just pushed")
            }
        };
        if fam.kind != kind {
            return Err(RegisterError::TypeMismatch(name.into()));
        }
        // Registering the same series twice returns the existing one.
        if let Some((_, s)) = fam.series.iter().find(|(l, _)| *l == labels) {
            return Ok(s.clone());
        }
        let s = make();
        fam.series.push((labels, s.clone()));
        Ok(s)
    }

    /// A counter series (name should end in `_total`).
    pub fn counter(
        &self,
        name: &str,
        help: &str,
        labels: &[(&str, &str)],
    ) -> Result<Arc<Counter>, RegisterError> {
        match self.register(name, help, "counter", labels, || {
            Series::Counter(Arc::default())
        })? {
            Series::Counter(c) => Ok(c),
            _ => Err(RegisterError::TypeMismatch(name.into())),
        }
    }

    /// A gauge series.
    pub fn gauge(
        &self,
        name: &str,
        help: &str,
        labels: &[(&str, &str)],
    ) -> Result<Arc<Gauge>, RegisterError> {
        match self.register(
            name,
            help,
            "gauge",
            labels,
            || Series::Gauge(Arc::default()),
        )? {
            Series::Gauge(g) => Ok(g),
            _ => Err(RegisterError::TypeMismatch(name.into())),
        }
    }

    /// A latency histogram series (name should end in `_seconds`).
    pub fn histogram(
        &self,
        name: &str,
        help: &str,
        labels: &[(&str, &str)],
    ) -> Result<Arc<Histogram>, RegisterError> {
        match self.register(name, help, "histogram", labels, || {
            Series::Histogram(Arc::default())
        })? {
            Series::Histogram(h) => Ok(h),
            _ => Err(RegisterError::TypeMismatch(name.into())),
        }
    }

    /// Removes every series with exactly these labels from a family (when the
    /// bdev or subsystem they describe is deleted).
    pub fn remove(&self, name: &str, labels: &[(&str, &str)]) {
        let mut fams = self.families.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = fams.iter_mut().find(|f| f.name == name) {
            f.series.retain(|(l, _)| {
                l.len() != labels.len()
                    || l.iter()
                        .zip(labels)
                        .any(|((k, v), (k2, v2))| k != k2 || v != v2)
            });
        }
    }

    /// The text exposition format, version 0.0.4.
    pub fn render(&self) -> String {
        let fams = self.families.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = String::new();
        for f in fams.iter().filter(|f| !f.series.is_empty()) {
            let _ = writeln!(out, "# HELP {} {}", f.name, escape_help(&f.help));
            let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind);
            for (labels, s) in &f.series {
                match s {
                    Series::Counter(c) => {
                        let _ = writeln!(out, "{}{} {}", f.name, label_set(labels, None), c.get());
                    }
                    Series::Gauge(g) => {
                        let _ = writeln!(out, "{}{} {}", f.name, label_set(labels, None), g.get());
                    }
                    Series::Histogram(h) => render_histogram(&mut out, &f.name, labels, h),
                }
            }
        }
        out
    }
}

fn render_histogram(out: &mut String, name: &str, labels: &[(String, String)], h: &Histogram) {
    let mut cumulative = 0u64;
    for i in 0..BUCKETS {
        cumulative += h.buckets[i].load(Ordering::Relaxed);
        let le = format!("{}", Histogram::bound_seconds(i));
        let _ = writeln!(
            out,
            "{name}_bucket{} {cumulative}",
            label_set(labels, Some(&le))
        );
    }
    cumulative += h.buckets[BUCKETS].load(Ordering::Relaxed);
    let _ = writeln!(
        out,
        "{name}_bucket{} {cumulative}",
        label_set(labels, Some("+Inf"))
    );
    let sum = h.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
    let _ = writeln!(out, "{name}_sum{} {sum}", label_set(labels, None));
    // The count is the +Inf bucket, so the two always agree in one scrape.
    let _ = writeln!(out, "{name}_count{} {cumulative}", label_set(labels, None));
}

fn escape_help(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n")
}

fn escape_value(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn label_set(labels: &[(String, String)], le: Option<&str>) -> String {
    if labels.is_empty() && le.is_none() {
        return String::new();
    }
    let mut parts: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape_value(v)))
        .collect();
    if let Some(le) = le {
        parts.push(format!("le=\"{le}\""));
    }
    format!("{{{}}}", parts.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_powers_of_two_microseconds() {
        let h = Histogram::default();
        h.observe_ns(500); // 1 µs bucket
        h.observe_ns(1_000); // 1 µs
        h.observe_ns(1_001); // 2 µs
        h.observe_ns(3_000); // 4 µs
        h.observe_ns(100_000_000_000); // beyond 8.4 s: +Inf
        let b: Vec<u64> = h
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        assert_eq!((b[0], b[1], b[2], b[BUCKETS]), (2, 1, 1, 1));
        assert_eq!(h.count(), 5);
    }

    #[test]
    fn render_and_validation() {
        let r = Registry::new();
        let c = r
            .counter(
                "rackcache_bdev_read_bytes_total",
                "Bytes read.",
                &[("bdev", "Malloc0")],
            )
            .unwrap();
        c.add(4096);
        let again = r
            .counter(
                "rackcache_bdev_read_bytes_total",
                "Bytes read.",
                &[("bdev", "Malloc0")],
            )
            .unwrap();
        again.add(1);
        assert_eq!(c.get(), 4097, "same series returned twice");
        assert!(matches!(
            r.gauge("rackcache_bdev_read_bytes_total", "x", &[]),
            Err(RegisterError::TypeMismatch(_))
        ));
        assert!(matches!(
            r.counter("1bad", "x", &[]),
            Err(RegisterError::InvalidName(_))
        ));
        assert!(matches!(
            r.counter("ok", "x", &[("__x", "y")]),
            Err(RegisterError::InvalidName(_))
        ));
        r.gauge("g", "A \"gauge\"\nwith lines", &[("q", "a\"b")])
            .unwrap()
            .set(-3);
        let text = r.render();
        assert!(text.contains("# TYPE rackcache_bdev_read_bytes_total counter\n"));
        assert!(text.contains("rackcache_bdev_read_bytes_total{bdev=\"Malloc0\"} 4097\n"));
        assert!(text.contains("# HELP g A \"gauge\"\\nwith lines\n"));
        assert!(text.contains("g{q=\"a\\\"b\"} -3\n"));
        r.remove("g", &[("q", "a\"b")]);
        assert!(!r.render().contains("# TYPE g"));
    }
}
