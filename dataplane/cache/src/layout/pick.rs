//! Which copy of a record to trust: the integrity rules of
//! `docs/cache-format.md` ("Integrity"), as pure functions.
//!
//! Two copies alternate; a write goes into the copy not holding the newest
//! version. The older copy may be used only when the newer one is provably
//! torn (every sector intact, a mix of two writes) or provably older (its
//! intact sectors all carry older seqs). Otherwise the newest version is
//! unknown, and whatever depends on it must not be served as if it were.

use super::frame::Unframed;
use super::DecodeError;

/// Versions 1 and 2 of every record hold its initial content (an empty
/// table at format, an empty unit when a volume is given it): losing them
/// loses nothing.
pub const INITIAL_SEQS: u64 = 2;

/// What kind of damage a copy shows (the `kind` label of
/// `rackcache_cache_metadata_errors_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Damage {
    /// A write interrupted by a crash: expected, recovered from.
    Torn,
    /// Sectors that fail their stamp: bit rot, a zeroed or foreign sector.
    Checksum,
    /// Intact sectors holding a record whose contents are impossible.
    Malformed,
}

impl Damage {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Damage::Torn => "torn",
            Damage::Checksum => "checksum",
            Damage::Malformed => "malformed",
        }
    }
}

/// One copy, read back and judged.
#[derive(Clone, Debug)]
pub enum Copy<T> {
    /// Whole and consistent.
    Valid {
        /// Its version.
        seq: u64,
        /// The record.
        value: T,
    },
    /// Not whole, or not consistent.
    Damaged {
        /// What kind.
        damage: Damage,
        /// The highest seq of an intact sector (None: none intact).
        newest: Option<u64>,
        /// What is wrong, for the log.
        reason: String,
    },
    /// A record of a format version this build does not read.
    OtherVersion(u32),
    /// Never written: every sector zero.
    Blank,
}

impl<T> Copy<T> {
    /// Judges a copy: `decode` reads the record bytes, giving its seq.
    pub fn judge(
        u: &Unframed,
        decode: impl FnOnce(&[u8]) -> Result<(u64, T), DecodeError>,
    ) -> Self {
        if u.all_zero() {
            return Copy::Blank;
        }
        let newest = u.newest_stamp();
        let damaged = |reason: String| {
            let damage = if u.all_intact() && u.sectors.len() > 1 && !uniform(u) {
                Damage::Torn
            } else {
                Damage::Checksum
            };
            Copy::Damaged {
                damage,
                newest,
                reason,
            }
        };
        match decode(&u.record) {
            Ok((seq, value)) if u.all_stamped(seq) => Copy::Valid { seq, value },
            Ok((seq, _)) => damaged(format!("record of seq {seq} not whole ({})", sectors(u))),
            Err(DecodeError::Version(v)) => Copy::OtherVersion(v),
            Err(DecodeError::Malformed(reason)) if uniform(u) && u.all_intact() => Copy::Damaged {
                damage: Damage::Malformed,
                newest,
                reason,
            },
            Err(e) => damaged(format!("{e} ({})", sectors(u))),
        }
    }

    /// The damage to report, if any.
    pub fn damage(&self) -> Option<Damage> {
        match self {
            Copy::Damaged { damage, .. } => Some(*damage),
            Copy::Blank | Copy::Valid { .. } | Copy::OtherVersion(_) => None,
        }
    }
}

/// Whether every intact sector carries the same seq.
fn uniform(u: &Unframed) -> bool {
    let mut seqs = u.sectors.iter().filter_map(|s| match s {
        super::frame::Sector::Stamped(q) => Some(*q),
        _ => None,
    });
    let first = seqs.next();
    seqs.all(|q| Some(q) == first)
}

fn sectors(u: &Unframed) -> String {
    let bad = u.damaged();
    if bad.is_empty() {
        "every sector intact, from two writes".into()
    } else {
        format!(
            "{} of {} sectors fail their stamp, first {}",
            bad.len(),
            u.sectors.len(),
            bad[0]
        )
    }
}

/// What to make of a record's two copies.
#[derive(Clone, Debug)]
pub enum Choice<T> {
    /// This copy holds the newest version.
    Use {
        /// 0 = A, 1 = B.
        copy: usize,
        /// Its version.
        seq: u64,
        /// The record.
        value: T,
    },
    /// Neither copy was ever written.
    Blank,
    /// Only initial content (seq 1 or 2) was ever written, and it is not
    /// whole: an interrupted format or emptying, or damage to it. Nothing
    /// is lost.
    Initial,
    /// The newest version cannot be vouched for: a copy is damaged that may
    /// hold a newer version than every valid one.
    Lost {
        /// The newest valid copy, older than what may have been lost.
        surviving: Option<(usize, u64, T)>,
    },
}

