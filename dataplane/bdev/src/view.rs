//! Disjoint views of one [`DmaBuf`] ("iovecs"), so that one host buffer
//! can be filled or drained by several concurrent bdev operations without
//! a copy: a cached volume reads its hits from the cache device into some
//! ranges of the host's buffer, its misses from the core device into
//! others, and writes the filled ranges on to the cache device.
//!
//! [`DmaBuf::into_views`] moves the buffer's allocation behind an [`Arc`]
//! and hands out one [`BufView`] per requested range; each view is owned,
//! `Send + 'static`, and moves into a bdev operation
//! ([`Bdev::read_view`](crate::Bdev::read_view) and the like) exactly as a
//! `DmaBuf` does. [`BufView::reunite`] takes the views back and returns the
//! original `DmaBuf` (same allocation, same length, no copy) once no other
//! view of it is left.
//!
//! # Why this is sound
//!
//! The argument needs no tool (miri cannot run io_uring or librbd anyway);
//! it rests on four facts, each kept by one place in this file:
//!
//! 1. **Views never alias.** [`DmaBuf::into_views`] refuses empty ranges,
//!    ranges outside the buffer and any two ranges that share a byte (the
//!    ranges are sorted and each must end before the next starts), before
//!    it creates a view. A `BufView` is not `Clone` and nothing else
//!    creates one over an existing allocation, so the `&mut [u8]` a view
//!    gives out through `DerefMut` is the only reference to its bytes,
//!    like a `&mut` obtained from `split_at_mut`. The shared `Owner` is
//!    never dereferenced while views exist: views reach their bytes through
//!    a pointer computed at the split.
//! 2. **The memory lives as long as any view.** Each view holds an `Arc`
//!    of the owner, which frees the allocation (by dropping the `DmaBuf`)
//!    when the last view is dropped; dropping views in any order, on any
//!    thread, is fine. A device writes through a view's pointer only while
//!    the operation owns the view (the pending io_uring or librbd state
//!    holds it until the completion arrives, exactly as for a `DmaBuf`), so
//!    a future dropped early, e.g. a cancelled request, drops nothing the
//!    device may still write: the view goes when the completion does.
//! 3. **Reuniting needs every view.** [`BufView::reunite`] gives the whole
//!    buffer back only through `Arc::try_unwrap`, which succeeds only when
//!    the views handed in were the last references (a view another task
//!    still holds, or one a device still owns, makes it fail), and whose
//!    acquire ordering makes every write through any view, on any thread,
//!    visible before the whole buffer is read.
//! 4. **Moving a view moves no memory.** The bytes are on the heap; the
//!    pointer given to the kernel or librbd stays valid while the view
//!    moves into the pending operation and back.
//!
//! # Alignment
//!
//! A view's bytes start at the buffer's 4096-aligned base plus the view's
//! start. Files opened with O_DIRECT need memory aligned to the device's
//! logical block size, so a view used for bdev I/O must start at a
//! multiple of the bdev's block size, or of 4096 for larger blocks; the
//! bdev operations refuse other views with
//! [`BdevError::InvalidArgument`](crate::BdevError::InvalidArgument) on
//! every kind, so code tested on RAM behaves the same on files.

use std::ops::Range;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::buf::DMA_ALIGN;
use crate::DmaBuf;

/// The allocation shared by the views of one buffer: the `DmaBuf` itself,
/// which frees it when the last view drops this. Never dereferenced while
/// views exist (see the module docs); only moved out whole by `reunite`.
struct Owner(DmaBuf);

/// A disjoint sub-range of a [`DmaBuf`], owned, movable into a bdev
/// operation; dereferences to its bytes.
pub struct BufView {
    owner: Arc<Owner>,
    /// `owner`'s base plus `start`: valid for `len` bytes that no other
    /// view covers.
    ptr: NonNull<u8>,
    start: usize,
    len: usize,
}

// SAFETY: a view is the only way to its bytes (module docs, fact 1), like a
// `&mut [u8]`, and the owner it keeps alive is only dropped or unwrapped
// through the Arc's synchronisation.
unsafe impl Send for BufView {}
// SAFETY: a shared reference to a view only gives out `&[u8]`.
unsafe impl Sync for BufView {}

