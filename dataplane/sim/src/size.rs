//! Parsing sizes given on the command line: plain bytes, binary units
//! (`4KiB`, `256K`, `2GiB`) or a percentage of the trace's working set.

use std::fmt;

/// A cache size as the user wrote it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CacheSize {
    /// An absolute number of bytes.
    Bytes(u64),
    /// A percentage (0 < p <= 100) of the trace's working-set size.
    PercentOfWorkingSet(f64),
}

impl CacheSize {
    /// The size in bytes for a trace whose working set is `working_set` bytes.
    pub fn resolve(self, working_set: u64) -> u64 {
        match self {
            Self::Bytes(b) => b,
            Self::PercentOfWorkingSet(p) => ((working_set as f64) * p / 100.0) as u64,
        }
    }
}

impl CacheSize {
    /// The size as it is written on the command line (`10%`, `256MiB`),
    /// for JSON and table headings.
    pub fn short(self) -> String {
        match self {
            Self::Bytes(b) => format_bytes(b),
            Self::PercentOfWorkingSet(p) => format!("{p}%"),
        }
    }
}

impl fmt::Display for CacheSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Bytes(b) => write!(f, "{}", format_bytes(*b)),
            Self::PercentOfWorkingSet(p) => write!(f, "{p}% of the working set"),
        }
    }
}

/// One or more cache sizes (`--cache-size 1%,5%,10%`), in the order given.
/// A newtype because clap would take a bare `Vec` for a repeated option.
#[derive(Clone, Debug, PartialEq)]
pub struct CacheSizes(pub Vec<CacheSize>);

impl CacheSizes {
    /// The only size, for tools that simulate one cache at a time.
    pub fn single(&self) -> Result<CacheSize, String> {
        match self.0.as_slice() {
            [one] => Ok(*one),
            _ => Err(format!("give one --cache-size here, not {}", self.0.len())),
        }
    }
}

/// Parses a comma-separated list of cache sizes, each as
/// [`parse_cache_size`]; duplicates are dropped (they would only repeat a
/// run), the order is kept.
pub fn parse_cache_sizes(s: &str) -> Result<CacheSizes, String> {
    let mut v: Vec<CacheSize> = Vec::new();
    for part in s.split(',').filter(|p| !p.trim().is_empty()) {
        let size = parse_cache_size(part.trim())?;
        if !v.contains(&size) {
            v.push(size);
        }
    }
    if v.is_empty() {
        return Err("no cache size given".into());
    }
    Ok(CacheSizes(v))
}

/// Parses a byte count: digits with an optional binary unit (K, KiB, M, MiB,
/// G, GiB, T, TiB; case-insensitive; `B` alone means bytes).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        return Err(format!(
            "'{s}': expected a number, optionally with a unit like 256KiB"
        ));
    }
    let n: u64 = num
        .parse()
        .map_err(|_| format!("'{s}': number too large"))?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kib" | "kb" => 10,
        "m" | "mib" | "mb" => 20,
        "g" | "gib" | "gb" => 30,
        "t" | "tib" | "tb" => 40,
        other => {
            return Err(format!(
                "'{s}': unknown unit '{other}' (use K, M, G, T or KiB, MiB, ...)"
            ))
        }
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("'{s}': size too large"))
}

/// Parses a cache size: `10%` (of the working set) or a byte count.
pub fn parse_cache_size(s: &str) -> Result<CacheSize, String> {
    if let Some(p) = s.trim().strip_suffix('%') {
        let v: f64 = p
            .trim()
            .parse()
            .map_err(|_| format!("'{s}': expected a percentage like 10%"))?;
        if !(v > 0.0 && v <= 100.0) {
            return Err(format!(
                "'{s}': a percentage must be above 0 and at most 100"
            ));
        }
        return Ok(CacheSize::PercentOfWorkingSet(v));
    }
    let b = parse_bytes(s)?;
    if b == 0 {
        return Err(format!("'{s}': the cache size must be above 0"));
    }
    Ok(CacheSize::Bytes(b))
}

/// Parses a comma-separated list of block sizes, each a power of two from
/// 4 KiB to 1 MiB, returned sorted ascending without duplicates.
pub fn parse_block_sizes(s: &str) -> Result<Vec<u64>, String> {
    let mut v = Vec::new();
    for part in s.split(',').filter(|p| !p.trim().is_empty()) {
        let b = parse_bytes(part)?;
        if !b.is_power_of_two() || !(4096..=1 << 20).contains(&b) {
            return Err(format!(
                "block size '{}' must be a power of two from 4KiB to 1MiB",
                part.trim()
            ));
        }
        v.push(b);
    }
    if v.is_empty() {
        return Err("no block sizes given".into());
    }
    v.sort_unstable();
    v.dedup();
    Ok(v)
}

/// Formats bytes with a binary unit, e.g. `256KiB`, `1.5GiB`.
pub fn format_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i < UNITS.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if v.fract() == 0.0 {
        format!("{}{}", v as u64, UNITS[i])
    } else {
        format!("{v:.2}{}", UNITS[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_and_units() {
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("256K"), Ok(256 << 10));
        assert_eq!(parse_bytes("32KiB"), Ok(32 << 10));
        assert_eq!(parse_bytes("2gib"), Ok(2 << 30));
        assert!(parse_bytes("").is_err());
        assert!(parse_bytes("12Q").unwrap_err().contains("unknown unit"));
        assert!(parse_bytes("99999999999999T")
            .unwrap_err()
            .contains("too large"));
    }

    #[test]
    fn cache_sizes() {
        assert_eq!(
            parse_cache_size("10%"),
            Ok(CacheSize::PercentOfWorkingSet(10.0))
        );
        assert_eq!(parse_cache_size("1GiB"), Ok(CacheSize::Bytes(1 << 30)));
        assert!(parse_cache_size("0").is_err());
        assert!(parse_cache_size("150%").is_err());
        assert!(parse_cache_size("x%").is_err());
        assert_eq!(CacheSize::PercentOfWorkingSet(10.0).resolve(1000), 100);
    }

    #[test]
    fn cache_size_lists() {
        let l = parse_cache_sizes("1%, 5%,10%,5%,256MiB").unwrap();
        assert_eq!(
            l.0,
            [
                CacheSize::PercentOfWorkingSet(1.0),
                CacheSize::PercentOfWorkingSet(5.0),
                CacheSize::PercentOfWorkingSet(10.0),
                CacheSize::Bytes(256 << 20)
            ]
        );
        let shorts: Vec<String> = l.0.iter().map(|s| s.short()).collect();
        assert_eq!(shorts, ["1%", "5%", "10%", "256MiB"]);
        assert!(l.single().unwrap_err().contains("not 4"));
        assert_eq!(
            parse_cache_sizes("10%").unwrap().single(),
            Ok(CacheSize::PercentOfWorkingSet(10.0))
        );
        assert!(parse_cache_sizes("1%,0").is_err());
        assert!(parse_cache_sizes(",").is_err());
    }

    #[test]
    fn block_size_lists() {
        assert_eq!(
            parse_block_sizes("256K,32K,64K,128K,64K"),
            Ok(vec![32 << 10, 64 << 10, 128 << 10, 256 << 10])
        );
        assert!(parse_block_sizes("48K").is_err());
        assert!(parse_block_sizes("2M").is_err());
        assert!(parse_block_sizes("").is_err());
    }

    #[test]
    fn formatting() {
        assert_eq!(format_bytes(256 << 10), "256KiB");
        assert_eq!(format_bytes(1536 << 20), "1.50GiB");
        assert_eq!(format_bytes(17), "17B");
    }
}
