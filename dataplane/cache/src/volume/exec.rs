//! Executing one plan's I/O against the core bdev and the cache device.
//!
//! Runs outside the owner task (spawned per plan), so the owner keeps
//! planning while devices work. Order, as the engine's `Plan` documents:
//! write-backs run beside everything else (their blocks stay readable);
//! fills, cache reads and core reads produce the host's read data; fills
//! run before cache writes only when the plan says they overlap.

use std::sync::Arc;

use bdev::view::BufView;
use bdev::{BdevError, CountedBdev, DmaBuf};
use engine::{CacheIo, Extent, Plan};
use futures_util::future::join_all;

use super::meta::{data_crc, ReadCheck};
use super::stats::Errors;
use crate::device::CacheDevice;
use crate::layout::{VolumeRegion, UNIT_SIZE};

/// The devices a plan runs against.
pub(crate) struct Devices {
    pub core: CountedBdev,
    pub cache: Arc<CacheDevice>,
}

/// What became of a plan's I/O.
pub(crate) struct Outcome {
    /// The host's buffer (read data filled in).
    pub buf: Option<DmaBuf>,
    /// Every I/O of the request's own work succeeded.
    pub request_ok: bool,
    /// The host's request succeeded (a read whose fills failed to be
    /// cached still has its data).
    pub host_ok: bool,
    /// Every write-back succeeded.
    pub writeback_ok: bool,
    /// The first error, for the host's status.
    pub error: Option<BdevError>,
    /// Errors by device.
    pub errors: Errors,
    /// A cache-device I/O failed.
    pub cache_failed: bool,
    /// Bytes written back.
    pub written_back: u64,
    /// Write-backs whose bytes failed their checksum (volume ranges).
    pub damaged: Vec<Extent>,
}

#[derive(Clone, Copy)]
enum Dev {
    CoreRd,
    CoreWr,
    CacheRd,
    CacheWr,
    /// Cache bytes read back that fail their checksum.
    Checksum,
    /// The cache write of a read's fill.
    FillWr,
}

/// The error of dirty bytes at `offset` that fail their checksum.
pub(crate) fn damaged_error(volume: &str, offset: u64, len: u64) -> BdevError {
    BdevError::Integrity(format!(
        "cache volume {volume}: dirty data at bytes {offset}+{len} failed its checksum on the cache device; it is not served or written back"
    ))
}

struct Tally {
    errors: Errors,
    first: Option<BdevError>,
    cache_failed: bool,
    /// A read's fill could not be written to the cache: the plan fails
    /// (its blocks roll back) but the host's data, read from core, is whole.
    fill_failed: bool,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            errors: Errors::default(),
            first: None,
            cache_failed: false,
            fill_failed: false,
        }
    }

    fn note(&mut self, dev: Dev, r: Result<(), BdevError>) -> bool {
        let Err(e) = r else { return true };
        match dev {
            Dev::CoreRd => self.errors.core_volume_rd += 1,
            Dev::CoreWr => self.errors.core_volume_wr += 1,
            Dev::CacheRd | Dev::Checksum => self.errors.cache_volume_rd += 1,
            Dev::CacheWr | Dev::FillWr => self.errors.cache_volume_wr += 1,
        }
        self.errors.total += 1;
        if matches!(dev, Dev::CacheRd | Dev::CacheWr | Dev::FillWr) {
            self.cache_failed = true;
        }
        self.first.get_or_insert(e);
        false
    }

    /// Notes the cache write of a read's fill: a failure fails the plan,
    /// not the host's read.
    fn note_fill(&mut self, r: Result<(), BdevError>) -> bool {
        let Err(e) = r else { return true };
        tracing::warn!(error = %e, "a read's fill could not be cached; the read is served from core");
        self.errors.cache_volume_wr += 1;
        self.errors.total += 1;
        self.cache_failed = true;
        self.fill_failed = true;
        false
    }
}