/// Why views could not be made or reunited.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ViewError {
    /// No ranges, or no views, were given.
    #[error("no ranges given")]
    NoRanges,
    /// A range holds no bytes (or ends before it starts).
    #[error("range {0:?} is empty")]
    Empty(Range<usize>),
    /// A range ends past the buffer.
    #[error("range {range:?} ends past the {len}-byte buffer")]
    OutOfRange {
        /// The range asked for.
        range: Range<usize>,
        /// The buffer's length.
        len: usize,
    },
    /// Two ranges share bytes.
    #[error("ranges {0:?} and {1:?} overlap")]
    Overlap(Range<usize>, Range<usize>),
    /// The views are of different buffers.
    #[error("the views are of different buffers")]
    MixedBuffers,
    /// Other views of the buffer are still held (by a task, or by a device
    /// that has not completed).
    #[error("{0} other views of the buffer are still held")]
    Outstanding(usize),
}

/// [`DmaBuf::into_views`] refused: why, and the buffer back, untouched.
#[derive(Debug, thiserror::Error)]
#[error("cannot split the buffer into views: {reason}")]
pub struct SplitError {
    /// Why.
    pub reason: ViewError,
    /// The buffer, unchanged.
    pub buf: DmaBuf,
}

/// [`BufView::reunite`] refused: why, and the views back.
#[derive(Debug, thiserror::Error)]
#[error("cannot reunite the views: {reason}")]
pub struct ReuniteError {
    /// Why.
    pub reason: ViewError,
    /// The views handed in, unchanged (in the order given).
    pub views: Vec<BufView>,
}

/// Checks that `ranges` are non-empty, inside `len` bytes and pairwise
/// disjoint.
fn check_ranges(ranges: &[Range<usize>], len: usize) -> Result<(), ViewError> {
    if ranges.is_empty() {
        return Err(ViewError::NoRanges);
    }
    for r in ranges {
        if r.start >= r.end {
            return Err(ViewError::Empty(r.clone()));
        }
        if r.end > len {
            return Err(ViewError::OutOfRange {
                range: r.clone(),
                len,
            });
        }
    }
    let mut sorted: Vec<&Range<usize>> = ranges.iter().collect();
    sorted.sort_unstable_by_key(|r| r.start);
    for pair in sorted.windows(2) {
        // Non-empty and sorted by start: disjoint iff each ends before the
        // next starts.
        if pair[0].end > pair[1].start {
            return Err(ViewError::Overlap(pair[0].clone(), pair[1].clone()));
        }
    }
    Ok(())
}

impl DmaBuf {
    /// Splits the buffer into one view per range of `ranges` (byte ranges
    /// of `0..self.len()`, in the order given), without copying. Ranges
    /// must be non-empty and pairwise disjoint; they need not cover the
    /// buffer (bytes outside every view keep their contents and come back
    /// with [`BufView::reunite`]). On a refusal the buffer comes back in
    /// the error.
    pub fn into_views(
        self,
        ranges: impl IntoIterator<Item = Range<usize>>,
    ) -> Result<Vec<BufView>, SplitError> {
        let ranges: Vec<Range<usize>> = ranges.into_iter().collect();
        if let Err(reason) = check_ranges(&ranges, self.len()) {
            return Err(SplitError { reason, buf: self });
        }
        let base = self.base_ptr();
        let owner = Arc::new(Owner(self));
        Ok(ranges
            .into_iter()
            .map(|r| BufView {
                owner: Arc::clone(&owner),
                // SAFETY: r.start < r.end <= len <= capacity, so the result
                // is inside the allocation (and so not null).
                ptr: unsafe { NonNull::new_unchecked(base.as_ptr().add(r.start)) },
                start: r.start,
                len: r.end - r.start,
            })
            .collect())
    }
}

impl BufView {
    /// Where the view lies in its buffer.
    pub fn range(&self) -> Range<usize> {
        self.start..self.start + self.len
    }

    /// Whether `self` and `other` are views of the same buffer.
    pub fn same_buffer(&self, other: &BufView) -> bool {
        Arc::ptr_eq(&self.owner, &other.owner)
    }

