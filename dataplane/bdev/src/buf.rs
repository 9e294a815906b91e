//! I/O buffers aligned for O_DIRECT, and `IoBuf`, the one internal
//! interface every bdev kind's read and write code is written against, so
//! that whole buffers ([`DmaBuf`]) and views of them ([`BufView`]) take the
//! same path to the device.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;
use std::time::Instant;

use crate::layered::{LayeredBdev, ReadInline};
use crate::{BdevError, BoxFuture, BufView, Result};

/// Alignment of every [`DmaBuf`]: enough for O_DIRECT on any device with a
/// logical block size up to 4 KiB.
pub const DMA_ALIGN: usize = 4096;

/// A zero-initialised heap buffer aligned to [`DMA_ALIGN`].
///
/// Owned buffers move into a bdev operation and come back with its result,
/// so the device may keep using the memory until it completes.
pub struct DmaBuf {
    ptr: NonNull<u8>,
    len: usize,
    cap: usize,
}

// SAFETY: DmaBuf owns its allocation exclusively, like a Vec<u8>.
unsafe impl Send for DmaBuf {}
// SAFETY: shared references only give out &[u8].
unsafe impl Sync for DmaBuf {}

impl DmaBuf {
    /// A zeroed buffer of `len` bytes (`len` may be 0).
    pub fn new(len: usize) -> Self {
        let cap = len.max(1).next_multiple_of(DMA_ALIGN);
        let layout = Layout::from_size_align(cap, DMA_ALIGN).expect("buffer size overflows");
        // SAFETY: layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        Self { ptr, len, cap }
    }

    /// A buffer holding a copy of `data`.
    pub fn from_slice(data: &[u8]) -> Self {
        let mut b = Self::new(data.len());
        b.copy_from_slice(data);
        b
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Sets the length to `len` bytes, which must fit the allocation; new
    /// bytes are whatever the buffer held (zero when never written).
    pub fn set_len(&mut self, len: usize) {
        assert!(len <= self.cap, "DmaBuf::set_len beyond capacity");
        self.len = len;
    }

    /// Bytes allocated.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// The allocation's first byte, without creating a reference to the
    /// bytes (views use it while others write through theirs).
    pub(crate) fn base_ptr(&self) -> NonNull<u8> {
        self.ptr
    }
}

/// A buffer a bdev operation owns while the device reads or writes it
/// through a raw pointer, and gives back with the result: [`DmaBuf`] or
/// [`BufView`]. Each kind's I/O code is generic over it (one path for
/// both); what must be type-erased (the state a completion thread or
/// librbd's callback receives) holds an [`AnyBuf`].
pub(crate) trait IoBuf:
    std::ops::DerefMut<Target = [u8]> + Sized + Send + Sync + 'static
{
    /// The type-erased form.
    fn into_any(self) -> AnyBuf;
    /// Back from [`IoBuf::into_any`]; `None` only for the other kind,
    /// which no operation gives back for this one.
    fn from_any(any: AnyBuf) -> Option<Self>;
    /// A zeroed buffer of `len` bytes returned with the error of an
    /// operation that lost its buffer (a blocking task that did not
    /// finish): an I/O path never panics.
    fn stand_in(len: usize) -> Self;
    /// Refuses a buffer whose memory is not aligned for a bdev with
    /// `block_size`-byte blocks (O_DIRECT); a `DmaBuf` always is.
    fn check_aligned(&self, block_size: u32) -> Result<()>;
    /// [`LayeredBdev::read_inline`] for this kind of buffer (views: never).
    fn layered_read_inline(
        l: &dyn LayeredBdev,
        offset: u64,
        buf: Self,
        arrived: Instant,
    ) -> ReadInline<Self>;
    /// [`LayeredBdev`]'s read for this kind of buffer.
    fn layered_read(
        l: &dyn LayeredBdev,
        offset: u64,
        buf: Self,
    ) -> BoxFuture<'_, (Self, Result<()>)>;
    /// [`LayeredBdev`]'s write (durable before completion when `fua`).
    fn layered_write(
        l: &dyn LayeredBdev,
        offset: u64,
        buf: Self,
        fua: bool,
    ) -> BoxFuture<'_, (Self, Result<()>)>;
}

/// The buffer, of either kind, that a pending io_uring or librbd operation
/// owns until its completion.
pub(crate) enum AnyBuf {
    Dma(DmaBuf),
    View(BufView),
}

impl AnyBuf {
    /// The first byte, for the device; stays valid while the buffer moves
    /// (its bytes are on the heap).
    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        match self {
            Self::Dma(b) => b.as_mut_ptr(),
            Self::View(v) => v.as_mut_ptr(),
        }
    }

    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        match self {
            Self::Dma(b) => b.len(),
            Self::View(v) => v.len(),
        }
    }
}

