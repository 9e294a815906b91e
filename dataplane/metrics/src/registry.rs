//! Metric families and series on the `prometheus-client` crate, behind the
//! small API the bdev and NVMe-oF crates use: register a series by family
//! name and labels, get a handle that counts, remove a subject's series when
//! it goes away, render the OpenMetrics text.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64};
use std::sync::{Arc, Mutex};

use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge as PGauge;

use crate::counter::Counter;
use crate::histogram::Histogram;

/// Label pairs of one series, in registration order.
type Labels = Vec<(String, String)>;

/// A value that goes up and down (a handle on one series).
#[derive(Default, Debug)]
pub struct Gauge(PGauge<i64, AtomicI64>);

impl Gauge {
    /// Sets the value.
    pub fn set(&self, v: i64) {
        self.0.set(v);
    }
    /// Adds `d` (may be negative).
    pub fn add(&self, d: i64) {
        self.0.inc_by(d);
    }
    /// The current value.
    pub fn get(&self) -> i64 {
        self.0.get()
    }
}

/// A value that goes up and down and need not be whole (a ratio); a handle
/// on one series.
#[derive(Default, Debug)]
pub struct FloatGauge(PGauge<f64, AtomicU64>);

impl FloatGauge {
    /// Sets the value.
    pub fn set(&self, v: f64) {
        self.0.set(v);
    }
    /// The current value.
    pub fn get(&self) -> f64 {
        self.0.get()
    }
}

/// Makes the counter of a new series (the family's constructor).
#[derive(Clone, Copy)]
struct NewCounter;

impl MetricConstructor<Counter> for NewCounter {
    fn new_metric(&self) -> Counter {
        Counter::default()
    }
}

/// Makes the histogram of a new series (the family's constructor).
#[derive(Clone, Copy)]
struct NewHistogram;

impl MetricConstructor<Histogram> for NewHistogram {
    fn new_metric(&self) -> Histogram {
        Histogram::default()
    }
}

#[derive(Clone)]
enum Fam {
    Counter(Family<Labels, Counter, NewCounter>),
    Gauge(Family<Labels, PGauge<i64, AtomicI64>>),
    FloatGauge(Family<Labels, PGauge<f64, AtomicU64>>),
    Histogram(Family<Labels, Histogram, NewHistogram>),
}

#[derive(Clone)]
enum Series {
    Counter(Arc<Counter>),
    Gauge(Arc<Gauge>),
    FloatGauge(Arc<FloatGauge>),
    Histogram(Arc<Histogram>),
}

#[derive(Default)]
struct Inner {
    registry: prometheus_client::registry::Registry,
    families: HashMap<String, Fam>,
    // The handles given out, so registering a series twice returns the same
    // handle.
    series: HashMap<(String, Labels), Series>,
}

/// All metrics of a process.
#[derive(Default)]
pub struct Registry {
    inner: Mutex<Inner>,
}

