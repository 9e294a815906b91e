//! Unit metadata of a cache device: reading the newest valid copy, writing
//! the next one into the other copy, and emptying units given to a volume.

use super::*;

impl CacheDevice {
    /// Newest valid metadata copy of the volume's unit `index`; empty if no
    /// copy is valid or the valid ones belong to another volume or index.
    /// Not to be called while a write of the same unit is in flight.
    pub async fn read_unit_meta(
        &self,
        region: &VolumeRegion,
        index: u32,
    ) -> Result<UnitMeta, DeviceError> {
        let unit = self.owned_unit(region, index)?;
        let (state, meta) = self.read_copies(region, index, unit).await?;
        // What the device remembers is at least as new as what it read,
        // unless a failed write left it unsure; durability is kept.
        let mut units = self.lock_units();
        let known = units.entry(unit).or_insert(state);
        if known.reread {
            *known = UnitState {
                unflushed: known.unflushed,
                ..state
            };
        }
        drop(units);
        Ok(meta)
    }

    /// Every unit's metadata of the volume, in unit order (read a bounded
    /// number at a time). Units whose newest metadata cannot be vouched for
    /// are all named in one [`DeviceError::MetadataLost`].
    pub async fn read_volume_meta(
        &self,
        region: &VolumeRegion,
    ) -> Result<Vec<UnitMeta>, DeviceError> {
        let reads: Vec<_> = futures_util::stream::iter(0..region.units.len() as u32)
            .map(|i| self.read_unit_meta(region, i))
            .buffered(CONCURRENCY)
            .collect()
            .await;
        let mut metas = Vec::with_capacity(reads.len());
        let mut lost: Option<(Vec<u32>, u64)> = None;
        for r in reads {
            match r {
                Ok(m) => metas.push(m),
                Err(DeviceError::MetadataLost {
                    units, dirty_bytes, ..
                }) => {
                    let l = lost.get_or_insert_with(Default::default);
                    l.0.extend(units);
                    l.1 += dirty_bytes;
                }
                Err(e) => return Err(e),
            }
        }
        match lost {
            None => Ok(metas),
            Some((units, dirty_bytes)) => Err(DeviceError::MetadataLost {
                device: self.name.clone(),
                volume: region.name.clone(),
                units,
                dirty_bytes,
            }),
        }
    }

    /// Every block recorded for the volume: `(unit index, entry index, entry)`.
    pub async fn load_volume_blocks(
        &self,
        region: &VolumeRegion,
    ) -> Result<Vec<(u32, u32, MetaEntry)>, DeviceError> {
        let metas = self.read_volume_meta(region).await?;
        Ok(metas
            .iter()
            .zip(0..)
            .flat_map(|(m, u)| {
                m.entries
                    .iter()
                    .zip(0..)
                    .filter(|(e, _)| !e.is_free())
                    .map(move |(e, i)| (u, i, *e))
            })
            .collect())
    }

    /// Writes the next version (seq + 1) of unit `index`'s metadata into the
    /// copy not holding the newest valid one; `fua` makes it durable before
    /// returning. If the newest copy is not known durable, the device is
    /// flushed first, so that a power loss during this write leaves it.
    /// The caller never has two writes of one unit in flight.
    pub async fn write_unit_meta(
        &self,
        region: &VolumeRegion,
        index: u32,
        meta: &UnitMeta,
        fua: bool,
    ) -> Result<(), DeviceError> {
        layout::check_unit_meta(region, meta).map_err(|reason| DeviceError::InvalidMeta {
            name: region.name.clone(),
            index,
            reason,
        })?;
        let unit = self.owned_unit(region, index)?;
        let known = self.lock_units().get(&unit).copied();
        let state = match known {
            Some(s) if !s.reread => s,
            // Keep what is known of durability: the copies read may hold a
            // write of this process not flushed yet.
            _ => UnitState {
                unflushed: known.and_then(|k| k.unflushed),
                ..self.read_copies(region, index, unit).await?.0
            },
        };
        if let Some(w) = state.unflushed {
            if self.flushes_done.load(Ordering::SeqCst) <= w {
                self.flush().await?;
            }
        }
        let target = state.copy.map_or(0, |c| 1 - c);
        let h = UnitHeader {
            seq: state.seq + 1,
            volume_id: region.id,
            index,
        };
        let buf = DmaBuf::from_slice(&layout::frame_unit_meta(&h, meta));
        let at = self.geometry.meta_copy_offset(unit, target);
        let (_, r) = if fua {
            self.bdev.write_fua(at, buf).await
        } else {
            self.bdev.write(at, buf).await
        };
        if let Err(source) = r {
            // The target copy may be torn or may hold the new version (not
            // known durable): read the copies again before the next write.
            let started = self.flushes_started.load(Ordering::SeqCst);
            if let Some(s) = self.lock_units().get_mut(&unit) {
                s.reread = true;
                s.unflushed = Some(started);
            }
            let what = format!("writing metadata of unit {index} of volume {}", region.name);
            return Err(self.io(what, source));
        }
        let unflushed = (!fua).then(|| self.flushes_started.load(Ordering::SeqCst));
        self.lock_units().insert(
            unit,
            UnitState {
                seq: h.seq,
                copy: Some(target),
                unflushed,
                reread: false,
            },
        );
        Ok(())
    }

