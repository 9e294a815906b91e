//! I/O buffers aligned for O_DIRECT.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;

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