/// Why a metric could not be registered.
#[derive(Debug, PartialEq, Eq)]
pub enum RegisterError {
    /// The name or a label name is not a valid Prometheus identifier (or
    /// a counter's name does not end in `_total`).
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

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Counter,
    Gauge,
    FloatGauge,
    Histogram,
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
        kind: Kind,
        labels: &[(&str, &str)],
    ) -> Result<Series, RegisterError> {
        if !valid_name(name) || (kind == Kind::Counter && !name.ends_with("_total")) {
            return Err(RegisterError::InvalidName(name.into()));
        }
        if let Some((l, _)) = labels
            .iter()
            .find(|(l, _)| !valid_name(l) || l.starts_with("__"))
        {
            return Err(RegisterError::InvalidName((*l).into()));
        }
        let labels: Labels = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let inner = &mut *inner;
        let fam = match inner.families.get(name) {
            Some(f) => f.clone(),
            None => {
                let f = match kind {
                    Kind::Counter => Fam::Counter(Family::new_with_constructor(NewCounter)),
                    Kind::Gauge => Fam::Gauge(Family::default()),
                    Kind::FloatGauge => Fam::FloatGauge(Family::default()),
                    Kind::Histogram => Fam::Histogram(Family::new_with_constructor(NewHistogram)),
                };
                // prometheus-client appends `_total` to counters itself.
                let exposed = match kind {
                    Kind::Counter => name.strip_suffix("_total").unwrap_or(name),
                    _ => name,
                };
                // ... and a full stop to the help text.
                let help = help.strip_suffix('.').unwrap_or(help);
                match &f {
                    Fam::Counter(c) => inner.registry.register(exposed, help, c.clone()),
                    Fam::Gauge(g) => inner.registry.register(exposed, help, g.clone()),
                    Fam::FloatGauge(g) => inner.registry.register(exposed, help, g.clone()),
                    Fam::Histogram(h) => inner.registry.register(exposed, help, h.clone()),
                }
                inner.families.insert(name.to_owned(), f.clone());
                f
            }
        };
        let key = (name.to_owned(), labels);
        if let Some(s) = inner.series.get(&key) {
            return match (s, kind) {
                (Series::Counter(_), Kind::Counter)
                | (Series::Gauge(_), Kind::Gauge)
                | (Series::FloatGauge(_), Kind::FloatGauge)
                | (Series::Histogram(_), Kind::Histogram) => Ok(s.clone()),
                _ => Err(RegisterError::TypeMismatch(name.into())),
            };
        }
        let s = match (&fam, kind) {
            (Fam::Counter(f), Kind::Counter) => {
                Series::Counter(Arc::new(f.get_or_create_owned(&key.1)))
            }
            (Fam::Gauge(f), Kind::Gauge) => {
                Series::Gauge(Arc::new(Gauge(f.get_or_create_owned(&key.1))))
            }
            (Fam::FloatGauge(f), Kind::FloatGauge) => {
                Series::FloatGauge(Arc::new(FloatGauge(f.get_or_create_owned(&key.1))))
            }
            (Fam::Histogram(f), Kind::Histogram) => {
                Series::Histogram(Arc::new(f.get_or_create_owned(&key.1)))
            }
            _ => return Err(RegisterError::TypeMismatch(name.into())),
        };
        inner.series.insert(key, s.clone());
        Ok(s)
    }

    /// A counter series (the name must end in `_total`).
    pub fn counter(
        &self,
        name: &str,
        help: &str,
        labels: &[(&str, &str)],
    ) -> Result<Arc<Counter>, RegisterError> {
        match self.register(name, help, Kind::Counter, labels)? {
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
        match self.register(name, help, Kind::Gauge, labels)? {
            Series::Gauge(g) => Ok(g),
            _ => Err(RegisterError::TypeMismatch(name.into())),
        }
    }

    /// A gauge series taking fractional values (ratios).
    pub fn float_gauge(
        &self,
        name: &str,
        help: &str,
        labels: &[(&str, &str)],
    ) -> Result<Arc<FloatGauge>, RegisterError> {
        match self.register(name, help, Kind::FloatGauge, labels)? {
            Series::FloatGauge(g) => Ok(g),
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
        match self.register(name, help, Kind::Histogram, labels)? {
            Series::Histogram(h) => Ok(h),
            _ => Err(RegisterError::TypeMismatch(name.into())),
        }
    }

    /// Removes the series with exactly these labels from a family (when the
    /// bdev or subsystem they describe is deleted). Handles still held keep
    /// counting but are no longer exposed.
    pub fn remove(&self, name: &str, labels: &[(&str, &str)]) {
        let labels: Labels = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        match inner.families.get(name) {
            Some(Fam::Counter(f)) => f.remove(&labels),
            Some(Fam::Gauge(f)) => f.remove(&labels),
            Some(Fam::FloatGauge(f)) => f.remove(&labels),
            Some(Fam::Histogram(f)) => f.remove(&labels),
            None => false,
        };
        inner.series.remove(&(name.to_owned(), labels));
    }

    /// The OpenMetrics text exposition (served as
    /// [`crate::http::CONTENT_TYPE_OPENMETRICS`]).
    pub fn render(&self) -> String {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &inner.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_powers_of_two_microseconds() {
        let r = Registry::new();
        let h = r
            .histogram("lat_seconds", "Latency.", &[("bdev", "m")])
            .unwrap();
        h.observe_ns(500); // 1 µs bucket
        h.observe_ns(1_000); // 1 µs
        h.observe_ns(1_001); // 2 µs
        h.observe_ns(3_000); // 4 µs
        h.observe_ns(100_000_000_000); // beyond 8.4 s: +Inf
        assert_eq!(h.count(), 5);
        let text = r.render();
        for want in [
            "# HELP lat_seconds Latency.\n",
            "lat_seconds_bucket{le=\"0.000001\",bdev=\"m\"} 2\n",
            "lat_seconds_bucket{le=\"0.000002\",bdev=\"m\"} 3\n",
            "lat_seconds_bucket{le=\"0.000004\",bdev=\"m\"} 4\n",
            "lat_seconds_bucket{le=\"8.388608\",bdev=\"m\"} 4\n",
            "lat_seconds_bucket{le=\"+Inf\",bdev=\"m\"} 5\n",
            "lat_seconds_count{bdev=\"m\"} 5\n",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
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
            r.counter("1bad_total", "x", &[]),
            Err(RegisterError::InvalidName(_))
        ));
        assert!(matches!(
            r.counter("no_suffix", "x", &[]),
            Err(RegisterError::InvalidName(_))
        ));
        assert!(matches!(
            r.counter("ok_total", "x", &[("__x", "y")]),
            Err(RegisterError::InvalidName(_))
        ));
        r.gauge("g", "A gauge.", &[("q", "a\"b")]).unwrap().set(-3);
        r.float_gauge("ratio", "A ratio.", &[("bdev", "m")])
            .unwrap()
            .set(0.25);
        assert!(matches!(
            r.gauge("ratio", "x", &[("bdev", "m")]),
            Err(RegisterError::TypeMismatch(_))
        ));
        let text = r.render();
        assert!(
            text.contains("# TYPE rackcache_bdev_read_bytes counter\n"),
            "{text}"
        );
        assert!(
            text.contains("rackcache_bdev_read_bytes_total{bdev=\"Malloc0\"} 4097\n"),
            "{text}"
        );
        assert!(text.contains("g{q=\"a\\\"b\"} -3\n"), "{text}");
        assert!(text.contains("ratio{bdev=\"m\"} 0.25\n"), "{text}");
        r.remove("g", &[("q", "a\"b")]);
        assert!(!r.render().contains("g{q="));
        // A removed series registered again starts from zero.
        let g = r.gauge("g", "A gauge.", &[("q", "a\"b")]).unwrap();
        assert_eq!(g.get(), 0);
    }
}