    /// Gives back the buffer the views were split from, with its length
    /// and every byte written through them, without copying. `views` must
    /// be every view of that buffer still held (views dropped before, e.g.
    /// with a cancelled request whose device has completed, need not be
    /// given). Refuses, returning the views, if they are of different
    /// buffers or another view is still held; a view a device still owns
    /// counts as held.
    pub fn reunite(mut views: Vec<BufView>) -> Result<DmaBuf, ReuniteError> {
        let Some(last) = views.pop() else {
            return Err(ReuniteError {
                reason: ViewError::NoRanges,
                views,
            });
        };
        let refuse = |reason, mut views: Vec<BufView>, last| {
            views.push(last);
            Err(ReuniteError { reason, views })
        };
        if !views.iter().all(|v| last.same_buffer(v)) {
            return refuse(ViewError::MixedBuffers, views, last);
        }
        // A first look, to give every view back when others are still out;
        // the count cannot grow meanwhile (views are not Clone and every
        // reference to the owner is a view), only shrink.
        let held = Arc::strong_count(&last.owner);
        let given = views.len() + 1;
        if held > given {
            return refuse(ViewError::Outstanding(held - given), views, last);
        }
        drop(views);
        let BufView {
            owner,
            ptr,
            start,
            len,
        } = last;
        // try_unwrap, not the count above, decides: it succeeds only for the
        // last reference, and synchronises with every view's drop.
        match Arc::try_unwrap(owner) {
            Ok(Owner(buf)) => Ok(buf),
            // Not reachable after the check above (the count only shrinks);
            // kept sound all the same: the views dropped just now are
            // simply gone, this one comes back.
            Err(owner) => Err(ReuniteError {
                reason: ViewError::Outstanding(Arc::strong_count(&owner) - 1),
                views: vec![BufView {
                    owner,
                    ptr,
                    start,
                    len,
                }],
            }),
        }
    }

    /// A view of the whole of a fresh buffer of `len` bytes: what an
    /// operation returns in place of a view the device lost with a failed
    /// request (it belongs to no other view's buffer).
    pub(crate) fn detached(len: usize) -> Self {
        let buf = DmaBuf::new(len);
        let ptr = buf.base_ptr();
        Self {
            owner: Arc::new(Owner(buf)),
            ptr,
            start: 0,
            len,
        }
    }

    /// Whether the view's first byte is aligned for I/O on a bdev with
    /// `block_size`-byte blocks (see the module docs).
    pub(crate) fn aligned_for(&self, block_size: u32) -> bool {
        let align = (block_size as usize).clamp(1, DMA_ALIGN);
        self.start.is_multiple_of(align)
    }
}

impl std::ops::Deref for BufView {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is valid for len bytes no other view covers, kept
        // alive by owner (module docs, facts 1 and 2).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for BufView {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` is the only way to these bytes.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl std::fmt::Debug for BufView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BufView")
            .field("range", &self.range())
            .finish()
    }
}

