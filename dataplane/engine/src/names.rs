//! Policy names as written on the simulator's command line, in the
//! dataplane's `bdev_adacache_*` RPCs and in CachePool specs: `nhit:2`,
//! `tinylfu`, `lazy:2:1.0`, `write-back`, ...
//!
//! The grammar is the CRDs' too (their CEL rules in
//! api/v1alpha1/policy_types.go): whole numbers are 1 to 999999999
//! without a leading zero, K a plain positive decimal (`2`, `0.5`, `1.25`),
//! an eviction string at most 64 characters; test/testdata/policy-strings.tsv
//! holds the examples both sides are tested against.

use crate::{AdmissionConfig, EvictionConfig, FillSize, SizeAwareConfig, WriteMissFill, WriteMode};

/// A whole number as the grammar writes it: 1 to 9 digits, no leading 0.
fn count(s: &str) -> Option<u32> {
    let ok =
        (1..=9).contains(&s.len()) && !s.starts_with('0') && s.bytes().all(|b| b.is_ascii_digit());
    ok.then(|| s.parse().expect("at most 9 digits"))
}

/// A positive plain decimal: `0.` and a fraction that is not all zeros,
/// or digits without a leading 0 and an optional fraction.
fn positive_decimal(s: &str) -> Option<f64> {
    let (int, frac) = match s.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (s, None),
    };
    let digits = |d: &str| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit());
    let ok = digits(int)
        && frac.is_none_or(digits)
        && if int == "0" {
            frac.is_some_and(|f| f.bytes().any(|b| b != b'0'))
        } else {
            !int.starts_with('0')
        };
    ok.then(|| s.parse().expect("a plain decimal"))
}

/// The longest eviction string (the CRD's MaxLength).
const MAX_EVICTION_LEN: usize = 64;

/// Parses an admission policy: `always`, `nhit[:N]` (default N 2),
/// `tinylfu[:strict]` (`strict` rejects ties), `size-aware`.
pub fn parse_admission(s: &str) -> Result<AdmissionConfig, String> {
    let (name, arg) = split(s);
    match (name, arg) {
        ("always", None) => Ok(AdmissionConfig::Always),
        ("nhit", arg) => {
            let n = match arg {
                None => 2,
                Some(a) => count(a).ok_or_else(|| {
                    format!("admission '{s}': N must be a whole number from 1 to 999999999")
                })?,
            };
            Ok(AdmissionConfig::NHit {
                n,
                table_slots: 1 << 20,
            })
        }
        ("tinylfu", arg @ (None | Some("strict"))) => Ok(AdmissionConfig::TinyLfu {
            width: 1 << 20,
            sample_size: 10 << 20,
            admit_on_tie: arg.is_none(),
        }),
        ("size-aware", None) => Ok(AdmissionConfig::SizeAware(SizeAwareConfig::default())),
        _ => Err(format!(
            "unknown admission policy '{s}' (always, nhit[:N], tinylfu[:strict], size-aware)"
        )),
    }
}

