//! Mirrored write-back between two volumes on one core, the mirror
//! reached in process: every acknowledged write is on the mirror, the
//! owner's write-backs clean it only by marks, a promoted mirror brings
//! core to what was acknowledged, a broken mirror holds answers until it
//! is dropped, a new mirror is synced by writing back what it lacks.
//! (The same over NVMe/TCP, with the vendor mark command: the daemon's
//! `mirror` test.)

mod common;

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use bdev::malloc::MallocBdev;
use bdev::{Bdev, BoxFuture, DmaBuf};
use cache::device::CacheDevice;
use cache::volume::replica::{Replica, ReplicaError, Role};
use cache::volume::{CachedVolume, VolumeError};
use common::{counted, create, params, raw, Devices, Model, Rng};

const VOLUME_MIB: u64 = 16;
const SECTOR: u32 = 512;

/// The mirror's volume, reached directly; `broken` makes every operation
/// fail as a lost connection would.
struct Local {
    volume: CachedVolume,
    bdev: Arc<Bdev>,
    broken: Arc<AtomicBool>,
}

impl Local {
    fn check(&self) -> Result<(), ReplicaError> {
        match self.broken.load(Relaxed) {
            true => Err("connection to the mirror lost".into()),
            false => Ok(()),
        }
    }
}

impl Replica for Local {
    fn write(
        &self,
        offset: u64,
        data: DmaBuf,
        fua: bool,
    ) -> BoxFuture<'static, Result<(), ReplicaError>> {
        let (b, ok) = (self.bdev.clone(), self.check());
        Box::pin(async move {
            ok?;
            let (_, r) = match fua {
                true => b.write_fua(offset, data).await,
                false => b.write(offset, data).await,
            };
            r.map_err(|e| e.to_string())
        })
    }
    fn deallocate(&self, offset: u64, len: u64) -> BoxFuture<'static, Result<(), ReplicaError>> {
        let (b, ok) = (self.bdev.clone(), self.check());
        Box::pin(async move {
            ok?;
            b.unmap(offset, len).await.map_err(|e| e.to_string())
        })
    }
    fn mark_clean(&self, offset: u64, len: u64) -> BoxFuture<'static, Result<(), ReplicaError>> {
        let (v, ok) = (self.volume.clone(), self.check());
        Box::pin(async move {
            ok?;
            v.mark_clean(offset, len)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        })
    }
    fn flush(&self) -> BoxFuture<'static, Result<(), ReplicaError>> {
        let (b, ok) = (self.bdev.clone(), self.check());
        Box::pin(async move {
            ok?;
            b.flush().await.map_err(|e| e.to_string())
        })
    }
    fn describe(&self) -> String {
        "in-process mirror".into()
    }
}

struct Pair {
    d: Devices,
    owner: CachedVolume,
    owner_bdev: Arc<Bdev>,
    mirror: CachedVolume,
    mirror_bdev: Arc<Bdev>,
    broken: Arc<AtomicBool>,
}

/// An owner (aggressive cleaning, so write-backs and marks run while
/// writes go on) and a mirror on its own cache device, one core.
async fn pair(attach: bool) -> Pair {
    let d = Devices::new(VOLUME_MIB, 12, false);
    let dev = d.open_cache().await;
    let wb = serde_json::json!({"write_mode": "wb", "cache_size_mib": 6,
        "cleaning": {"policy": "aggressive", "dirty_ratio": 0.05, "batch_blocks": 8, "wake_up_ms": 5}});
    let (owner, owner_bdev) = create(&d, &dev, params(wb.clone())).await;
    let mirror_dev = CacheDevice::open(
        counted(Bdev::Malloc(
            MallocBdev::new("nvme", 12 << 11, SECTOR).unwrap(),
        )),
        true,
    )
    .await
    .unwrap();
    let mut mp = params(wb);
    mp.role = Role::Mirror;
    let (mirror, mirror_bdev) = create(&d, &mirror_dev, mp).await;
    let broken = Arc::new(AtomicBool::new(false));
    if attach {
        owner
            .set_replica(Some(local(&mirror, &mirror_bdev, &broken)))
            .await
            .unwrap();
    }
    Pair {
        d,
        owner,
        owner_bdev,
        mirror,
        mirror_bdev,
        broken,
    }
}

fn local(mirror: &CachedVolume, b: &Arc<Bdev>, broken: &Arc<AtomicBool>) -> Arc<dyn Replica> {
    Arc::new(Local {
        volume: mirror.clone(),
        bdev: b.clone(),
        broken: broken.clone(),
    })
}