/// Reads `len` bytes of the volume's cache space at `addr`.
pub(crate) async fn cache_read(
    dev: &CacheDevice,
    region: &VolumeRegion,
    addr: u64,
    len: u64,
) -> (DmaBuf, Result<(), BdevError>) {
    let mut out = DmaBuf::new(len as usize);
    let mut done = 0u64;
    while done < len {
        let a = addr + done;
        let n = (UNIT_SIZE - a % UNIT_SIZE).min(len - done);
        if done == 0 && n == len {
            return dev.bdev().read(region.data_offset(a), out).await;
        }
        let (piece, r) = dev
            .bdev()
            .read(region.data_offset(a), DmaBuf::new(n as usize))
            .await;
        if r.is_err() {
            return (out, r);
        }
        out[done as usize..(done + n) as usize].copy_from_slice(&piece);
        done += n;
    }
    (out, Ok(()))
}

/// Writes `data` into the volume's cache space at `addr`.
pub(crate) async fn cache_write(
    dev: &CacheDevice,
    region: &VolumeRegion,
    addr: u64,
    data: &[u8],
    fua: bool,
) -> Result<(), BdevError> {
    let mut done = 0usize;
    while done < data.len() {
        let a = addr + done as u64;
        let n = ((UNIT_SIZE - a % UNIT_SIZE) as usize).min(data.len() - done);
        let buf = DmaBuf::from_slice(&data[done..done + n]);
        let (_, r) = if fua {
            dev.bdev().write_fua(region.data_offset(a), buf).await
        } else {
            dev.bdev().write(region.data_offset(a), buf).await
        };
        r?;
        done += n;
    }
    Ok(())
}

/// Copies the write-backs: cache -> core. `checksums[i]`, when given, is
/// what write-back `i`'s bytes must hash to: bytes that fail it are not
/// written anywhere and come back in `damaged`.
async fn writebacks(
    d: &Devices,
    region: &VolumeRegion,
    list: &[CacheIo],
    checksums: &[Option<u32>],
    damaged: &mut Vec<Extent>,
) -> (Tally, u64) {
    let mut t = Tally::new();
    let mut bytes = 0;
    let results = join_all(list.iter().enumerate().map(|(i, w)| async move {
        let (buf, r) = cache_read(&d.cache, region, w.cache_addr, w.len).await;
        if r.is_err() {
            return (Dev::CacheRd, r, 0);
        }
        if let Some(want) = checksums.get(i).copied().flatten() {
            if data_crc(&buf) != want {
                return (
                    Dev::Checksum,
                    Err(damaged_error(&region.name, w.offset, w.len)),
                    0,
                );
            }
        }
        let (_, r) = d.core.write(w.offset, buf).await;
        (Dev::CoreWr, r, w.len)
    }))
    .await;
    for ((dev, r, n), w) in results.into_iter().zip(list) {
        // Damaged bytes fail their own block's write-back, not the others'
        // (the caller keeps just those blocks dirty).
        if matches!(dev, Dev::Checksum) {
            t.errors.cache_volume_rd += 1;
            t.errors.total += 1;
            damaged.push(Extent {
                offset: w.offset,
                len: w.len,
            });
            continue;
        }
        if t.note(dev, r) {
            bytes += n;
        }
    }
    // The blocks become clean (and their slots reusable) when this returns:
    // core's own write cache must not hold the only copy.
    if t.first.is_none() {
        t.note(Dev::CoreWr, d.core.flush().await);
    }
    (t, bytes)
}

/// Where `e` lies in the request's buffer.
pub(super) fn in_request(req: Extent, off: u64, len: u64) -> std::ops::Range<usize> {
    let s = (off - req.offset) as usize;
    s..s + len as usize
}

/// One piece of a read's data, read straight into its view of the host's
/// buffer (no copy).
enum Piece {
    /// From the cache device at this device offset.
    Cache(u64),
    /// From core at this volume offset.
    Core(u64),
    /// From core at this offset, then the same bytes to the cache device
    /// at this device offset.
    Fill(u64, u64),
}

