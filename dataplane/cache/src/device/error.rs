//! Errors of a cache device.

use bdev::BdevError;

use crate::layout::DecodeError;

/// What failed on a cache device, and why.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// An I/O on the device failed.
    #[error("cache device {device}: {what}: {source}")]
    Io {
        /// The bdev's name.
        device: String,
        /// What was being read or written.
        what: String,
        /// The bdev's error.
        source: BdevError,
    },
    /// No valid superblock copy, and formatting was not asked for.
    #[error("cache device {0} is not formatted (no valid superblock copy)")]
    Unformatted(String),
    /// A superblock of another format version: never reformatted.
    #[error("cache device {device}: {source}")]
    Version {
        /// The bdev's name.
        device: String,
        /// The version error.
        source: DecodeError,
    },
    /// A superblock with a valid checksum but inconsistent contents (or
    /// that does not fit the device): refused, never reformatted.
    #[error("cache device {device}: superblock unusable: {reason}")]
    Corrupt {
        /// The bdev's name.
        device: String,
        /// Why.
        reason: String,
    },
    /// The bdev cannot hold the format.
    #[error("cache device {device}: {reason}")]
    Unsuitable {
        /// The bdev's name.
        device: String,
        /// Why.
        reason: String,
    },
    /// A volume of that name is on the device already.
    #[error("cache volume {0} already exists on the device")]
    VolumeExists(String),
    /// No volume of that name.
    #[error("no cache volume {0} on the device")]
    NoSuchVolume(String),
    /// Too few free units.
    #[error("cache volume {name}: {wanted} more units needed, {free} free")]
    NoSpace {
        /// The volume.
        name: String,
        /// Units asked for.
        wanted: u32,
        /// Units free.
        free: u32,
    },
    /// Invalid volume parameters.
    #[error("cache volume {name}: {reason}")]
    InvalidSpec {
        /// The volume.
        name: String,
        /// Why.
        reason: String,
    },
    /// The volume table would not fit one superblock copy (too fragmented).
    #[error("the volume table would take {bytes} bytes, a superblock copy holds {max}")]
    TableFull {
        /// Bytes needed.
        bytes: usize,
        /// Bytes available.
        max: u64,
    },
    /// A unit index outside the volume, or a region no longer current.
    #[error("cache volume {name}: unit {index} is not the volume's (stale region or bad index)")]
    NotOwned {
        /// The volume.
        name: String,
        /// The unit index in the volume.
        index: u32,
    },
    /// Metadata that the volume cannot have.
    #[error("cache volume {name}: unit {index} metadata refused: {reason}")]
    InvalidMeta {
        /// The volume.
        name: String,
        /// The unit index in the volume.
        index: u32,
        /// Why.
        reason: String,
    },
    /// The operating system gave no random numbers.
    #[error("random number for {what}: {reason}")]
    Random {
        /// What it was for.
        what: &'static str,
        /// Why not.
        reason: String,
    },
}
