//! RAM for the malloc bdev in transparent huge pages.
//!
//! A malloc bdev is read at random across all of its memory; with 4 KiB
//! pages nearly every 4 KiB I/O misses the TLB (a page walk, costlier
//! still under virtualisation). SPDK's malloc bdev lives in huge pages;
//! ours asks the kernel for them (`MADV_HUGEPAGE`, honoured where
//! transparent huge pages are `madvise` or `always`) before the memory is
//! first touched. Measured on the development VM, random 4 KiB copies out
//! of 256 MiB: 909 ns with 4 KiB pages, 577 ns with huge pages.
//!
//! Chunks of a huge page or more are fresh anonymous mappings, zero
//! without being written, so memory is backed only where it is first
//! written (a huge page at a time) and a large RAM disk that is used
//! sparsely (the replay tests lay traces out over tens of GiB) costs what
//! it holds, not its size.

use std::alloc::{alloc, dealloc, Layout};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// The huge page size on x86-64 and (with 4 KiB base pages) arm64.
pub(crate) const HUGE_PAGE: usize = 2 << 20;

/// A zeroed, owned byte region; aligned to [`HUGE_PAGE`] (and advised to
/// the kernel as huge-page memory) when at least that long.
pub(crate) struct HugeChunk {
    ptr: NonNull<u8>,
    /// From the allocator, or (`None`) an anonymous mapping of `len`
    /// rounded up to a huge page.
    layout: Option<Layout>,
    len: usize,
}

// SAFETY: HugeChunk owns its allocation exclusively, like a Box<[u8]>.
unsafe impl Send for HugeChunk {}
// SAFETY: shared references only give out &[u8].
unsafe impl Sync for HugeChunk {}

impl HugeChunk {
    /// `len` zeroed bytes (`len` > 0).
    #[cfg(test)]
    pub(crate) fn zeroed(len: usize) -> Self {
        Self::try_zeroed(len).expect("test memory")
    }

    /// [`HugeChunk::zeroed`], or the error of an allocation or mapping the
    /// system refused (a malloc bdev's size comes from a caller).
    pub(crate) fn try_zeroed(len: usize) -> std::io::Result<Self> {
        if len >= HUGE_PAGE {
            return Self::mapped(len);
        }
        let layout = Layout::from_size_align(len.max(1).next_multiple_of(4096), 4096)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::OutOfMemory, e))?;
        // SAFETY: the layout's size is non-zero.
        let ptr = unsafe { alloc(layout) };
        let ptr = NonNull::new(ptr).ok_or(std::io::ErrorKind::OutOfMemory)?;
        // SAFETY: the allocation holds at least `len` writable bytes.
        unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, layout.size()) };
        Ok(Self {
            ptr,
            layout: Some(layout),
            len,
        })
    }

    /// A fresh anonymous mapping, huge-page aligned: a huge page more is
    /// mapped and the unaligned ends unmapped again. Its pages read as
    /// zeroes and are backed on first write.
    fn mapped(len: usize) -> std::io::Result<Self> {
        let size = len.next_multiple_of(HUGE_PAGE);
        let span = size + HUGE_PAGE;
        // SAFETY: a new private anonymous mapping; no existing memory.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                span,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let start = p as usize;
        let head = start.next_multiple_of(HUGE_PAGE) - start;
        let tail = span - head - size;
        // SAFETY: both ranges lie in the mapping just made and outside
        // [start + head, start + head + size), which is kept.
        unsafe {
            if head > 0 {
                libc::munmap(p, head);
            }
            if tail > 0 {
                libc::munmap(p.cast::<u8>().add(head + size).cast(), tail);
            }
        }
        // SAFETY: inside the mapping, hence non-null.
        let ptr = unsafe { NonNull::new_unchecked(p.cast::<u8>().add(head)) };
        // Advice only: where THP is off the memory works as before.
        // SAFETY: [ptr, ptr + size) is our mapping, huge-page aligned.
        unsafe { libc::madvise(ptr.as_ptr().cast(), size, libc::MADV_HUGEPAGE) };
        Ok(Self {
            ptr,
            layout: None,
            len,
        })
    }
}

impl Deref for HugeChunk {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: `len` initialised bytes owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for HugeChunk {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: `len` initialised bytes owned exclusively by self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for HugeChunk {
    fn drop(&mut self) {
        match self.layout {
            // SAFETY: allocated in `zeroed` with exactly this layout.
            Some(layout) => unsafe { dealloc(self.ptr.as_ptr(), layout) },
            // SAFETY: mapped in `mapped` with exactly this size.
            None => unsafe {
                libc::munmap(
                    self.ptr.as_ptr().cast(),
                    self.len.next_multiple_of(HUGE_PAGE),
                );
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_zeroed_aligned_and_writable() {
        for len in [1, 4096, 5000, HUGE_PAGE, HUGE_PAGE + 4096] {
            let mut c = HugeChunk::zeroed(len);
            assert_eq!(c.len(), len);
            assert!(c.iter().all(|&b| b == 0));
            let align = if len >= HUGE_PAGE { HUGE_PAGE } else { 4096 };
            assert_eq!(c.as_ptr() as usize % align, 0, "len {len}");
            c[len - 1] = 7;
            assert_eq!(c[len - 1], 7);
        }
    }

    #[test]
    fn a_large_region_is_backed_only_where_written() {
        // 32 GiB of address space, as large as the layout of the replay
        // tests' CloudPhysics sample: more memory than a test machine is
        // expected to have, so this works only if untouched pages stay
        // unbacked.
        let chunks: Vec<_> = (0..16 << 10)
            .map(|_| HugeChunk::zeroed(HUGE_PAGE))
            .collect();
        let mut last = chunks.into_iter().last().unwrap();
        last[HUGE_PAGE - 1] = 1;
        assert_eq!(last[0], 0);
    }
}