#[cfg(test)]
// `[a..b]` is a list of one view's range here, not a range to collect.
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;

    fn numbered(len: usize) -> DmaBuf {
        let v: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        DmaBuf::from_slice(&v)
    }

    #[test]
    fn views_see_their_bytes_and_reunite_without_a_copy() {
        let buf = numbered(16384);
        let base = buf.as_ptr();
        let mut views = buf
            .into_views([8192..12288, 0..4096, 12288..16384])
            .unwrap();
        assert_eq!(views[0].range(), 8192..12288);
        assert_eq!(views[0][0], (8192 % 251) as u8);
        assert_eq!(views[0].as_ptr(), base.wrapping_add(8192));
        views[1].fill(0xaa);
        views[2][4095] = 0x55;
        // Views move to other threads and come back in any order.
        let views: Vec<BufView> = std::thread::spawn(move || {
            views.reverse();
            views
        })
        .join()
        .unwrap();
        let buf = BufView::reunite(views).unwrap();
        assert_eq!(buf.as_ptr(), base, "the same allocation");
        assert_eq!(buf.len(), 16384);
        assert!(buf[..4096].iter().all(|&x| x == 0xaa));
        assert_eq!(
            buf[4096],
            (4096 % 251) as u8,
            "bytes outside every view kept"
        );
        assert_eq!(buf[16383], 0x55);
    }

    #[test]
    #[allow(clippy::reversed_empty_ranges)]
    fn overlapping_empty_and_out_of_range_ranges_are_refused() {
        let cases: [(Vec<Range<usize>>, ViewError); 6] = [
            (vec![], ViewError::NoRanges),
            (vec![0..10, 10..10], ViewError::Empty(10..10)),
            (vec![7..3], ViewError::Empty(7..3)),
            (
                vec![0..4096, 4000..4097],
                ViewError::OutOfRange {
                    range: 4000..4097,
                    len: 4096,
                },
            ),
            (vec![100..200, 0..101], ViewError::Overlap(0..101, 100..200)),
            (
                vec![0..4096, 1000..1001],
                ViewError::Overlap(0..4096, 1000..1001),
            ),
        ];
        for (ranges, want) in cases {
            let buf = numbered(4096);
            let base = buf.as_ptr();
            let e = buf.into_views(ranges.clone()).unwrap_err();
            assert_eq!(e.reason, want, "{ranges:?}");
            assert_eq!(e.buf.as_ptr(), base, "the buffer comes back");
            assert_eq!(e.buf[4095], (4095 % 251) as u8);
        }
        // Adjacent ranges share no byte.
        assert_eq!(numbered(4096).into_views([0..1, 1..4096]).unwrap().len(), 2);
    }

    #[test]
    fn reunite_needs_every_view_still_held_and_one_buffer() {
        let mut views = numbered(8192).into_views([0..4096, 4096..8192]).unwrap();
        let other = views.pop().unwrap();
        let e = BufView::reunite(views).unwrap_err();
        assert_eq!(e.reason, ViewError::Outstanding(1));
        let mut views = e.views;
        assert_eq!(views.len(), 1);
        let stranger = numbered(4096).into_views([0..4096]).unwrap();
        views.extend(stranger);
        let e = BufView::reunite(views).unwrap_err();
        assert_eq!(e.reason, ViewError::MixedBuffers);
        let mut views = e.views;
        drop(views.pop());
        views.push(other);
        let buf = BufView::reunite(views).unwrap();
        assert_eq!(buf.len(), 8192);
        assert_eq!(
            BufView::reunite(Vec::new()).unwrap_err().reason,
            ViewError::NoRanges
        );
    }

    /// The allocation goes with the last view, whichever it is, and a view
    /// dropped early (a cancelled request's) leaves the rest usable and
    /// reunitable.
    #[test]
    fn the_last_view_frees_the_allocation() {
        let mut views = numbered(12288)
            .into_views([0..4096, 4096..8192, 8192..12288])
            .unwrap();
        let weak = Arc::downgrade(&views[0].owner);
        let middle = views.remove(1);
        let first = views.remove(0);
        drop(first);
        assert!(weak.upgrade().is_some(), "two views left");
        let last = views.pop().unwrap();
        drop(middle);
        assert!(weak.upgrade().is_some(), "one view left");
        assert_eq!(last[0], (8192 % 251) as u8, "still readable");
        drop(last);
        assert!(weak.upgrade().is_none(), "freed with the last view");

        // An early drop: the others still reunite (the dropped range keeps
        // whatever was written through it).
        let mut views = numbered(8192).into_views([0..4096, 4096..8192]).unwrap();
        views[0].fill(1);
        drop(views.remove(0));
        let buf = BufView::reunite(views).unwrap();
        assert!(buf[..4096].iter().all(|&x| x == 1));
    }

    #[test]
    fn alignment_follows_the_block_size_up_to_4096() {
        let views = DmaBuf::new(65536)
            .into_views([0..512, 512..4096, 4096..8192, 8192..65536])
            .unwrap();
        assert!(views.iter().all(|v| v.aligned_for(512)));
        assert!(!views[1].aligned_for(4096));
        assert!(views[2].aligned_for(4096));
        assert!(views[3].aligned_for(65536), "4096 is enough for any block");
        assert!(!views[1].aligned_for(1024));
    }

    #[test]
    fn a_detached_view_is_its_own_buffer() {
        let v = BufView::detached(4096);
        assert_eq!(v.len(), 4096);
        assert!(v.iter().all(|&x| x == 0));
        let buf = BufView::reunite(vec![v]).unwrap();
        assert_eq!(buf.len(), 4096);
    }
}
