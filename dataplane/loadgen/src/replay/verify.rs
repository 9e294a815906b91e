//! Data verification of a replay (`--verify`): every written LBA carries a
//! stamp (its LBA and how many times this run wrote it), and a read of an
//! LBA whose last write completed before the read was sent must return that
//! stamp. LBAs this run never wrote, or whose content is uncertain (writes
//! overlapping in flight, a failed write, a write sent while the read was in
//! flight), are not checked: their content is not known.

use std::collections::HashMap;

/// First bytes of every stamped LBA.
const MAGIC: &[u8; 8] = b"rcreplay";

#[derive(Clone, Copy, Debug, Default)]
struct Lba {
    submitted: u32,
    completed: u32,
    uncertain: bool,
}

/// What this run wrote where.
#[derive(Debug)]
pub struct Tracker {
    lba_size: usize,
    lbas: HashMap<u64, Lba>,
}

/// A read's expectations, taken when it was sent: per LBA, the generation
/// it must hold (`None`: not checked).
pub type Expected = Vec<Option<u32>>;

impl Tracker {
    /// A tracker for LBAs of `lba_size` bytes.
    pub fn new(lba_size: u32) -> Self {
        Self {
            lba_size: lba_size as usize,
            lbas: HashMap::new(),
        }
    }

    /// Records a write of `buf.len()` bytes at `slba` being sent and fills
    /// `buf` with its stamps.
    pub fn write_sent(&mut self, slba: u64, buf: &mut [u8]) {
        for (i, block) in buf.chunks_exact_mut(self.lba_size).enumerate() {
            let lba = slba + i as u64;
            let e = self.lbas.entry(lba).or_default();
            // Two writes in flight to one LBA may land in either order.
            e.uncertain = e.submitted != e.completed;
            e.submitted += 1;
            stamp(block, lba, e.submitted);
        }
    }

    /// Records the completion of a write of `blocks` LBAs at `slba`.
    pub fn write_done(&mut self, slba: u64, blocks: u64, ok: bool) {
        for lba in slba..slba + blocks {
            if let Some(e) = self.lbas.get_mut(&lba) {
                e.completed += 1;
                e.uncertain |= !ok;
            }
        }
    }

    /// What a read of `blocks` LBAs at `slba` sent now must return.
    pub fn read_sent(&self, slba: u64, blocks: u64) -> Expected {
        (slba..slba + blocks)
            .map(|lba| {
                let e = self.lbas.get(&lba)?;
                (e.submitted == e.completed && e.completed > 0 && !e.uncertain)
                    .then_some(e.submitted)
            })
            .collect()
    }

    /// Checks the data of a completed read against `expected`; returns the
    /// LBAs checked, or what the first mismatch was.
    pub fn check(&self, slba: u64, expected: &Expected, data: &[u8]) -> Result<u64, String> {
        let mut checked = 0;
        for (i, (want, block)) in expected
            .iter()
            .zip(data.chunks_exact(self.lba_size))
            .enumerate()
        {
            let lba = slba + i as u64;
            let Some(generation) = *want else { continue };
            // A write sent while the read was in flight may have landed.
            if self.lbas.get(&lba).map(|e| e.submitted) != Some(generation) {
                continue;
            }
            let mut good = vec![0u8; self.lba_size];
            stamp(&mut good, lba, generation);
            if block != good.as_slice() {
                return Err(format!(
                    "LBA {lba}: expected write {generation} of this run, read {}",
                    describe(block)
                ));
            }
            checked += 1;
        }
        Ok(checked)
    }
}

/// Fills one LBA with its stamp.
pub fn stamp(block: &mut [u8], lba: u64, generation: u32) {
    let fill = (lba as u8) ^ (generation as u8) ^ 0x5a;
    block.fill(fill);
    block[..8].copy_from_slice(MAGIC);
    block[8..16].copy_from_slice(&lba.to_le_bytes());
    block[16..20].copy_from_slice(&generation.to_le_bytes());
}

/// What a wrong block holds, in a few words.
fn describe(block: &[u8]) -> String {
    if block.iter().all(|&b| b == 0) {
        return "zeroes".into();
    }
    if &block[..8] == MAGIC {
        let lba = u64::from_le_bytes(block[8..16].try_into().expect("8 bytes"));
        let generation = u32::from_le_bytes(block[16..20].try_into().expect("4 bytes"));
        return format!("the stamp of LBA {lba} write {generation}");
    }
    "bytes that are no stamp of this run".into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_check_the_last_completed_write() {
        let mut t = Tracker::new(512);
        let mut buf = vec![0u8; 1024];
        t.write_sent(10, &mut buf);
        // In flight: not checked.
        assert_eq!(t.read_sent(10, 2), vec![None, None]);
        t.write_done(10, 2, true);
        let want = t.read_sent(9, 3);
        assert_eq!(want, vec![None, Some(1), Some(1)]);
        let mut data = vec![0u8; 1536];
        data[512..].copy_from_slice(&buf);
        assert_eq!(t.check(9, &want, &data), Ok(2));
        // A lost overwrite is found.
        let mut second = vec![0u8; 512];
        t.write_sent(11, &mut second);
        t.write_done(11, 1, true);
        let want = t.read_sent(11, 1);
        let err = t.check(11, &want, &buf[512..]).unwrap_err();
        assert!(err.contains("LBA 11 write 1"), "{err}");
        assert!(t
            .check(11, &want, &vec![0; 512])
            .unwrap_err()
            .contains("zeroes"));
    }

    #[test]
    fn overlapping_or_failed_writes_are_not_checked() {
        let mut t = Tracker::new(512);
        let (mut a, mut b) = (vec![0u8; 512], vec![0u8; 512]);
        t.write_sent(0, &mut a);
        t.write_sent(0, &mut b);
        t.write_done(0, 1, true);
        t.write_done(0, 1, true);
        assert_eq!(t.read_sent(0, 1), vec![None]);
        // A later single write makes it certain again, unless it fails.
        t.write_sent(0, &mut a);
        t.write_done(0, 1, true);
        assert_eq!(t.read_sent(0, 1), vec![Some(3)]);
        t.write_sent(0, &mut a);
        t.write_done(0, 1, false);
        assert_eq!(t.read_sent(0, 1), vec![None]);
        // A write sent while a read is in flight skips the check.
        t.write_sent(0, &mut a);
        t.write_done(0, 1, true);
        let want = t.read_sent(0, 1);
        t.write_sent(0, &mut b);
        assert_eq!(t.check(0, &want, &vec![0; 512]), Ok(0));
    }
}
