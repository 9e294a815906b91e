//! The `--compare-peers` table of one cache size: the engine's
//! configurations, then libCacheSim's policies with the difference of each
//! to each of ours, then the best policy.

use serde::Serialize;

use super::PeerResult;
use crate::report::{pct, Report};
use crate::size::format_bytes;

/// libCacheSim's side of one cache size.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct PeerComparison {
    /// The libcachesim package's version.
    pub libcachesim: String,
    /// Our configuration whose capacity (`Engine::capacity()`) every policy
    /// was given.
    pub sized_like: String,
    /// That capacity in bytes.
    pub cache_bytes: u64,
    /// One result per policy, in [`super::POLICIES`] order.
    pub policies: Vec<PeerResult>,
    /// The policy with the lowest miss ratio (the first one listed on a
    /// tie).
    pub best: String,
}

impl PeerComparison {
    /// The results at `cache_bytes` out of a run over several sizes.
    pub fn new(
        libcachesim: &str,
        sized_like: &Report,
        results: &[PeerResult],
    ) -> Result<PeerComparison, String> {
        let cache_bytes = sized_like.cache_bytes;
        let policies: Vec<PeerResult> = results
            .iter()
            .filter(|r| r.cache_bytes == cache_bytes)
            .cloned()
            .collect();
        let best = policies
            .iter()
            .reduce(|a, b| if b.miss_ratio < a.miss_ratio { b } else { a })
            .ok_or_else(|| format!("libCacheSim returned nothing for {cache_bytes} bytes"))?
            .policy
            .clone();
        Ok(PeerComparison {
            libcachesim: libcachesim.to_string(),
            sized_like: sized_like.config.clone(),
            cache_bytes,
            policies,
            best,
        })
    }
}

/// The table: a row per configuration of ours and per policy, with the
/// cache each had and its block miss ratio; policies also get one column
/// per configuration of ours: policy minus ours, in percentage points
/// (positive: the policy misses more).
pub fn render_peer_table(ours: &[Report], peers: &PeerComparison) -> String {
    let mut header = vec![
        "simulator".to_string(),
        "policy".into(),
        "cache".into(),
        "miss ratio".into(),
    ];
    header.extend(ours.iter().map(|r| format!("vs {}", r.config)));
    let mut rows = vec![header];
    for r in ours {
        let mut row = vec![
            "rackcache".into(),
            r.config.clone(),
            format_bytes(r.cache_bytes),
            pct(r.miss_ratio),
        ];
        row.extend(ours.iter().map(|_| String::new()));
        rows.push(row);
    }
    for p in &peers.policies {
        let mut row = vec![
            "libCacheSim".into(),
            p.policy.clone(),
            format_bytes(p.cache_bytes),
            pct(p.miss_ratio),
        ];
        row.extend(ours.iter().map(|r| points(p.miss_ratio - r.miss_ratio)));
        rows.push(row);
    }
    let mut out = aligned(&rows);
    if let Some(best) = peers.policies.iter().find(|p| p.policy == peers.best) {
        let versus: Vec<String> = ours
            .iter()
            .map(|r| {
                let d = (r.miss_ratio - best.miss_ratio) * 100.0;
                match format!("{:.2}", d.abs()).as_str() {
                    "0.00" => format!("{} misses as often", r.config),
                    abs if d > 0.0 => format!("{} misses {abs} points more", r.config),
                    abs => format!("{} misses {abs} points less", r.config),
                }
            })
            .collect();
        out.push_str(&format!(
            "best peer: {} at {}; {}\n",
            best.policy,
            pct(best.miss_ratio),
            versus.join(", ")
        ));
    }
    out
}

/// A difference of ratios in percentage points, signed; one that rounds to
/// zero prints unsigned (not "-0.00").
fn points(d: f64) -> String {
    match format!("{:+.2}pp", d * 100.0) {
        z if z[1..] == *"0.00pp" => "0.00pp".into(),
        s => s,
    }
}

/// Left-aligned text columns (the first two), right-aligned figures.
fn aligned(rows: &[Vec<String>]) -> String {
    let mut widths = vec![0; rows[0].len()];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, (cell, w)) in row.iter().zip(&widths).enumerate() {
            match i {
                0 => line.push_str(&format!("{cell:<w$}")),
                1 => line.push_str(&format!("  {cell:<w$}")),
                _ => line.push_str(&format!("  {cell:>w$}")),
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ours(config: &str, miss: f64) -> Report {
        Report {
            config: config.into(),
            cache_bytes: 1 << 20,
            miss_ratio: miss,
            ..Report::default()
        }
    }

    fn peer(policy: &str, cache_bytes: u64, miss: f64) -> PeerResult {
        PeerResult {
            policy: policy.into(),
            cache_bytes,
            miss_ratio: miss,
        }
    }

    #[test]
    fn table_names_the_best_peer_and_the_differences() {
        let reports = [ours("fixed-4KiB", 0.5), ours("adaptive", 0.3)];
        let results = [
            peer("LRU", 1 << 20, 0.5),
            peer("S3FIFO", 1 << 20, 0.4),
            peer("Sieve", 1 << 20, 0.4),
            peer("LRU", 2 << 20, 0.1),
        ];
        let c = PeerComparison::new("0.3.5", &reports[0], &results).unwrap();
        assert_eq!(c.policies.len(), 3);
        assert_eq!(c.best, "S3FIFO");
        let t = render_peer_table(&reports, &c);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 7, "{t}");
        assert!(lines[0].contains("vs fixed-4KiB") && lines[0].contains("vs adaptive"));
        assert!(lines[1].starts_with("rackcache    fixed-4KiB"), "{t}");
        assert!(lines[3].contains("50.00%") && lines[3].contains(" 0.00pp"));
        assert_eq!(points(-0.00001), "0.00pp");
        assert_eq!(points(0.25), "+25.00pp");
        let s3fifo: Vec<&str> = lines[4].split_whitespace().collect();
        assert_eq!(
            s3fifo,
            [
                "libCacheSim",
                "S3FIFO",
                "1MiB",
                "40.00%",
                "-10.00pp",
                "+10.00pp"
            ]
        );
        assert_eq!(
            lines[6],
            "best peer: S3FIFO at 40.00%; fixed-4KiB misses 10.00 points more, adaptive misses 10.00 points less"
        );
        assert!(PeerComparison::new("0.3.5", &ours("x", 0.1), &[]).is_err());

        let c = PeerComparison::new("0.3.5", &reports[0], &results[..1]).unwrap();
        let t = render_peer_table(&reports[..1], &c);
        assert!(
            t.ends_with("best peer: LRU at 50.00%; fixed-4KiB misses as often\n"),
            "{t}"
        );
    }
}
