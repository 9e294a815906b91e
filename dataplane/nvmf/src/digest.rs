//! Header and data digests: CRC32C (Castagnoli) over the PDU header or data,
//! sent little-endian right after what it covers.

/// Size of one digest on the wire.
pub const DIGEST_LEN: usize = 4;

/// CRC32C of `bytes`, as NVMe/TCP puts it on the wire.
pub fn crc32c(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

/// Continue a CRC32C over data that arrives in several pieces.
pub fn crc32c_append(crc: u32, bytes: &[u8]) -> u32 {
    crc32c::crc32c_append(crc, bytes)
}

/// Whether `expected` (as read from the wire) is the digest of `bytes`.
pub fn verify(bytes: &[u8], expected: [u8; DIGEST_LEN]) -> bool {
    crc32c(bytes) == u32::from_le_bytes(expected)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vectors() {
        // RFC 3720 (iSCSI) appendix B.4 test vectors for CRC32C.
        assert_eq!(crc32c(&[0u8; 32]), 0x8a91_36aa);
        assert_eq!(crc32c(&[0xffu8; 32]), 0x62a8_ab43);
        let ascending: Vec<u8> = (0u8..32).collect();
        assert_eq!(crc32c(&ascending), 0x46dd_794e);
    }

    #[test]
    fn append_equals_whole() {
        let data: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
        let (a, b) = data.split_at(1000);
        assert_eq!(crc32c_append(crc32c(a), b), crc32c(&data));
        assert!(verify(&data, crc32c(&data).to_le_bytes()));
        assert!(!verify(&data, (crc32c(&data) ^ 1).to_le_bytes()));
    }
}