/// Splits `c` at unit boundaries: (volume offset, length, device offset).
pub(super) fn unit_pieces(region: &VolumeRegion, c: &CacheIo) -> Vec<(u64, u64, u64)> {
    let mut out = Vec::new();
    let mut done = 0;
    while done < c.len {
        let a = c.cache_addr + done;
        let n = (UNIT_SIZE - a % UNIT_SIZE).min(c.len - done);
        out.push((c.offset + done, n, region.data_offset(a)));
        done += n;
    }
    out
}

/// Runs the read side of `plan` into `buf` (the request's length): every
/// piece is read into its own view of the buffer, concurrently, and the
/// buffer comes back whole. Fills that reach outside the request (whole-
/// block fills) go through a buffer of their own.
async fn read_side(
    d: &Devices,
    region: &VolumeRegion,
    plan: &Plan,
    buf: DmaBuf,
    t: &mut Tally,
) -> DmaBuf {
    let req = plan.request;
    let mut pieces = Vec::new();
    let mut ranges = Vec::new();
    let mut outside = Vec::new();
    for c in &plan.cache_reads {
        for (off, len, dev) in unit_pieces(region, c) {
            ranges.push(in_request(req, off, len));
            pieces.push(Piece::Cache(dev));
        }
    }
    for e in &plan.core_reads {
        ranges.push(in_request(req, e.offset, e.len));
        pieces.push(Piece::Core(e.offset));
    }
    for f in &plan.fills {
        let inside = f.offset >= req.offset && f.end() <= req.end();
        let pieces_of = unit_pieces(region, f);
        if inside && pieces_of.len() == 1 {
            ranges.push(in_request(req, f.offset, f.len));
            pieces.push(Piece::Fill(f.offset, pieces_of[0].2));
        } else {
            outside.push(*f);
        }
    }
    let mut buf = buf;
    if !ranges.is_empty() {
        let views = match buf.into_views(ranges) {
            Ok(v) => v,
            Err(e) => {
                t.note(Dev::CacheRd, Err(BdevError::InvalidArgument(e.to_string())));
                return e.buf;
            }
        };
        let cache = d.cache.bdev();
        let results = join_all(pieces.into_iter().zip(views).map(|(p, v)| async move {
            match p {
                Piece::Cache(dev) => {
                    let (v, r) = cache.read_view(dev, v).await;
                    (v, Dev::CacheRd, r)
                }
                Piece::Core(off) => {
                    let (v, r) = d.core.read_view(off, v).await;
                    (v, Dev::CoreRd, r)
                }
                Piece::Fill(off, dev) => {
                    let (v, r) = d.core.read_view(off, v).await;
                    if r.is_err() {
                        return (v, Dev::CoreRd, r);
                    }
                    let (v, r) = cache.write_view(dev, v).await;
                    (v, Dev::FillWr, r)
                }
            }
        }))
        .await;
        let mut views = Vec::with_capacity(results.len());
        for (v, dev, r) in results {
            match dev {
                Dev::FillWr => t.note_fill(r),
                _ => t.note(dev, r),
            };
            views.push(v);
        }
        buf = match BufView::reunite(views) {
            Ok(b) => b,
            Err(e) => {
                // A device lost a view (it hands back a stand-in on some
                // errors): the request fails, with a fresh buffer.
                t.note(Dev::CacheRd, Err(BdevError::InvalidArgument(e.to_string())));
                DmaBuf::new(req.len as usize)
            }
        };
    }
    for f in outside {
        let (b, r) = d.core.read(f.offset, DmaBuf::new(f.len as usize)).await;
        if !t.note(Dev::CoreRd, r) {
            continue;
        }
        let w = cache_write(&d.cache, region, f.cache_addr, &b, false).await;
        t.note_fill(w);
        let s = f.offset.max(req.offset);
        let e = f.end().min(req.end());
        if s < e {
            buf[in_request(req, s, e - s)]
                .copy_from_slice(&b[(s - f.offset) as usize..(e - f.offset) as usize]);
        }
    }
    buf
}