/// Applies the rules to two judged copies (a copy of another version is the
/// caller's to refuse before this).
pub fn choose<T>(copies: [Copy<T>; 2]) -> Choice<T> {
    let valid_seq = |c: &Copy<T>| match c {
        Copy::Valid { seq, .. } => Some(*seq),
        _ => None,
    };
    let best = (0..2)
        .filter(|&c| valid_seq(&copies[c]).is_some())
        .max_by_key(|&c| valid_seq(&copies[c]));
    let Some(best) = best else {
        return if copies.iter().all(|c| matches!(c, Copy::Blank)) {
            Choice::Blank
        } else if copies.iter().all(only_initial) {
            Choice::Initial
        } else {
            Choice::Lost { surviving: None }
        };
    };
    let seq = valid_seq(&copies[best]).expect("valid");
    let other = &copies[1 - best];
    let newer_possible = match other {
        Copy::Valid { .. } => false,
        Copy::Damaged {
            damage: Damage::Torn,
            ..
        } => false,
        Copy::Damaged {
            newest: Some(n), ..
        } => *n >= seq && *n > INITIAL_SEQS,
        Copy::Damaged { newest: None, .. } | Copy::Blank | Copy::OtherVersion(_) => true,
    };
    let [a, b] = copies;
    let Copy::Valid { value, .. } = (if best == 0 { a } else { b }) else {
        unreachable!("best is valid")
    };
    if newer_possible {
        Choice::Lost {
            surviving: Some((best, seq, value)),
        }
    } else {
        Choice::Use {
            copy: best,
            seq,
            value,
        }
    }
}

/// Whether a copy that is not valid shows only initial versions (or none).
fn only_initial<T>(c: &Copy<T>) -> bool {
    match c {
        Copy::Blank => true,
        Copy::Damaged {
            newest: Some(n), ..
        } => *n <= INITIAL_SEQS,
        Copy::Damaged { newest: None, .. } | Copy::Valid { .. } | Copy::OtherVersion(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid(seq: u64) -> Copy<u64> {
        Copy::Valid { seq, value: seq }
    }

    fn damaged(damage: Damage, newest: Option<u64>) -> Copy<u64> {
        Copy::Damaged {
            damage,
            newest,
            reason: String::new(),
        }
    }

    fn used(c: Choice<u64>) -> Option<u64> {
        match c {
            Choice::Use { value, .. } => Some(value),
            _ => None,
        }
    }

    #[test]
    fn the_newest_valid_copy_wins() {
        assert_eq!(used(choose([valid(4), valid(5)])), Some(5));
        assert_eq!(used(choose([valid(7), valid(6)])), Some(7));
    }

    #[test]
    fn a_torn_newer_copy_falls_back_silently() {
        assert_eq!(
            used(choose([valid(4), damaged(Damage::Torn, Some(5))])),
            Some(4)
        );
    }

    #[test]
    fn a_damaged_copy_that_is_provably_older_loses_nothing() {
        assert_eq!(
            used(choose([damaged(Damage::Checksum, Some(3)), valid(4)])),
            Some(4)
        );
        // Initial versions hold what version 1 holds.
        assert_eq!(
            used(choose([valid(1), damaged(Damage::Checksum, Some(2))])),
            Some(1)
        );
    }

    #[test]
    fn a_damaged_copy_that_may_be_newer_is_a_loss() {
        for other in [
            damaged(Damage::Checksum, Some(5)),
            damaged(Damage::Malformed, Some(5)),
            damaged(Damage::Checksum, None),
            Copy::Blank,
        ] {
            match choose([valid(4), other.clone()]) {
                Choice::Lost {
                    surviving: Some((0, 4, 4)),
                } => {}
                c => panic!("{other:?}: {c:?}"),
            }
        }
    }

    #[test]
    fn without_a_valid_copy() {
        assert!(matches!(
            choose::<u64>([Copy::Blank, Copy::Blank]),
            Choice::Blank
        ));
        let interrupted = [
            damaged(Damage::Checksum, Some(1)),
            damaged(Damage::Torn, Some(2)),
        ];
        assert!(matches!(choose(interrupted), Choice::Initial));
        let lost = [damaged(Damage::Checksum, Some(9)), Copy::Blank];
        assert!(matches!(choose(lost), Choice::Lost { surviving: None }));
        let unknown = [damaged(Damage::Checksum, None), Copy::Blank];
        assert!(matches!(choose(unknown), Choice::Lost { surviving: None }));
    }
}
