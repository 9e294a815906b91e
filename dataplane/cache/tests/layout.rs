//! The on-device records: encode/decode round trips, and decoding arbitrary
//! or damaged bytes never panics and never accepts a damaged record.

use cache::layout::{self, Geometry, MetaEntry, Superblock, UnitHeader, UnitMeta, VolumeRegion};
use proptest::prelude::*;

const UNITS: u32 = 4096;

fn volume() -> impl Strategy<Value = VolumeRegion> {
    (
        "[a-z0-9é_-]{1,40}",
        any::<u64>(),
        1u64..1 << 40,
        prop::sample::select(vec![512u32, 4096]),
        // Block sizes: a non-empty set of 4 KiB << k.
        1u32..(1 << 9),
        prop::collection::vec(0u32..UNITS, 1..50),
    )
        .prop_map(|(name, id, size, sector, set, units)| {
            let block_sizes: Vec<u32> = (0..9)
                .filter(|k| set & (1 << k) != 0)
                .map(|k| 4096 << k)
                .collect();
            VolumeRegion {
                name,
                id,
                volume_size: size * u64::from(sector),
                sector_size: sector,
                min_block: block_sizes[0],
                group_size: *block_sizes.last().unwrap(),
                block_sizes,
                units,
                data_start: 0,
            }
        })
}

/// Volumes with distinct names, ids and units.
fn table() -> impl Strategy<Value = Vec<VolumeRegion>> {
    prop::collection::vec(volume(), 0..6).prop_map(|vs| {
        let mut seen = std::collections::HashSet::new();
        let mut out: Vec<VolumeRegion> = Vec::new();
        for mut v in vs {
            v.units.retain(|u| seen.insert(*u));
            if !v.units.is_empty() && !out.iter().any(|w| w.name == v.name || w.id == v.id) {
                out.push(v);
            }
        }
        out
    })
}

fn superblock() -> impl Strategy<Value = Superblock> {
    (any::<u64>(), any::<[u8; 16]>(), table()).prop_map(|(seq, uuid, volumes)| Superblock {
        seq,
        uuid,
        geometry: Geometry::for_units(UNITS),
        volumes,
    })
}

fn entry() -> impl Strategy<Value = MetaEntry> {
    prop_oneof![
        Just(MetaEntry::FREE),
        (
            any::<u64>(),
            any::<u32>(),
            any::<[u16; 4]>(),
            any::<Option<u32>>()
        )
            .prop_map(|(offset, size, r, crc)| MetaEntry {
                offset,
                size,
                valid: (r[0], r[1]),
                dirty: (r[2], r[3]),
                crc,
            }),
    ]
}

proptest! {
    #[test]
    fn superblock_round_trips(sb in superblock()) {
        let rec = layout::encode_superblock(&sb);
        prop_assert_eq!(rec.len(), layout::superblock_len(&sb));
        let mut padded = rec.clone();
        padded.resize(layout::SB_COPY_SIZE as usize, 0);
        prop_assert_eq!(layout::decode_superblock(&padded, UNITS).unwrap(), sb);
    }

    #[test]
    fn unit_meta_round_trips(
        seq in any::<u64>(), volume_id in any::<u64>(), index in any::<u32>(),
        entries in prop::collection::vec(entry(), 0..=layout::MAX_ENTRIES),
    ) {
        let h = UnitHeader { seq, volume_id, index };
        let m = UnitMeta { entries };
        let mut rec = layout::encode_unit_meta(&h, &m);
        prop_assert!(rec.len() <= layout::META_COPY_SIZE as usize);
        rec.resize(layout::META_COPY_SIZE as usize, 0xff);
        prop_assert_eq!(layout::decode_unit_meta(&rec).unwrap(), (h, m));
    }

    #[test]
    fn a_damaged_record_is_refused(sb in superblock(), at in any::<prop::sample::Index>(), x in 1u8..) {
        let mut rec = layout::encode_superblock(&sb);
        let i = at.index(rec.len());
        rec[i] ^= x;
        prop_assert!(layout::decode_superblock(&rec, UNITS).is_err());
        let mut m = layout::encode_unit_meta(&UnitHeader { seq: 1, volume_id: 2, index: 3 }, &UnitMeta::empty(256));
        let i = at.index(m.len());
        m[i] ^= x;
        prop_assert!(layout::decode_unit_meta(&m).is_err());
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..9000), magic in any::<bool>()) {
        let mut b = bytes;
        // Half the time, past the magic and version checks.
        if magic && b.len() >= 12 {
            b[..8].copy_from_slice(&layout::SB_MAGIC);
            b[8..12].copy_from_slice(&layout::VERSION.to_le_bytes());
        }
        let _ = layout::decode_superblock(&b, u32::MAX);
        if magic && b.len() >= 12 {
            b[..8].copy_from_slice(&layout::UNIT_MAGIC);
        }
        let _ = layout::decode_unit_meta(&b);
    }
}

/// A valid record whose contents do not hold together is refused, and a
/// table with more units than the device has is refused before expanding.
#[test]
fn inconsistent_tables_are_malformed() {
    let v = VolumeRegion {
        name: "v".into(),
        id: 1,
        volume_size: 1 << 30,
        sector_size: 512,
        block_sizes: vec![4096],
        group_size: 1 << 20,
        min_block: 4096,
        units: vec![0, 1, 2],
        data_start: 0,
    };
    let sb = |volumes: Vec<VolumeRegion>| Superblock {
        seq: 1,
        uuid: [0; 16],
        geometry: Geometry::for_units(8),
        volumes,
    };
    let dec =
        |s: &Superblock, max: u32| layout::decode_superblock(&layout::encode_superblock(s), max);
    assert!(dec(&sb(vec![v.clone()]), 8).is_ok());
    let twice = VolumeRegion {
        name: "w".into(),
        id: 2,
        units: vec![2],
        ..v.clone()
    };
    assert!(matches!(
        dec(&sb(vec![v.clone(), twice]), 8),
        Err(layout::DecodeError::Malformed(_))
    ));
    let same_name = VolumeRegion {
        id: 2,
        units: vec![5],
        ..v.clone()
    };
    assert!(matches!(
        dec(&sb(vec![v.clone(), same_name]), 8),
        Err(layout::DecodeError::Malformed(_))
    ));
    let outside = VolumeRegion {
        units: vec![8],
        ..v.clone()
    };
    assert!(matches!(
        dec(&sb(vec![outside]), 8),
        Err(layout::DecodeError::Malformed(_))
    ));
    assert!(matches!(
        dec(&sb(vec![v.clone()]), 7),
        Err(layout::DecodeError::Malformed(_))
    ));
    let mut g = sb(vec![]);
    g.geometry.data_offset += 1 << 20;
    assert!(matches!(dec(&g, 8), Err(layout::DecodeError::Malformed(_))));
}

#[test]
fn geometry_fits_the_device() {
    for mib in [3u64, 64, 65, 1000, 1 << 20] {
        let size = mib << 20;
        let g = Geometry::for_device(size);
        assert!(g.device_bytes() <= size);
        assert!(
            Geometry::for_units(g.units + 1).device_bytes() > size,
            "{mib} MiB: the largest n"
        );
        assert_eq!(g.data_offset % layout::UNIT_SIZE, 0);
    }
    assert_eq!(Geometry::for_device(2 << 20).units, 0);
    assert_eq!(
        layout::extents(&[3, 4, 5, 9, 1, 2]),
        vec![(3, 3), (9, 1), (1, 2)]
    );
}