/// Writes (and some deallocates) from 8 concurrent writers on disjoint
/// stripes, each overwriting its own bytes many times; the model records
/// what was acknowledged.
async fn write_load(b: &Arc<Bdev>, seed: u64, rounds: usize) -> Model {
    let size = (VOLUME_MIB << 20) as usize;
    let stripe = size as u64 / 8;
    let mut tasks = Vec::new();
    for w in 0..8u64 {
        let b = b.clone();
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng(seed * 100 + w + 1);
            let mut done = Vec::new();
            for _ in 0..rounds {
                let len = (1 + rng.below(16)) * 4096;
                let off = w * stripe + rng.below((stripe - len) / 4096) * 4096;
                if rng.below(10) == 0 {
                    b.unmap(off, len).await.unwrap();
                    done.push((off, None, len));
                } else {
                    let mut data = vec![0u8; len as usize];
                    rng.fill(&mut data);
                    let (_, r) = b.write(off, DmaBuf::from_slice(&data)).await;
                    r.unwrap();
                    done.push((off, Some(data), len));
                }
            }
            done
        }));
    }
    let mut model = Model::new(size);
    for t in tasks {
        for (off, data, len) in t.await.unwrap() {
            match data {
                Some(d) => model.write(off, &d),
                None => model.zero(off, len),
            }
        }
    }
    model
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_mirror_brings_core_to_every_acknowledged_write() {
    let p = pair(true).await;
    let model = write_load(&p.owner_bdev, 1, 150).await;
    let owner = p.owner.stats().await.unwrap();
    let replica = owner.replica.clone().expect("the owner reports its mirror");
    assert_eq!(replica.state, "in-sync");
    assert!(replica.writes > 0 && replica.deallocates > 0);
    assert!(
        owner.flushed_bytes > 0,
        "the owner cleaned while writes went on"
    );
    assert!(replica.marks > 0, "and told the mirror");
    let mirror = p.mirror.stats().await.unwrap();
    assert_eq!(mirror.role, "mirror");
    assert!(mirror.marked_clean_bytes > 0);
    assert_eq!(mirror.flushed_bytes, 0, "a mirror writes nothing back");
    assert!(
        mirror.dirty_bytes >= owner.dirty_bytes,
        "the mirror's dirty set covers the owner's: {} < {}",
        mirror.dirty_bytes,
        owner.dirty_bytes
    );

    // The owner is lost with its cache: core alone lacks acknowledged
    // writes (dirty on the owner), the mirror has them.
    assert!(
        owner.dirty_bytes > 0,
        "some acknowledged writes are in the caches only"
    );
    p.owner.stop(false).await.unwrap();
    p.mirror.set_role(Role::Owner, None).await.unwrap();
    p.mirror.flush_all().await.unwrap();
    let size = VOLUME_MIB << 20;
    model.check(
        0,
        &raw(p.d.core_ram.bdev(), 0, size).await,
        "core after the promoted mirror flushed",
    );
    model.check(
        0,
        &raw(&p.mirror_bdev, 0, size).await,
        "read through the promoted mirror",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirror_cleans_only_by_marks_and_an_owner_takes_none() {
    let p = pair(false).await;
    let data = vec![7u8; 64 << 10];
    p.mirror_bdev
        .write(1 << 20, DmaBuf::from_slice(&data))
        .await
        .1
        .unwrap();
    assert!(matches!(
        p.mirror.flush_all().await,
        Err(VolumeError::Flush(_))
    ));
    assert!(
        p.mirror.delete(false).await.is_err(),
        "deleting a mirror with dirty data needs force"
    );
    let st = p.mirror.stats().await.unwrap();
    assert_eq!((st.dirty_bytes, st.flushed_bytes), (64 << 10, 0));
    // A mark that covers part of the dirty bytes cleans nothing.
    assert_eq!(p.mirror.mark_clean(1 << 20, 32 << 10).await.unwrap(), 0);
    assert_eq!(
        p.mirror.mark_clean(1 << 20, 64 << 10).await.unwrap(),
        64 << 10
    );
    assert_eq!(p.mirror.stats().await.unwrap().dirty_bytes, 0);
    assert!(
        p.owner.mark_clean(0, 4096).await.is_err(),
        "an owner is cleaned by its own write-back only"
    );
    let broken = Arc::new(AtomicBool::new(false));
    let r = local(&p.owner, &p.owner_bdev, &broken);
    assert!(
        p.mirror.set_replica(Some(r)).await.is_err(),
        "a mirror forwards to nobody"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_mirror_holds_answers_until_it_is_dropped() {
    let p = pair(true).await;
    p.broken.store(true, Relaxed);
    let b = p.owner_bdev.clone();
    let write = tokio::spawn(async move {
        let (_, r) = b.write(0, DmaBuf::from_slice(&[5u8; 4096])).await;
        r
    });
    // Held: the write is durable here only.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !write.is_finished(),
        "a write the mirror failed is not acknowledged"
    );
    let st = p.owner.stats().await.unwrap().replica.unwrap();
    assert_eq!(st.state, "broken");
    assert!(st.error.unwrap().contains("connection to the mirror lost"));
    // A flush is held as well.
    let b = p.owner_bdev.clone();
    let flush = tokio::spawn(async move { b.flush().await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!flush.is_finished());
    // The control plane drops the mirror: both are answered, successfully.
    p.owner.set_replica(None).await.unwrap();
    write.await.unwrap().unwrap();
    flush.await.unwrap().unwrap();
    assert!(p.owner.stats().await.unwrap().replica.is_none());
    assert_eq!(raw(&p.owner_bdev, 0, 4096).await, vec![5u8; 4096]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_mirror_is_synced_by_writing_back_what_it_lacks() {
    let p = pair(false).await;
    // Nop cleaning: the dirty data stays until the attach.
    p.owner
        .set_policy(cache::volume::PolicyChange {
            cleaning: Some(cache::volume::Cleaning::Nop {}),
            ..Default::default()
        })
        .await
        .unwrap();
    let before = write_load(&p.owner_bdev, 2, 40).await;
    assert!(p.owner.stats().await.unwrap().dirty_bytes > 0);
    p.owner
        .set_replica(Some(local(&p.mirror, &p.mirror_bdev, &p.broken)))
        .await
        .unwrap();
    let mut state = "";
    for _ in 0..200 {
        state = p.owner.stats().await.unwrap().replica.unwrap().state;
        if state == "in-sync" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(state, "in-sync", "the sync flush ends");
    let size = VOLUME_MIB << 20;
    before.check(
        0,
        &raw(p.d.core_ram.bdev(), 0, size).await,
        "core after the sync",
    );
    assert_eq!(
        p.mirror.stats().await.unwrap().dirty_bytes,
        0,
        "nothing was copied to the mirror"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaving_write_back_marks_the_mirror_clean_and_drops_it() {
    let p = pair(true).await;
    write_load(&p.owner_bdev, 3, 60).await;
    assert!(p.mirror.stats().await.unwrap().dirty_bytes > 0);
    p.owner
        .set_mode(cache::volume::CacheMode::Wt)
        .await
        .unwrap();
    // Written through from now on: nothing reaches the mirror, whose
    // dirty bytes (in core since the switch's flush) must never be
    // written back over newer data.
    let mut dropped = false;
    for _ in 0..200 {
        if p.owner.stats().await.unwrap().replica.is_none() {
            dropped = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(dropped, "the mirror is dropped once marked clean");
    assert_eq!(p.mirror.stats().await.unwrap().dirty_bytes, 0);
    p.owner_bdev
        .write(0, DmaBuf::from_slice(&[9u8; 4096]))
        .await
        .1
        .unwrap();
    assert_eq!(p.mirror.stats().await.unwrap().usage.dirty_bytes, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_loaded_with_an_epoch_writes_nothing_back_until_confirmed() {
    let d = Devices::new(VOLUME_MIB, 12, false);
    let dev = d.open_cache().await;
    let wb = serde_json::json!({"write_mode": "wb", "cache_size_mib": 6, "epoch": 3,
        "cleaning": {"policy": "aggressive", "dirty_ratio": 0.0, "batch_blocks": 8, "wake_up_ms": 5}});
    let (v, b) = create(&d, &dev, params(wb.clone())).await;
    assert!(
        !v.stats().await.unwrap().held,
        "created, not loaded: confirmed"
    );
    // Dirty data a restart finds (the volume stopped without a flush).
    v.set_policy(cache::volume::PolicyChange {
        cleaning: Some(cache::volume::Cleaning::Nop {}),
        ..Default::default()
    })
    .await
    .unwrap();
    let model = write_load(&b, 4, 30).await;
    v.stop(false).await.unwrap();
    let mut loaded = params(wb);
    loaded.load = true;
    let (v, b) = create(&d, &dev, loaded).await;
    let st = v.stats().await.unwrap();
    assert!(
        st.held && st.epoch == Some(3) && st.dirty_bytes > 0,
        "{st:?}"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        v.stats().await.unwrap().flushed_bytes,
        0,
        "aggressive cleaning is held"
    );
    assert!(matches!(v.flush_all().await, Err(VolumeError::Flush(e)) if e.contains("epoch 3")));
    // The volume serves reads meanwhile (its paths are the control plane's).
    let size = VOLUME_MIB << 20;
    model.check(0, &raw(&b, 0, size).await, "read while held");
    assert!(
        v.set_role(Role::Owner, Some(2)).await.is_err(),
        "an older epoch is refused"
    );
    assert!(v.stats().await.unwrap().held);
    v.set_role(Role::Owner, Some(4)).await.unwrap();
    v.flush_all().await.unwrap();
    let st = v.stats().await.unwrap();
    assert!(
        !st.held && st.epoch == Some(4) && st.dirty_bytes == 0,
        "{st:?}"
    );
    model.check(
        0,
        &raw(d.core_ram.bdev(), 0, size).await,
        "core once confirmed and flushed",
    );
}
