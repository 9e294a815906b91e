//! Formatting only what is blank: a device holding a filesystem or a
//! partition table (made by the real mkfs and sgdisk) is refused, with the
//! signature named and nothing written; `Format::Wipe` (the user's
//! force_format) formats it anyway; a blank one is formatted.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use bdev::{Bdev, CountedBdev, DmaBuf};
use cache::device::{CacheDevice, DeviceError, Format};

const MIB: u64 = 1 << 20;
/// Sparse files big enough for mkfs.xfs (300 MB at least).
const SIZE: u64 = 320 * MIB;

fn file_bdev(name: &str, path: &Path) -> CountedBdev {
    CountedBdev::from(Arc::new(Bdev::File(
        bdev::file::FileBdev::open(name, path, 0).unwrap(),
    )))
}

fn blank_file(dir: &testkit::TempDir, name: &str) -> std::path::PathBuf {
    let path = dir.path().join(name);
    std::fs::File::create(&path).unwrap().set_len(SIZE).unwrap();
    path
}

/// Runs a tool that must be installed (hack/deps.sh installs it).
fn run(tool: &str, args: &[&str]) {
    let out = Command::new(tool)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{tool} (hack/deps.sh installs it): {e}"));
    assert!(
        out.status.success(),
        "{tool} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The first 4 MiB and the last 1 MiB: where a format writes and what the
/// probe reads.
async fn ends(b: &CountedBdev) -> Vec<u8> {
    let mut out = Vec::new();
    for (at, len) in [(0, 4 * MIB), (SIZE - MIB, MIB)] {
        let (buf, r) = b.read(at, DmaBuf::new(len as usize)).await;
        r.unwrap();
        out.extend_from_slice(&buf);
    }
    out
}

#[tokio::test]
async fn a_device_with_a_signature_is_refused_unless_wiped() {
    let dir = testkit::TempDir::new("cache-signatures");
    let cases: [(&str, &str, &[&str]); 3] = [
        ("ext4", "mkfs.ext4", &["-q", "-F"]),
        ("xfs", "mkfs.xfs", &["-q", "-f"]),
        ("gpt", "sgdisk", &["--clear", "--new=1:2048:+8M"]),
    ];
    for (want, tool, args) in cases {
        let path = blank_file(&dir, want);
        let mut all: Vec<&str> = args.to_vec();
        all.push(path.to_str().unwrap());
        run(tool, &all);
        let b = file_bdev(want, &path);
        let before = ends(&b).await;
        let e = CacheDevice::open(b.clone(), true).await.err();
        match &e {
            Some(DeviceError::NotBlank { signatures, .. }) => {
                assert!(
                    signatures.iter().any(|s| s == want),
                    "{want}: {signatures:?}"
                );
                let msg = e.as_ref().unwrap().to_string();
                assert!(
                    msg.contains("force_format") && msg.contains("erases"),
                    "{msg}"
                );
            }
            other => panic!("{want}: {other:?}"),
        }
        assert!(ends(&b).await == before, "{want}: the refusal wrote");
        // Loading never formats either.
        assert!(matches!(
            CacheDevice::open(b.clone(), false).await,
            Err(DeviceError::Unformatted(_))
        ));
        // Wiping is the explicit way.
        let dev = CacheDevice::open_with(b.clone(), Format::Wipe)
            .await
            .unwrap();
        dev.create_volume(cache::device::VolumeSpec {
            name: "v".into(),
            volume_size: 1 << 30,
            sector_size: 512,
            block_sizes: vec![4096],
            group_size: 1 << 20,
            units: 1,
        })
        .await
        .unwrap();
        drop(dev);
        let dev = CacheDevice::open(b, false).await.unwrap();
        assert_eq!(dev.volumes().len(), 1, "{want}");
    }
}

#[tokio::test]
async fn a_blank_device_is_formatted_and_a_formatted_one_shows_no_foreign_signature() {
    let dir = testkit::TempDir::new("cache-signatures-blank");
    let path = blank_file(&dir, "blank");
    let b = file_bdev("blank", &path);
    assert!(cache::device::probe_signatures(&b)
        .await
        .unwrap()
        .is_empty());
    let dev = CacheDevice::open(b.clone(), true).await.unwrap();
    drop(dev);
    // libblkid knows no rackcache format: our own magic is what marks it.
    assert!(cache::device::probe_signatures(&b)
        .await
        .unwrap()
        .is_empty());
    CacheDevice::open(b, false).await.unwrap();
}
