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
    /// A superblock that cannot be used: damaged where it may hold the
    /// newest table, inconsistent, or not fitting the device. Refused,
    /// never reformatted unless the user wipes the device.
    #[error("cache device {device}: superblock unusable: {reason}; the device was not changed (force_format would erase it, write-back data included)")]
    Corrupt {
        /// The bdev's name.
        device: String,
        /// Why.
        reason: String,
    },
    /// A signature of something else (a filesystem, a partition table,
    /// LVM, Ceph BlueStore) is on the device: formatting would destroy it.
    #[error("cache device {device} is not blank: libblkid found {} on it; refusing to format it. If its contents are to be destroyed, wipe it explicitly (CachePool device `wipe: true`, or bdev_adacache_create with force_format), which erases everything on it", signatures.join(", "))]
    NotBlank {
        /// The bdev's name.
        device: String,
        /// What libblkid found.
        signatures: Vec<String>,
    },
    /// The newest metadata of some units of a volume cannot be vouched for
    /// (a damaged copy that may be newer than every valid one): loading the
    /// volume could serve stale data, so it is refused.
    #[error("cache volume {volume} on cache device {device}: the newest metadata of unit(s) {units:?} is damaged; {dirty_bytes} dirty bytes in their older copies and any writes recorded since are at risk; the volume is not loaded (nothing was changed on the device)")]
    MetadataLost {
        /// The bdev's name.
        device: String,
        /// The volume.
        volume: String,
        /// Unit indices in the volume.
        units: Vec<u32>,
        /// Dirty bytes the surviving older copies record.
        dirty_bytes: u64,
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