/// Parses an eviction policy: `lru2` (two-level LRU), `lazy[:PARA[:K]]`
/// (LEA; defaults PARA 2, K 1), `s3fifo`, `sieve`, `arc`, `wtinylfu`, or
/// `auto[:P+P...]` (online choice among the listed policies, by default
/// S3-FIFO and the two-level LRU).
pub fn parse_eviction(s: &str) -> Result<EvictionConfig, String> {
    if s.len() > MAX_EVICTION_LEN {
        return Err(format!(
            "eviction policy of {} characters: at most {MAX_EVICTION_LEN}",
            s.len()
        ));
    }
    let mut parts = s.split(':');
    match parts.next() {
        Some("lru2") if parts.next().is_none() => Ok(EvictionConfig::TwoLevelLru),
        Some("s3fifo") if parts.next().is_none() => Ok(EvictionConfig::S3Fifo),
        Some("sieve") if parts.next().is_none() => Ok(EvictionConfig::Sieve),
        Some("arc") if parts.next().is_none() => Ok(EvictionConfig::Arc),
        Some("wtinylfu") if parts.next().is_none() => Ok(EvictionConfig::WTinyLfu),
        Some("auto") => {
            let Some(list) = parts.next() else {
                return Ok(EvictionConfig::auto());
            };
            let bad = || format!("eviction '{s}': expected auto[:POLICY+POLICY...] of lru2, s3fifo, sieve, arc, wtinylfu");
            if parts.next().is_some() {
                return Err(bad());
            }
            let candidates = list
                .split('+')
                .map(|p| match parse_eviction(p) {
                    Ok(EvictionConfig::Lazy { .. } | EvictionConfig::Auto { .. }) | Err(_) => Err(bad()),
                    Ok(c) => Ok(c),
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(EvictionConfig::Auto { candidates })
        }
        Some("lazy") => {
            let bad = || {
                format!("eviction '{s}': expected lazy[:PARA[:K]] with PARA a whole number from 1 to 999999999 and K a positive decimal such as 1 or 0.5")
            };
            let para = match parts.next() {
                None => 2,
                Some(p) => count(p).ok_or_else(bad)?,
            };
            let k = match parts.next() {
                None => 1.0,
                Some(k) => positive_decimal(k).ok_or_else(bad)?,
            };
            if parts.next().is_some() {
                return Err(bad());
            }
            Ok(EvictionConfig::Lazy { para, k })
        }
        _ => Err(format!(
            "unknown eviction policy '{s}' (auto[:P+P...], lru2, lazy[:PARA[:K]], s3fifo, sieve, arc, wtinylfu)"
        )),
    }
}

/// The name [`parse_eviction`] takes for `policy`, without parameters.
pub fn eviction_name(policy: &EvictionConfig) -> &'static str {
    match policy {
        EvictionConfig::TwoLevelLru => "lru2",
        EvictionConfig::Lazy { .. } => "lazy",
        EvictionConfig::S3Fifo => "s3fifo",
        EvictionConfig::Sieve => "sieve",
        EvictionConfig::Arc => "arc",
        EvictionConfig::WTinyLfu => "wtinylfu",
        EvictionConfig::Auto { .. } => "auto",
    }
}

/// Parses a write mode: `write-back`, `write-through`, `write-around`.
pub fn parse_write_mode(s: &str) -> Result<WriteMode, String> {
    match s {
        "write-back" => Ok(WriteMode::WriteBack),
        "write-through" => Ok(WriteMode::WriteThrough),
        "write-around" => Ok(WriteMode::WriteAround),
        _ => Err(format!(
            "unknown write mode '{s}' (write-back, write-through, write-around)"
        )),
    }
}

/// Parses how a miss picks its block size: `request` (AdaCache) or
/// `locality`.
pub fn parse_fill_size(s: &str) -> Result<FillSize, String> {
    match s {
        "request" => Ok(FillSize::Request),
        "locality" => Ok(FillSize::Locality),
        _ => Err(format!("unknown fill size '{s}' (request, locality)")),
    }
}

/// The name [`parse_fill_size`] reads.
pub fn fill_size_name(f: FillSize) -> &'static str {
    match f {
        FillSize::Request => "request",
        FillSize::Locality => "locality",
    }
}

/// Parses how partial write misses are filled: `whole-block` (AdaCache),
/// `head-tail`, `sparse`.
pub fn parse_write_miss_fill(s: &str) -> Result<WriteMissFill, String> {
    match s {
        "whole-block" => Ok(WriteMissFill::WholeBlock),
        "head-tail" => Ok(WriteMissFill::HeadTail),
        "sparse" => Ok(WriteMissFill::Sparse),
        _ => Err(format!(
            "unknown write-miss fill '{s}' (whole-block, head-tail, sparse)"
        )),
    }
}

