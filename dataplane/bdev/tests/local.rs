//! malloc and file bdevs: data round trips, zeroing, unmap, and refusal of
//! bad ranges without touching data.

use bdev::file::FileBdev;
use bdev::malloc::MallocBdev;
use bdev::{Bdev, BdevError, DmaBuf};

fn pattern(len: usize, seed: u8) -> DmaBuf {
    let v: Vec<u8> = (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect();
    DmaBuf::from_slice(&v)
}

async fn exercise(b: &Bdev) {
    let bs = b.info().block_size as usize;
    // A write spanning the 1 MiB chunk boundary of the malloc bdev.
    let off = (1u64 << 20) - 4096;
    let data = pattern(64 << 10, 7);
    let (data, r) = b.write(off, data).await;
    r.unwrap();
    let (got, r) = b.read(off, DmaBuf::new(64 << 10)).await;
    r.unwrap();
    assert_eq!(&*got, &*data);

    // Zeroes and unmap read back as zeroes; neighbours are untouched.
    b.write_zeroes(off, 4096).await.unwrap();
    b.unmap(off + 8192, 4096).await.unwrap();
    let (got, r) = b.read(off, DmaBuf::new(16 << 10)).await;
    r.unwrap();
    assert!(got[..4096].iter().all(|&x| x == 0));
    assert_eq!(&got[4096..8192], &data[4096..8192]);
    assert!(got[8192..12288].iter().all(|&x| x == 0));
    assert_eq!(&got[12288..], &data[12288..16384]);
    b.flush().await.unwrap();

    // A FUA write lands like any other (durable before it completes: for
    // files through RWF_DSYNC or fdatasync), and is range-checked the same.
    let fua = pattern(8192, 9);
    let (fua, r) = b.write_fua(off + 16384, fua).await;
    r.unwrap();
    let (got, r) = b.read(off + 16384, DmaBuf::new(8192)).await;
    r.unwrap();
    assert_eq!(&*got, &*fua);
    let size = b.info().size_bytes();
    let (_, r) = b.write_fua(size, pattern(bs, 1)).await;
    assert!(matches!(r, Err(BdevError::OutOfRange { .. })), "{r:?}");

    // Past the end and misaligned: refused, nothing changes.
    let (_, r) = b.write(size - bs as u64, pattern(2 * bs, 1)).await;
    assert!(matches!(r, Err(BdevError::OutOfRange { .. })), "{r:?}");
    let (_, r) = b.write(off + 1, pattern(bs, 1)).await;
    assert!(matches!(r, Err(BdevError::Misaligned { .. })), "{r:?}");
    let (got, _) = b.read(off + 4096, DmaBuf::new(4096)).await;
    assert_eq!(&*got, &data[4096..8192]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malloc_round_trip() {
    let b = Bdev::Malloc(MallocBdev::new("Malloc0", 8192, 512).unwrap());
    assert_eq!(b.info().size_bytes(), 4 << 20);
    assert_eq!(b.info().product_name, "Malloc disk");
    exercise(&b).await;
}

/// RAM reads complete before `read_inline` returns, range-checked like
/// any read; a device that waits (a file) hands the buffer back unread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_complete_inline_only_on_ram() {
    let b = Bdev::Malloc(MallocBdev::new("Malloc0", 8192, 512).unwrap());
    let off = (1u64 << 20) - 4096;
    let (data, r) = b.write(off, pattern(8192, 3)).await;
    r.unwrap();
    let Ok((got, r)) = b.read_inline(off, DmaBuf::new(8192)) else {
        panic!("RAM reads inline");
    };
    r.unwrap();
    assert_eq!(&*got, &*data, "across the chunk boundary");
    let size = b.info().size_bytes();
    let Ok((_, r)) = b.read_inline(size, DmaBuf::new(512)) else {
        panic!("RAM refuses inline too");
    };
    assert!(matches!(r, Err(BdevError::OutOfRange { .. })), "{r:?}");

    let dir = std::env::temp_dir().join(format!("bdev-inline-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("disk.img");
    std::fs::File::create(&path)
        .unwrap()
        .set_len(1 << 20)
        .unwrap();
    let f = Bdev::File(FileBdev::open("aio0", &path, 4096).unwrap());
    let Err(back) = f.read_inline(0, DmaBuf::from_slice(&[5; 4096])) else {
        panic!("a file read waits");
    };
    assert!(back.iter().all(|&x| x == 5), "handed back untouched");
    drop(f);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn malloc_rejects_bad_geometry() {
    assert!(MallocBdev::new("m", 0, 512).is_err());
    assert!(MallocBdev::new("m", 8, 1000).is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_round_trip() {
    let dir = std::env::temp_dir().join(format!("bdev-file-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("disk.img");
    let f = std::fs::File::create(&path).unwrap();
    f.set_len(4 << 20).unwrap();
    drop(f);
    let fb = FileBdev::open("aio0", &path, 4096).unwrap();
    assert_eq!(fb.info().num_blocks(), 1024);
    assert_eq!(
        fb.engine(),
        "io_uring",
        "io_uring is available on this kernel"
    );
    let b = Bdev::File(fb);
    exercise(&b).await;
    drop(b);

    // The portable path gives the same results, and sees what io_uring wrote.
    let fb = FileBdev::open_blocking("aio0", &path, 4096).unwrap();
    assert_eq!(fb.engine(), "blocking-pool");
    let b = Bdev::File(fb);
    let (got, r) = b.read((1 << 20) - 4096, DmaBuf::new(4096)).await;
    r.unwrap();
    assert!(
        got.iter().all(|&x| x == 0),
        "zeroed by write_zeroes through the ring"
    );
    exercise(&b).await;

    // A size that is not a multiple of the block size is refused.
    std::fs::File::create(dir.join("odd.img"))
        .unwrap()
        .set_len(5000)
        .unwrap();
    assert!(FileBdev::open("odd", &dir.join("odd.img"), 4096).is_err());
    assert!(FileBdev::open("none", &dir.join("missing.img"), 4096).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// SPDK's `bdev_aio_create --readonly`: reads work, every change is
/// refused before it reaches the file, and the bdev says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_file_refuses_changes() {
    use bdev::IoKind;
    let dir = testkit::TempDir::new("bdev-readonly");
    let path = dir.path().join("ro.img");
    std::fs::write(&path, vec![5u8; 64 << 10]).unwrap();
    let mut perms = std::fs::metadata(&path).unwrap().permissions();
    perms.set_readonly(true);
    std::fs::set_permissions(&path, perms).unwrap();

    for b in [FileBdev::open_with("ro", &path, 4096, true).unwrap(), {
        // The blocking pool says the same.
        let mut b = FileBdev::open_with("ro", &path, 4096, true).unwrap();
        b.disable_uring();
        b
    }] {
        assert!(b.readonly());
        assert!(b.supports(IoKind::Read) && b.supports(IoKind::Flush));
        assert!(!b.supports(IoKind::Write) && !b.supports(IoKind::Unmap));
        let b = Bdev::File(b);
        let (got, r) = b.read(0, DmaBuf::new(4096)).await;
        r.unwrap();
        assert!(got.iter().all(|&x| x == 5));
        let (_, r) = b.write(0, pattern(4096, 1)).await;
        assert!(
            matches!(r, Err(BdevError::Unsupported(IoKind::Write))),
            "{r:?}"
        );
        let (_, r) = b.write_fua(0, pattern(4096, 1)).await;
        assert!(matches!(r, Err(BdevError::Unsupported(IoKind::Write))));
        assert!(matches!(
            b.write_zeroes(0, 4096).await,
            Err(BdevError::Unsupported(IoKind::WriteZeroes))
        ));
        assert!(matches!(
            b.unmap(0, 4096).await,
            Err(BdevError::Unsupported(IoKind::Unmap))
        ));
        b.flush().await.unwrap();
    }
    assert!(std::fs::read(&path).unwrap().iter().all(|&x| x == 5));
}
