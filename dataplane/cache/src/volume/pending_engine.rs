//! Engine calls the volume needs that the engine does not offer yet
//! (being added on another branch); each refuses with a clear error.
//! Removed when the engine's versions land.

use engine::{CacheIo, Config, Engine, Evicted, Plan, WriteMode};

use super::VolumeError;

fn unsupported(what: &str) -> VolumeError {
    VolumeError::Busy(format!("{what} is not supported yet"))
}

pub(crate) fn set_write_mode(_e: &mut Engine, _m: WriteMode) -> Result<(), VolumeError> {
    Err(unsupported("changing the cache mode"))
}

pub(crate) fn set_policies(_e: &mut Engine, _c: Config) -> Result<(), VolumeError> {
    Err(unsupported("changing policies"))
}

pub(crate) fn resize(_e: &mut Engine, _c: u64, _ev: &mut Vec<Evicted>) -> Result<(), VolumeError> {
    Err(unsupported("resizing"))
}

pub(crate) fn has_cache_zeroes(_p: &Plan) -> bool {
    false
}

pub(crate) fn cache_zeroes(_p: &Plan) -> &'static [CacheIo] {
    &[]
}
