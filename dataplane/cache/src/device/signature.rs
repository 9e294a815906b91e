//! Before formatting: is the device blank? libblkid (util-linux's probing
//! library, the one `wipefs` and `blkid` use) looks for every filesystem,
//! RAID, LVM, Ceph BlueStore and partition-table signature it knows, on a
//! copy of the device's head and tail: any bdev kind can be probed, and a
//! signature found refuses the format.

use std::ffi::{c_char, c_int, CStr};
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::FileExt;

use bdev::{CountedBdev, DmaBuf};

use super::DeviceError;

/// Bytes of the device's start and end that are probed. Every signature
/// libblkid knows lies in the first 2 MiB or the last 1 MiB (GPT's backup
/// header, MD and ZFS labels at the end).
const HEAD: u64 = 2 << 20;
const TAIL: u64 = 1 << 20;

#[allow(non_camel_case_types)]
type blkid_probe = *mut std::ffi::c_void;

const BLKID_SUBLKS_TYPE: c_int = 1 << 5;
const BLKID_SUBLKS_MAGIC: c_int = 1 << 9;
const BLKID_SUBLKS_BADCSUM: c_int = 1 << 10;
const BLKID_PARTS_MAGIC: c_int = 1 << 3;

#[link(name = "blkid")]
unsafe extern "C" {
    fn blkid_new_probe() -> blkid_probe;
    fn blkid_free_probe(pr: blkid_probe);
    fn blkid_probe_set_device(pr: blkid_probe, fd: c_int, off: i64, size: i64) -> c_int;
    fn blkid_probe_enable_superblocks(pr: blkid_probe, enable: c_int) -> c_int;
    fn blkid_probe_set_superblocks_flags(pr: blkid_probe, flags: c_int) -> c_int;
    fn blkid_probe_enable_partitions(pr: blkid_probe, enable: c_int) -> c_int;
    fn blkid_probe_set_partitions_flags(pr: blkid_probe, flags: c_int) -> c_int;
    fn blkid_do_probe(pr: blkid_probe) -> c_int;
    fn blkid_probe_lookup_value(
        pr: blkid_probe,
        name: *const c_char,
        data: *mut *const c_char,
        len: *mut usize,
    ) -> c_int;
}

/// Refuses to format `bdev` if libblkid finds a signature on it.
pub(super) async fn refuse_unless_blank(bdev: &CountedBdev) -> Result<(), DeviceError> {
    let name = bdev.info().name.clone();
    let found = probe(bdev)
        .await
        .map_err(|reason| DeviceError::Unsuitable {
            device: name.clone(),
            reason: format!("cannot tell whether it is blank: {reason}"),
        })?;
    if found.is_empty() {
        return Ok(());
    }
    Err(DeviceError::NotBlank {
        device: name,
        signatures: found,
    })
}

/// The signatures on `bdev` (filesystem or partition-table types).
pub async fn probe(bdev: &CountedBdev) -> Result<Vec<String>, String> {
    let size = bdev.info().size_bytes();
    let block = u64::from(bdev.info().block_size).max(1);
    let copy = memfd()?;
    copy.set_len(size)
        .map_err(|e| format!("sizing the probe copy: {e}"))?;
    let head = HEAD.min(size);
    let tail_at = size.saturating_sub(TAIL).max(head) / block * block;
    for (at, len) in [(0, head), (tail_at, size - tail_at)] {
        if len == 0 {
            continue;
        }
        let (buf, r) = bdev.read(at, DmaBuf::new(len as usize)).await;
        r.map_err(|e| format!("reading {len} bytes at {at}: {e}"))?;
        copy.write_all_at(&buf, at)
            .map_err(|e| format!("copying for the probe: {e}"))?;
    }
    probe_file(&copy)
}

fn memfd() -> Result<File, String> {
    // SAFETY: a NUL-terminated name and valid flags; a returned fd is ours.
    let fd = unsafe { libc::memfd_create(c"rackcache-probe".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(format!("memfd_create: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: fd is a fresh descriptor nobody else owns.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// Runs libblkid's superblock and partition probes over `file`.
fn probe_file(file: &File) -> Result<Vec<String>, String> {
    // SAFETY: the probe is created, used on a descriptor that outlives it,
    // and freed here; values looked up are copied before the next call.
    unsafe {
        let pr = blkid_new_probe();
        if pr.is_null() {
            return Err("blkid_new_probe failed".into());
        }
        let found = (|| {
            if blkid_probe_set_device(pr, file.as_raw_fd(), 0, 0) != 0 {
                return Err("blkid_probe_set_device failed".to_string());
            }
            blkid_probe_enable_superblocks(pr, 1);
            blkid_probe_set_superblocks_flags(
                pr,
                BLKID_SUBLKS_TYPE | BLKID_SUBLKS_MAGIC | BLKID_SUBLKS_BADCSUM,
            );
            blkid_probe_enable_partitions(pr, 1);
            blkid_probe_set_partitions_flags(pr, BLKID_PARTS_MAGIC);
            let mut found = Vec::new();
            loop {
                match blkid_do_probe(pr) {
                    0 => {
                        let kind = lookup(pr, c"TYPE").or_else(|| lookup(pr, c"PTTYPE"));
                        found.push(kind.unwrap_or_else(|| "unknown signature".into()));
                    }
                    1 => break,
                    _ => return Err("blkid_do_probe failed".into()),
                }
            }
            Ok(found)
        })();
        blkid_free_probe(pr);
        found
    }
}

/// # Safety
/// `pr` is a live probe.
unsafe fn lookup(pr: blkid_probe, name: &CStr) -> Option<String> {
    let mut data: *const c_char = std::ptr::null();
    let mut len = 0usize;
    // SAFETY: per the caller; data points into the probe until the next call.
    let r = unsafe { blkid_probe_lookup_value(pr, name.as_ptr(), &mut data, &mut len) };
    if r != 0 || data.is_null() {
        return None;
    }
    // SAFETY: libblkid's values are NUL-terminated.
    Some(
        unsafe { CStr::from_ptr(data) }
            .to_string_lossy()
            .into_owned(),
    )
}