/// The buffer an operation gave back, or a stand-in of `len` bytes if it
/// lost it.
pub(crate) fn back<B: IoBuf>(any: Option<AnyBuf>, len: usize) -> B {
    any.and_then(B::from_any)
        .unwrap_or_else(|| B::stand_in(len))
}

impl IoBuf for DmaBuf {
    fn into_any(self) -> AnyBuf {
        AnyBuf::Dma(self)
    }
    fn from_any(any: AnyBuf) -> Option<Self> {
        match any {
            AnyBuf::Dma(b) => Some(b),
            AnyBuf::View(_) => None,
        }
    }
    fn stand_in(len: usize) -> Self {
        DmaBuf::new(len)
    }
    fn check_aligned(&self, _block_size: u32) -> Result<()> {
        Ok(())
    }
    fn layered_read_inline(
        l: &dyn LayeredBdev,
        offset: u64,
        buf: Self,
        arrived: Instant,
    ) -> ReadInline<Self> {
        l.read_inline(offset, buf, arrived)
    }
    fn layered_read(
        l: &dyn LayeredBdev,
        offset: u64,
        buf: Self,
    ) -> BoxFuture<'_, (Self, Result<()>)> {
        l.read(offset, buf)
    }
    fn layered_write(
        l: &dyn LayeredBdev,
        offset: u64,
        buf: Self,
        fua: bool,
    ) -> BoxFuture<'_, (Self, Result<()>)> {
        if fua {
            l.write_fua(offset, buf)
        } else {
            l.write(offset, buf)
        }
    }
}

impl IoBuf for BufView {
    fn into_any(self) -> AnyBuf {
        AnyBuf::View(self)
    }
    fn from_any(any: AnyBuf) -> Option<Self> {
        match any {
            AnyBuf::View(v) => Some(v),
            AnyBuf::Dma(_) => None,
        }
    }
    fn stand_in(len: usize) -> Self {
        BufView::detached(len)
    }
    fn check_aligned(&self, block_size: u32) -> Result<()> {
        if self.aligned_for(block_size) {
            return Ok(());
        }
        Err(BdevError::InvalidArgument(format!(
            "a view starting at byte {} of its buffer is not aligned for I/O on a bdev of \
             {block_size}-byte blocks (it must start at a multiple of the block size, or of \
             {DMA_ALIGN} for larger blocks)",
            self.range().start
        )))
    }
    fn layered_read_inline(
        _l: &dyn LayeredBdev,
        _offset: u64,
        buf: Self,
        _arrived: Instant,
    ) -> ReadInline<Self> {
        Err(buf)
    }
    fn layered_read(
        l: &dyn LayeredBdev,
        offset: u64,
        buf: Self,
    ) -> BoxFuture<'_, (Self, Result<()>)> {
        l.read_view(offset, buf)
    }
    fn layered_write(
        l: &dyn LayeredBdev,
        offset: u64,
        buf: Self,
        fua: bool,
    ) -> BoxFuture<'_, (Self, Result<()>)> {
        if fua {
            l.write_fua_view(offset, buf)
        } else {
            l.write_view(offset, buf)
        }
    }
}

impl std::ops::Deref for DmaBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is valid for cap >= len initialised bytes.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for DmaBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and we hold the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for DmaBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this exact layout.
        unsafe {
            dealloc(
                self.ptr.as_ptr(),
                Layout::from_size_align_unchecked(self.cap, DMA_ALIGN),
            )
        }
    }
}

impl std::fmt::Debug for DmaBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DmaBuf").field("len", &self.len).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_zeroed_and_resizable() {
        let mut b = DmaBuf::new(5000);
        assert_eq!(b.as_ptr() as usize % DMA_ALIGN, 0);
        assert_eq!(b.len(), 5000);
        assert_eq!(b.capacity(), 8192);
        assert!(b.iter().all(|&x| x == 0));
        b[4999] = 7;
        b.set_len(8192);
        assert_eq!(b[4999], 7);
        let e = DmaBuf::new(0);
        assert!(e.is_empty());
        assert_eq!(&*DmaBuf::from_slice(b"abc"), b"abc");
    }
}
