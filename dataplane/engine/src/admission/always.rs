//! `always`: every miss is inserted (AdaCache's and most caches' default).

use super::{AdmissionCounters, AdmissionPolicy, Candidate};
use crate::plan::Op;

/// Admits every candidate.
#[derive(Clone, Debug, Default)]
pub struct Always {
    admitted: u64,
}

impl AdmissionPolicy for Always {
    fn name(&self) -> &'static str {
        "always"
    }

    fn on_request(&mut self, _op: Op, _offset: u64, _len: u64) {}

    fn admit(&mut self, _candidate: &Candidate, _victim: Option<u64>) -> bool {
        self.admitted += 1;
        true
    }

    fn metadata_bytes(&self) -> usize {
        0
    }

    fn counters(&self) -> AdmissionCounters {
        AdmissionCounters {
            admitted: self.admitted,
            ..AdmissionCounters::default()
        }
    }
}
