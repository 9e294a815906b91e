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
    /// number at a time).
    pub async fn read_volume_meta(
        &self,
        region: &VolumeRegion,
    ) -> Result<Vec<UnitMeta>, DeviceError> {
        futures_util::stream::iter(0..region.units.len() as u32)
            .map(|i| self.read_unit_meta(region, i))
            .buffered(CONCURRENCY)
            .try_collect()
            .await
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
        let buf = self.padded(&layout::encode_unit_meta(&h, meta));
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
                    let rec = layout::encode_unit_meta(&h, &empty);
                    buf[copy * half..copy * half + rec.len()].copy_from_slice(&rec);
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
        let mut best: Option<(usize, u64, UnitMeta)> = None;
        for copy in 0..2 {
            match layout::decode_unit_meta(&buf[copy * half..(copy + 1) * half]) {
                Ok((h, meta)) if h.volume_id == region.id && h.index == index => {
                    if let Err(reason) = layout::check_unit_meta(region, &meta) {
                        tracing::warn!(device = %self.name, volume = %region.name, index, copy,
                            %reason, "unit metadata copy ignored");
                        continue;
                    }
                    if best.as_ref().is_none_or(|b| h.seq > b.1) {
                        best = Some((copy, h.seq, meta));
                    }
                }
                // Another owner's (a unit given anew is emptied first, so
                // this is a unit being given right now) or no record.
                Ok(_) | Err(_) => {}
            }
        }
        Ok(match best {
            Some((copy, seq, meta)) => (
                UnitState {
                    seq,
                    copy: Some(copy),
                    unflushed: None,
                    reread: false,
                },
                meta,
            ),
            None => (
                UnitState {
                    seq: 0,
                    copy: None,
                    unflushed: None,
                    reread: false,
                },
                UnitMeta::empty(region.entries_per_unit()),
            ),
        })
    }

    fn lock_units(&self) -> std::sync::MutexGuard<'_, HashMap<u32, UnitState>> {
        self.units.lock().unwrap_or_else(|p| p.into_inner())
    }
}
