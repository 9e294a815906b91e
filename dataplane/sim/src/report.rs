//! What one simulated cache configuration measured, and how the results are
//! printed: one table side by side (the paper's metrics as rows would not fit
//! a terminal, so configurations are rows), or JSON.

use serde::Serialize;

use crate::size::format_bytes;

/// The paper's metrics for one configuration over one trace.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Report {
    /// Configuration label, e.g. `fixed-32KiB` or `adaptive`.
    pub config: String,
    /// Cache bytes the engine used: the requested size rounded down to
    /// whole groups (`Engine::capacity()`).
    pub cache_bytes: u64,
    /// Requests replayed (reads, writes).
    pub reads: u64,
    /// Write requests replayed.
    pub writes: u64,
    /// 4 KiB block miss ratio over reads and writes: every request (after
    /// sector alignment) is split into 4 KiB blocks, and a block access
    /// misses when its bytes were not all served from the cache (reads) or
    /// did not all land on cached blocks (writes). It is the engine's miss
    /// bytes over request bytes: with 4 KiB sectors every cached extent is
    /// whole sectors, so both are multiples of 4096 and the ratio is one of
    /// block counts. With smaller sectors it is the same ratio by bytes.
    /// libCacheSim's miss ratio on the 4 KiB block stream
    /// (`--compare-peers`) is the same quantity.
    pub miss_ratio: f64,
    /// Read requests fully served from cache / read requests.
    pub read_hit_ratio: f64,
    /// Write requests that found all their blocks cached / write requests.
    pub write_hit_ratio: f64,
    /// Read bytes served from cache / read bytes.
    pub read_byte_hit_ratio: f64,
    /// Written bytes that landed on cached blocks / written bytes.
    pub write_byte_hit_ratio: f64,
    /// Bytes read from the core (backing) device.
    pub read_from_core: u64,
    /// Bytes written to the core device.
    pub write_to_core: u64,
    /// Bytes read from the cache device.
    pub read_from_cache: u64,
    /// Bytes written to the cache device.
    pub write_to_cache: u64,
    /// Metadata bytes, averaged over requests.
    pub metadata_avg: u64,
    /// Metadata bytes at the peak.
    pub metadata_peak: u64,
    /// Bytes of block, group and side-table metadata per cached block at the
    /// end (AdaCache assumes 40).
    pub metadata_per_block: f64,
    /// Blocks cached at the end.
    pub cached_blocks_end: u64,
    /// Dirty bytes left in the cache at the end (write-back).
    pub dirty_bytes_end: u64,
    /// Average length of requests that missed (fully or partly).
    pub avg_missed_request: f64,
    /// Average size of the cache blocks allocated on misses.
    pub avg_allocated_block: f64,
    /// Median planning time per request, nanoseconds.
    pub plan_ns_median: u64,
    /// 99th percentile planning time per request, nanoseconds.
    pub plan_ns_p99: u64,
    /// Mean planning time per request, nanoseconds.
    pub plan_ns_mean: f64,
    /// Fill sizing by locality at the end: the floor in use, its changes,
    /// and each candidate floor's shadow read hit ratio.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fill: Option<FillSummary>,
}

/// The end state of fill sizing by locality (`engine::FillReport`).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct FillSummary {
    /// The floor in use, bytes.
    pub floor: u32,
    /// Times it changed.
    pub switches: u64,
    /// Per candidate floor (bytes): its shadow's read hit ratio.
    pub shadows: Vec<(u32, f64)>,
}

impl FillSummary {
    /// `fill floor 4KiB after 2 switches; shadow read hits 4KiB 74.5%, ...`
    pub fn line(&self) -> String {
        let shadows: Vec<String> = self
            .shadows
            .iter()
            .map(|(s, h)| format!("{} {:.1}%", format_bytes(*s as u64), h * 100.0))
            .collect();
        format!(
            "fill floor {} after {} switch(es); shadow read hits {}",
            format_bytes(self.floor as u64),
            self.switches,
            shadows.join(", ")
        )
    }
}

