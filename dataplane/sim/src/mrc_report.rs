//! How `rackcache-sim --mrc` prints its curves: a table per curve, or JSON.

use serde::Serialize;

use crate::mrc::{VolumeCurve, SIZES_PERCENT};
use crate::size::format_bytes;

/// One printed point.
#[derive(Clone, Debug, Serialize)]
pub struct PointJson {
    /// Cache size in percent of the curve's working set.
    pub percent: f64,
    /// Cache size in bytes.
    pub cache_bytes: u64,
    /// SHARDS's miss ratio.
    pub miss_ratio: f64,
    /// The exact miss ratio, when computed.
    pub exact_miss_ratio: Option<f64>,
}

/// One curve as `--mrc --json` prints it.
#[derive(Clone, Debug, Serialize)]
pub struct CurveJson {
    /// The volume; `null` for all volumes together.
    pub volume: Option<u32>,
    /// Distinct 4 KiB blocks referenced, in bytes.
    pub working_set_bytes: u64,
    /// Block references.
    pub references: u64,
    /// Block references sampled.
    pub sampled_references: u64,
    /// The sampling rate at the end.
    pub rate: f64,
    /// Blocks tracked at the end.
    pub tracked_blocks: usize,
    /// Bytes of the sampler's state.
    pub memory_bytes: usize,
    /// Bytes of the exact sampler's state, when computed.
    pub exact_memory_bytes: Option<usize>,
    /// Mean absolute error against the exact curve, when computed.
    pub mean_absolute_error: Option<f64>,
    /// The curve at [`SIZES_PERCENT`] of the working set.
    pub points: Vec<PointJson>,
}

impl CurveJson {
    /// The printed form of `c`.
    pub fn new(c: &VolumeCurve) -> CurveJson {
        let points = SIZES_PERCENT
            .iter()
            .zip(c.sizes())
            .map(|(&percent, cache_bytes)| PointJson {
                percent,
                cache_bytes,
                miss_ratio: c.sampled.miss_ratio(cache_bytes),
                exact_miss_ratio: c.exact.as_ref().map(|e| e.miss_ratio(cache_bytes)),
            })
            .collect();
        CurveJson {
            volume: c.volume,
            working_set_bytes: c.working_set_bytes,
            references: c.sampled.references(),
            sampled_references: c.sampled_references,
            rate: c.rate,
            tracked_blocks: c.tracked_blocks,
            memory_bytes: c.memory_bytes,
            exact_memory_bytes: c.exact_memory_bytes,
            mean_absolute_error: c.mean_absolute_error(),
            points,
        }
    }
}

/// The text form: a heading line and a table per curve.
pub fn render_curves(curves: &[VolumeCurve]) -> String {
    let mut out = String::new();
    for c in curves {
        let j = CurveJson::new(c);
        out.push_str(&format!(
            "{}: working set {}, {} block references ({} sampled, final rate {}, \
             {} blocks tracked), sampler state {}\n",
            c.label(),
            format_bytes(j.working_set_bytes),
            j.references,
            j.sampled_references,
            format_rate(j.rate),
            j.tracked_blocks,
            format_bytes(j.memory_bytes as u64),
        ));
        let exact = c.exact.is_some();
        out.push_str(&format!(
            "  {:>6}  {:>10}  {:>8}{}\n",
            "% ws",
            "cache",
            "SHARDS",
            if exact { "     exact" } else { "" }
        ));
        for p in &j.points {
            out.push_str(&format!(
                "  {:>5}%  {:>10}  {:>8.4}",
                p.percent,
                format_bytes(p.cache_bytes),
                p.miss_ratio
            ));
            if let Some(e) = p.exact_miss_ratio {
                out.push_str(&format!("  {e:>8.4}"));
            }
            out.push('\n');
        }
        if let (Some(mae), Some(bytes)) = (j.mean_absolute_error, j.exact_memory_bytes) {
            out.push_str(&format!(
                "  mean absolute error {mae:.4} over {} sizes (exact sampler state {})\n",
                j.points.len(),
                format_bytes(bytes as u64)
            ));
        }
        out.push('\n');
    }
    out
}

/// `1`, `0.0551`, `1.2e-5`: four significant digits.
fn format_rate(r: f64) -> String {
    if r >= 1.0 {
        "1".into()
    } else if r >= 1e-3 {
        format!("{r:.4}")
    } else {
        format!("{r:.3e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::mrc::Shards;

    fn curve(exact: bool) -> VolumeCurve {
        let mut s = Shards::exact(4096);
        for _ in 0..2 {
            (0..100).for_each(|b| s.access(b));
        }
        VolumeCurve {
            volume: Some(0),
            working_set_bytes: 100 * 4096,
            sampled: s.curve(),
            rate: 1.0,
            sampled_references: 200,
            tracked_blocks: 100,
            memory_bytes: 1000,
            exact: exact.then(|| s.curve()),
            exact_memory_bytes: exact.then_some(1000),
        }
    }

    #[test]
    fn table_rows_per_size_and_error_with_the_exact_curve() {
        let t = render_curves(&[curve(true)]);
        let rows: Vec<&str> = t.lines().filter(|l| l.contains("%  ")).collect();
        assert_eq!(rows.len(), SIZES_PERCENT.len(), "{t}");
        // A cyclic scan of 100 blocks: all misses below 100%, half at 100%.
        assert!(rows[0].ends_with("1.0000    1.0000"), "{t}");
        assert!(rows.last().unwrap().ends_with("0.5000    0.5000"), "{t}");
        assert!(
            t.contains("mean absolute error 0.0000 over 18 sizes"),
            "{t}"
        );
        let t = render_curves(&[curve(false)]);
        assert!(!t.contains("exact"), "{t}");
    }

    #[test]
    fn rates_print_with_four_digits() {
        assert_eq!(format_rate(1.0), "1");
        assert_eq!(format_rate(0.05512), "0.0551");
        assert_eq!(format_rate(0.0000123), "1.230e-5");
    }
}