fn split(s: &str) -> (&str, Option<&str>) {
    match s.split_once(':') {
        Some((a, b)) => (a, Some(b)),
        None => (s, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admission() {
        assert_eq!(parse_admission("always"), Ok(AdmissionConfig::Always));
        assert!(matches!(
            parse_admission("nhit"),
            Ok(AdmissionConfig::NHit { n: 2, .. })
        ));
        assert!(matches!(
            parse_admission("nhit:3"),
            Ok(AdmissionConfig::NHit { n: 3, .. })
        ));
        assert!(parse_admission("nhit:0")
            .unwrap_err()
            .contains("from 1 to 999999999"));
        assert!(matches!(
            parse_admission("tinylfu"),
            Ok(AdmissionConfig::TinyLfu {
                admit_on_tie: true,
                ..
            })
        ));
        assert!(matches!(
            parse_admission("tinylfu:strict"),
            Ok(AdmissionConfig::TinyLfu {
                admit_on_tie: false,
                ..
            })
        ));
        assert!(matches!(
            parse_admission("size-aware"),
            Ok(AdmissionConfig::SizeAware(_))
        ));
        assert!(parse_admission("lfu")
            .unwrap_err()
            .contains("unknown admission"));
        assert!(parse_admission("always:1").is_err());
    }

    #[test]
    fn eviction() {
        assert_eq!(parse_eviction("lru2"), Ok(EvictionConfig::TwoLevelLru));
        assert_eq!(
            parse_eviction("lazy"),
            Ok(EvictionConfig::Lazy { para: 2, k: 1.0 })
        );
        assert_eq!(
            parse_eviction("lazy:3:0.5"),
            Ok(EvictionConfig::Lazy { para: 3, k: 0.5 })
        );
        assert!(parse_eviction("lazy:0").is_err());
        assert!(parse_eviction("lazy:2:-1").is_err());
        assert!(parse_eviction("lazy:2:1:9").is_err());
        assert!(parse_eviction("lru2:1").is_err());
        assert_eq!(parse_eviction("arc"), Ok(EvictionConfig::Arc));
        assert_eq!(parse_eviction("s3fifo"), Ok(EvictionConfig::S3Fifo));
        assert_eq!(parse_eviction("sieve"), Ok(EvictionConfig::Sieve));
        assert_eq!(parse_eviction("wtinylfu"), Ok(EvictionConfig::WTinyLfu));
        assert!(parse_eviction("arc:1").is_err());
        assert_eq!(parse_eviction("auto"), Ok(EvictionConfig::auto()));
        assert_eq!(
            parse_eviction("auto:arc+lru2"),
            Ok(EvictionConfig::Auto {
                candidates: vec![EvictionConfig::Arc, EvictionConfig::TwoLevelLru]
            })
        );
        assert!(parse_eviction("auto:").is_err());
        assert!(parse_eviction("auto:lazy").is_err());
        assert!(parse_eviction("auto:arc+auto").is_err());
        assert!(parse_eviction("auto:arc:1").is_err());
        for name in ["auto", "lru2", "lazy", "s3fifo", "sieve", "arc", "wtinylfu"] {
            assert_eq!(eviction_name(&parse_eviction(name).unwrap()), name);
        }
        assert!(parse_eviction("lfu").is_err());
    }

    #[test]
    fn write_modes() {
        assert_eq!(parse_write_mode("write-back"), Ok(WriteMode::WriteBack));
        assert_eq!(parse_write_mode("write-around"), Ok(WriteMode::WriteAround));
        assert!(parse_write_mode("wb").is_err());
        assert_eq!(
            parse_write_miss_fill("head-tail"),
            Ok(WriteMissFill::HeadTail)
        );
        assert!(parse_write_miss_fill("none").is_err());
        for f in [FillSize::Request, FillSize::Locality] {
            assert_eq!(parse_fill_size(fill_size_name(f)), Ok(f));
        }
        assert!(parse_fill_size("large").is_err());
    }
}