/// Runs fills of a write plan (head/tail or whole-block completions of new
/// blocks): core -> cache.
async fn write_fills(d: &Devices, region: &VolumeRegion, plan: &Plan, t: &mut Tally) {
    let rs = join_all(plan.fills.iter().map(|f| async move {
        let (b, r) = d.core.read(f.offset, DmaBuf::new(f.len as usize)).await;
        if r.is_err() {
            return (Dev::CoreRd, r);
        }
        (
            Dev::CacheWr,
            cache_write(&d.cache, region, f.cache_addr, &b, false).await,
        )
    }))
    .await;
    for (dev, r) in rs {
        t.note(dev, r);
    }
}

/// Runs the write side of `plan` from `buf` (the request's bytes). Cache
/// writes go out of views of the buffer; core writes too, unless the same
/// bytes also go to the cache (write-through), where core gets a copy so
/// both writes run at once.
async fn write_side(
    d: &Devices,
    region: &VolumeRegion,
    plan: &Plan,
    buf: DmaBuf,
    fua: bool,
    t: &mut Tally,
) -> DmaBuf {
    let req = plan.request;
    if plan.fills_before_cache_writes {
        write_fills(d, region, plan, t).await;
    }
    let mut ranges = Vec::new();
    let mut targets = Vec::new();
    for c in &plan.cache_writes {
        for (off, len, dev) in unit_pieces(region, c) {
            ranges.push(in_request(req, off, len));
            targets.push((Dev::CacheWr, dev));
        }
    }
    let copy_core = !plan.cache_writes.is_empty();
    let core_copies: Vec<(u64, DmaBuf)> = if copy_core {
        plan.core_writes
            .iter()
            .map(|e| {
                (
                    e.offset,
                    DmaBuf::from_slice(&buf[in_request(req, e.offset, e.len)]),
                )
            })
            .collect()
    } else {
        for e in &plan.core_writes {
            ranges.push(in_request(req, e.offset, e.len));
            targets.push((Dev::CoreWr, e.offset));
        }
        Vec::new()
    };
    let (views, unsplit) = if ranges.is_empty() {
        (Vec::new(), Some(buf))
    } else {
        match buf.into_views(ranges) {
            Ok(v) => (v, None),
            Err(e) => {
                t.note(Dev::CacheWr, Err(BdevError::InvalidArgument(e.to_string())));
                return e.buf;
            }
        }
    };
    let cache = d.cache.bdev();
    let by_view = join_all(
        targets
            .into_iter()
            .zip(views)
            .map(|((dev, off), v)| async move {
                let (v, r) = match dev {
                    Dev::CacheWr => cache.write_maybe_fua_view(off, v, fua).await,
                    _ => d.core.write_maybe_fua_view(off, v, fua).await,
                };
                (v, dev, r)
            }),
    );
    let copies = join_all(
        core_copies
            .into_iter()
            .map(|(off, b)| async move { d.core.write_maybe_fua(off, b, fua).await.1 }),
    );
    let fills = async {
        if !plan.fills_before_cache_writes {
            let mut t2 = Tally::new();
            write_fills(d, region, plan, &mut t2).await;
            Some(t2)
        } else {
            None
        }
    };
    let (by_view, copies, t2) = tokio::join!(by_view, copies, fills);
    for r in copies {
        t.note(Dev::CoreWr, r);
    }
    if let Some(t2) = t2 {
        merge(t, t2);
    }
    let mut views = Vec::with_capacity(by_view.len());
    for (v, dev, r) in by_view {
        t.note(dev, r);
        views.push(v);
    }
    if let Some(b) = unsplit {
        return b;
    }
    match BufView::reunite(views) {
        Ok(b) => b,
        Err(e) => {
            t.note(Dev::CacheWr, Err(BdevError::InvalidArgument(e.to_string())));
            DmaBuf::new(req.len as usize)
        }
    }
}