impl Report {
    /// Bytes moved to and from the core device.
    pub fn core_traffic(&self) -> u64 {
        self.read_from_core + self.write_to_core
    }

    /// Bytes moved to and from the cache device.
    pub fn cache_traffic(&self) -> u64 {
        self.read_from_cache + self.write_to_cache
    }
}

/// Fixed-width text table, one row per configuration.
pub fn render_table(reports: &[Report]) -> String {
    let headers = [
        "config",
        "miss",
        "rd hit",
        "wr hit",
        "rd B hit",
        "wr B hit",
        "read core",
        "write core",
        "read cache",
        "write cache",
        "meta avg",
        "meta peak",
        "B/block",
        "avg miss",
        "avg block",
        "plan p50",
        "plan p99",
    ];
    let rows: Vec<Vec<String>> = reports
        .iter()
        .map(|r| {
            vec![
                r.config.clone(),
                pct(r.miss_ratio),
                pct(r.read_hit_ratio),
                pct(r.write_hit_ratio),
                pct(r.read_byte_hit_ratio),
                pct(r.write_byte_hit_ratio),
                format_bytes(r.read_from_core),
                format_bytes(r.write_to_core),
                format_bytes(r.read_from_cache),
                format_bytes(r.write_to_cache),
                format_bytes(r.metadata_avg),
                format_bytes(r.metadata_peak),
                format!("{:.1}", r.metadata_per_block),
                format_bytes(r.avg_missed_request as u64),
                format_bytes(r.avg_allocated_block as u64),
                format!("{}ns", r.plan_ns_median),
                format!("{}ns", r.plan_ns_p99),
            ]
        })
        .collect();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let mut out = String::new();
    let line = |cells: &[String], out: &mut String| {
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i == 0 {
                out.push_str(&format!("{cell:<w$}"));
            } else {
                out.push_str(&format!("  {cell:>w$}"));
            }
        }
        out.push('\n');
    };
    line(
        &headers.iter().map(|h| h.to_string()).collect::<Vec<_>>(),
        &mut out,
    );
    for row in &rows {
        line(row, &mut out);
    }
    out
}

pub(crate) fn pct(v: f64) -> String {
    format!("{:.2}%", v * 100.0)
}

/// Ratios of `candidate` against `baseline` for the headline comparisons
/// (core traffic, metadata), as printed under the table.
pub fn render_ratios(baseline: &Report, candidate: &Report) -> String {
    let ratio = |a: u64, b: u64| {
        if b == 0 {
            f64::NAN
        } else {
            a as f64 / b as f64
        }
    };
    format!(
        "{} vs {}: core traffic x{:.3}, cache traffic x{:.3}, metadata avg x{:.3}, plan p50 x{:.3}\n",
        candidate.config,
        baseline.config,
        ratio(candidate.core_traffic(), baseline.core_traffic()),
        ratio(candidate.cache_traffic(), baseline.cache_traffic()),
        ratio(candidate.metadata_avg, baseline.metadata_avg),
        ratio(candidate.plan_ns_median, baseline.plan_ns_median),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(name: &str, core: u64) -> Report {
        Report {
            config: name.into(),
            read_hit_ratio: 0.5,
            read_from_core: core,
            metadata_avg: 1000,
            plan_ns_median: 100,
            ..Report::default()
        }
    }

    #[test]
    fn table_has_a_row_per_config_and_aligned_columns() {
        let t = render_table(&[
            sample("fixed-32KiB", 1 << 20),
            sample("adaptive", 512 << 10),
        ]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("config"));
        assert!(lines[1].starts_with("fixed-32KiB"));
        assert!(lines[2].contains("512KiB"));
        assert!(lines[1].contains("50.00%"));
        assert_eq!(lines[1].len(), lines[2].len());
    }

    #[test]
    fn ratios() {
        let r = render_ratios(&sample("fixed", 1000), &sample("adaptive", 500));
        assert!(r.contains("core traffic x0.500"), "{r}");
        assert!(r.contains("metadata avg x1.000"), "{r}");
    }
}