    /// Writes empty metadata of `region` into both copies of each
    /// `(device unit, unit index)` and flushes: before a table gives the
    /// units to the volume, nothing of a previous owner (or of the same
    /// volume's earlier use of the unit) stays readable.
    pub(super) async fn empty_units(
        &self,
        region: &VolumeRegion,
        given: &[(u32, u32)],
    ) -> Result<(), DeviceError> {
        let empty = UnitMeta::empty(region.entries_per_unit());
        let half = layout::META_COPY_SIZE as usize;
        futures_util::stream::iter(given.iter().copied())
            .map(|(unit, index)| {
                let mut buf = DmaBuf::new(layout::META_PER_UNIT as usize);
                for (copy, seq) in [(0, 1), (1, 2)] {
                    let h = UnitHeader {
                        seq,
                        volume_id: region.id,
                        index,
                    };
                    let rec = layout::frame_unit_meta(&h, &empty);
                    buf[copy * half..(copy + 1) * half].copy_from_slice(&rec);
                }
                async move {
                    let at = self.geometry.meta_copy_offset(unit, 0);
                    let (_, r) = self.bdev.write(at, buf).await;
                    r.map_err(|s| self.io(format!("emptying metadata of unit {unit}"), s))
                }
            })
            .buffer_unordered(CONCURRENCY)
            .try_collect::<()>()
            .await?;
        self.flush().await?;
        let mut map = self.lock_units();
        for &(unit, _) in given {
            let state = UnitState {
                seq: 2,
                copy: Some(1),
                unflushed: None,
                reread: false,
            };
            map.insert(unit, state);
        }
        Ok(())
    }

    /// The device unit of the region's unit `index`, if the region is still
    /// the volume's current one there.
    fn owned_unit(&self, region: &VolumeRegion, index: u32) -> Result<u32, DeviceError> {
        let sb = self.snapshot();
        let unit = region.units.get(index as usize);
        let current = sb.volumes.iter().find(|v| v.id == region.id);
        match (unit, current) {
            (Some(&u), Some(v)) if v.units.get(index as usize) == Some(&u) => Ok(u),
            _ => Err(DeviceError::NotOwned {
                name: region.name.clone(),
                index,
            }),
        }
    }

    /// Reads both copies of device unit `unit`: what the device must know
    /// to write the next one, and the newest valid content of the owner.
    async fn read_copies(
        &self,
        region: &VolumeRegion,
        index: u32,
        unit: u32,
    ) -> Result<(UnitState, UnitMeta), DeviceError> {
        let at = self.geometry.meta_copy_offset(unit, 0);
        let (buf, r) = self
            .bdev
            .read(at, DmaBuf::new(layout::META_PER_UNIT as usize))
            .await;
        r.map_err(|s| {
            self.io(
                format!("reading metadata of unit {index} of volume {}", region.name),
                s,
            )
        })?;
        let half = layout::META_COPY_SIZE as usize;
        let copies =
            [0, 1].map(|c| layout::judge_unit_meta(&buf[c * half..(c + 1) * half], region, index));
        // The record's name is only needed for a damaged copy: no
        // allocation on the common path (every load reads every unit).
        if copies.iter().any(|c| c.damage().is_some()) {
            let what = format!(
                "unit {index} (device unit {unit}) of volume {}",
                region.name
            );
            for (c, copy) in copies.iter().enumerate() {
                self.errors.note(&self.name, &what, c, copy);
            }
        }
        let state = |seq, copy| UnitState {
            seq,
            copy,
            unflushed: None,
            reread: false,
        };
        match pick::choose(copies) {
            Choice::Use { copy, seq, value } => Ok((state(seq, Some(copy)), value)),
            // Only the empty versions of `empty_units` were there: the next
            // write (seq 3) supersedes both.
            Choice::Initial => Ok((
                state(pick::INITIAL_SEQS, None),
                UnitMeta::empty(region.entries_per_unit()),
            )),
            Choice::Lost { surviving } => {
                let dirty_bytes = surviving.map_or(0, |(_, _, m)| dirty_bytes(region, &m));
                tracing::error!(device = %self.name, volume = %region.name, index, unit,
                    dirty_bytes, "the newest metadata of a unit is damaged: the volume cannot be vouched for");
                Err(DeviceError::MetadataLost {
                    device: self.name.clone(),
                    volume: region.name.clone(),
                    units: vec![index],
                    dirty_bytes,
                })
            }
            // A unit given to a volume has both copies written: zeros in
            // both are damage, and what they held is unknown.
            Choice::Blank => {
                tracing::error!(device = %self.name, volume = %region.name, index, unit,
                    "both metadata copies of a unit are zeroed");
                Err(DeviceError::MetadataLost {
                    device: self.name.clone(),
                    volume: region.name.clone(),
                    units: vec![index],
                    dirty_bytes: 0,
                })
            }
        }
    }

    fn lock_units(&self) -> std::sync::MutexGuard<'_, HashMap<u32, UnitState>> {
        self.units.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Dirty bytes `meta` records.
fn dirty_bytes(region: &VolumeRegion, meta: &UnitMeta) -> u64 {
    meta.entries
        .iter()
        .filter(|e| !e.is_free())
        .map(|e| u64::from(e.dirty.1.saturating_sub(e.dirty.0)) * u64::from(region.sector_size))
        .sum()
}