fn merge(t: &mut Tally, o: Tally) {
    let e = &mut t.errors;
    e.core_volume_rd += o.errors.core_volume_rd;
    e.core_volume_wr += o.errors.core_volume_wr;
    e.cache_volume_rd += o.errors.cache_volume_rd;
    e.cache_volume_wr += o.errors.cache_volume_wr;
    e.total += o.errors.total;
    t.cache_failed |= o.cache_failed;
    if t.first.is_none() {
        t.first = o.first;
    }
}

/// Deallocates the plan's core ranges and zeroes the cache ranges it asks.
async fn discard_side(d: &Devices, region: &VolumeRegion, plan: &Plan, t: &mut Tally) {
    let cores = join_all(plan.discards.iter().map(|e| d.core.unmap(e.offset, e.len))).await;
    for r in cores {
        t.note(Dev::CoreWr, r);
    }
    let zeroes = join_all(plan.cache_zeroes.iter().map(|c| async move {
        let z = vec![0u8; c.len as usize];
        cache_write(&d.cache, region, c.cache_addr, &z, false).await
    }))
    .await;
    for r in zeroes {
        t.note(Dev::CacheWr, r);
    }
}

/// What a plan's bytes must hash to, where the table knows.
pub(crate) struct Checks<'a> {
    /// Per write-back of the plan.
    pub writebacks: &'a [Option<u32>],
    /// Dirty bytes a read verifies in the host's buffer.
    pub reads: &'a [ReadCheck],
}

/// Runs every I/O of `plan`. `buf` is the host's buffer: read data goes
/// into it, write data comes from it.
pub(crate) async fn execute(
    d: &Devices,
    region: &VolumeRegion,
    plan: &Plan,
    mut buf: Option<DmaBuf>,
    fua: bool,
    checks: Checks<'_>,
) -> Outcome {
    let checksums = checks.writebacks;
    let mut damaged = Vec::new();
    let mut read_damaged = Vec::new();
    let wb = async {
        if plan.writebacks.is_empty() {
            (Tally::new(), 0)
        } else {
            writebacks(d, region, &plan.writebacks, checksums, &mut damaged).await
        }
    };
    let work = async {
        let mut t = Tally::new();
        match plan.op {
            engine::Op::Read => {
                if let Some(b) = buf.take() {
                    let b = read_side(d, region, plan, b, &mut t).await;
                    if t.first.is_none() && !checks.reads.is_empty() {
                        read_damaged = ReadCheck::failures(&b, checks.reads);
                        if let Some(x) = read_damaged.first() {
                            t.note(
                                Dev::Checksum,
                                Err(damaged_error(&region.name, x.offset, x.len)),
                            );
                        }
                    }
                    buf = Some(b);
                }
            }
            engine::Op::Write => {
                // Without a buffer it is a flush plan: only write-backs.
                if let Some(b) = buf.take() {
                    buf = Some(write_side(d, region, plan, b, fua, &mut t).await);
                }
            }
            engine::Op::Deallocate => discard_side(d, region, plan, &mut t).await,
        }
        t
    };
    let ((wt, bytes), mut t) = tokio::join!(wb, work);
    damaged.append(&mut read_damaged);
    let writeback_ok = wt.first.is_none();
    let host_ok = t.first.is_none();
    let request_ok = host_ok && !t.fill_failed;
    merge(&mut t, wt);
    Outcome {
        buf,
        request_ok,
        host_ok,
        writeback_ok,
        error: t.first,
        errors: t.errors,
        cache_failed: t.cache_failed,
        written_back: bytes,
        damaged,
    }
}
