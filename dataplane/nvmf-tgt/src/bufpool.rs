//! A per-connection pool of I/O buffers, so steady-state I/O reuses the
//! same few [`DmaBuf`]s instead of allocating one per command.

use bdev::DmaBuf;

/// Buffers kept per connection at most.
const MAX_POOLED: usize = 64;
/// Bytes kept per connection at most.
const MAX_POOLED_BYTES: usize = 16 << 20;

/// Free buffers of any size; a request takes the first that is big enough.
#[derive(Default)]
pub struct BufPool {
    free: Vec<DmaBuf>,
    bytes: usize,
}

impl BufPool {
    /// A buffer of exactly `len` bytes (contents unspecified).
    pub fn take(&mut self, len: usize) -> DmaBuf {
        if let Some(i) = self.free.iter().position(|b| b.capacity() >= len) {
            let mut b = self.free.swap_remove(i);
            self.bytes -= b.capacity();
            b.set_len(len);
            return b;
        }
        DmaBuf::new(len)
    }

    /// Returns a buffer for reuse (dropped when the pool is full).
    pub fn give(&mut self, b: DmaBuf) {
        if self.free.len() < MAX_POOLED && self.bytes + b.capacity() <= MAX_POOLED_BYTES {
            self.bytes += b.capacity();
            self.free.push(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_big_enough_buffers() {
        let mut p = BufPool::default();
        let b = p.take(8192);
        let ptr = b.as_ptr();
        p.give(b);
        let b = p.take(4096);
        assert_eq!(b.as_ptr(), ptr, "reused");
        assert_eq!(b.len(), 4096);
        let big = p.take(1 << 20);
        assert_eq!(big.len(), 1 << 20);
        p.give(b);
        p.give(big);
        assert_eq!(p.free.len(), 2);
    }
}
