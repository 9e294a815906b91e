//! What a connection sends next: PDU headers and small data are copied into
//! one byte buffer, large read data is sent from the bdev's buffer without a
//! copy, and the whole batch goes out with as few writes as possible once
//! the connection has nothing more to process.

use bdev::DmaBuf;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::bufpool::{BufPool, Grant};

/// Read data up to this size is copied next to its header, so that small
/// reads cost one write for many PDUs.
pub const INLINE_DATA_MAX: usize = 16 << 10;

enum Segment {
    /// `bytes[from..to]`.
    Inline(usize, usize),
    /// A buffer sent as is, with the budget units it holds until written.
    Buffer(DmaBuf, Option<Grant>),
}

/// Queued output.
#[derive(Default)]
pub struct Outbox {
    bytes: Vec<u8>,
    segments: Vec<Segment>,
}

impl Outbox {
    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }

    fn extend_inline(&mut self, from: usize) {
        let to = self.bytes.len();
        if from == to {
            return;
        }
        if let Some(Segment::Inline(_, end)) = self.segments.last_mut() {
            if *end == from {
                *end = to;
                return;
            }
        }
        self.segments.push(Segment::Inline(from, to));
    }

    /// Lets `f` write up to `max` bytes at the end of the byte buffer; `f`
    /// returns how many it wrote.
    pub fn put_with(&mut self, max: usize, f: impl FnOnce(&mut [u8]) -> usize) {
        let from = self.bytes.len();
        self.bytes.resize(from + max, 0);
        let n = f(&mut self.bytes[from..]);
        self.bytes.truncate(from + n);
        self.extend_inline(from);
    }

    /// Queues `data` as a copy.
    pub fn put(&mut self, data: &[u8]) {
        let from = self.bytes.len();
        self.bytes.extend_from_slice(data);
        self.extend_inline(from);
    }

    /// Queues a buffer by ownership (returned to `pool` once written, its
    /// `grant` given back then).
    pub fn put_buffer(&mut self, buf: DmaBuf, grant: Option<Grant>) {
        self.segments.push(Segment::Buffer(buf, grant));
    }

    /// Writes everything queued and returns buffers to `pool`.
    pub async fn flush<W: AsyncWrite + Unpin>(
        &mut self,
        w: &mut W,
        pool: &mut BufPool,
    ) -> std::io::Result<()> {
        let mut result = Ok(());
        for seg in self.segments.drain(..) {
            match seg {
                Segment::Inline(a, b) => {
                    if result.is_ok() {
                        result = w.write_all(&self.bytes[a..b]).await;
                    }
                }
                Segment::Buffer(buf, grant) => {
                    if result.is_ok() {
                        result = w.write_all(&buf).await;
                    }
                    pool.give(buf);
                    drop(grant);
                }
            }
        }
        self.bytes.clear();
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn keeps_order_and_merges_inline_bytes() {
        let mut o = Outbox::default();
        o.put(b"ab");
        o.put_with(8, |b| {
            b[..3].copy_from_slice(b"cde");
            3
        });
        o.put_buffer(DmaBuf::from_slice(b"BIG"), None);
        o.put(b"z");
        assert_eq!(o.segments.len(), 3);
        let mut sink = Vec::new();
        let mut pool = BufPool::default();
        o.flush(&mut sink, &mut pool).await.unwrap();
        assert_eq!(sink, b"abcdeBIGz");
        assert!(o.is_empty());
    }
}
