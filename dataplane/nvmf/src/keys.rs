//! The textual key formats of NVMe-oF security, as nvme-cli and the Linux
//! kernel write and read them:
//!
//! - DH-HMAC-CHAP secrets (NVMe Base, in-band authentication):
//!   `DHHC-1:HH:<base64 of key || CRC-32>:`, HH the hash the secret is
//!   transformed with before use (00 none, 01 SHA-256, 02 SHA-384, 03
//!   SHA-512), the key 32, 48 or 64 bytes.
//! - TLS pre-shared keys in the PSK interchange format (NVMe/TCP TLS):
//!   `NVMeTLSkey-1:HH:<base64 of key || CRC-32>:`, HH 01 (SHA-256, a
//!   32-byte key) or 02 (SHA-384, 48 bytes).
//!
//! The CRC is zlib's CRC-32 of the key, little-endian. Keys are wiped
//! from memory when dropped and never shown by `Debug`.

use std::fmt;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::{Sha256, Sha384, Sha512};
use zeroize::Zeroizing;

/// A hash function of NVMe-oF authentication and TLS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hash {
    Sha256,
    Sha384,
    Sha512,
}

impl Hash {
    /// The identifier in key strings and protocol messages (1, 2, 3).
    pub fn id(self) -> u8 {
        match self {
            Self::Sha256 => 1,
            Self::Sha384 => 2,
            Self::Sha512 => 3,
        }
    }

    /// The hash of identifier `id`.
    pub fn from_id(id: u8) -> Option<Self> {
        match id {
            1 => Some(Self::Sha256),
            2 => Some(Self::Sha384),
            3 => Some(Self::Sha512),
            _ => None,
        }
    }

    /// The digest length in bytes.
    pub fn digest_len(self) -> usize {
        match self {
            Self::Sha256 => 32,
            Self::Sha384 => 48,
            Self::Sha512 => 64,
        }
    }

    /// The digest of `data`.
    pub fn digest(self, data: &[u8]) -> Vec<u8> {
        use sha2::Digest;
        match self {
            Self::Sha256 => Sha256::digest(data).to_vec(),
            Self::Sha384 => Sha384::digest(data).to_vec(),
            Self::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    /// HMAC of `parts` (concatenated) under `key`.
    pub fn hmac(self, key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
        fn run<M: Mac + hmac::digest::KeyInit>(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
            let mut m = <M as hmac::digest::KeyInit>::new_from_slice(key)
                .expect("HMAC takes keys of any length");
            for p in parts {
                m.update(p);
            }
            m.finalize().into_bytes().to_vec()
        }
        match self {
            Self::Sha256 => run::<Hmac<Sha256>>(key, parts),
            Self::Sha384 => run::<Hmac<Sha384>>(key, parts),
            Self::Sha512 => run::<Hmac<Sha512>>(key, parts),
        }
    }
}

/// Why a key string was refused.
#[derive(Debug, PartialEq, Eq)]
pub struct KeyError(pub String);

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for KeyError {}

/// A DH-HMAC-CHAP secret (`DHHC-1:...`).
#[derive(Clone, PartialEq, Eq)]
pub struct DhchapSecret {
    /// The hash the secret is transformed with before use; `None`: used
    /// as it is.
    pub transform: Option<Hash>,
    key: Zeroizing<Vec<u8>>,
}

impl fmt::Debug for DhchapSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "DhchapSecret({:?}, {} bytes)",
            self.transform,
            self.key.len()
        )
    }
}

impl DhchapSecret {
    /// Parses `DHHC-1:HH:<base64>:` (surrounding white space allowed).
    pub fn parse(s: &str) -> Result<Self, KeyError> {
        let (id, key) = decode(s, "DHHC-1")?;
        let transform = match id {
            0 => None,
            _ => Some(Hash::from_id(id).ok_or_else(|| {
                KeyError(format!(
                    "DH-HMAC-CHAP secret: hash {id:02} is not 00, 01, 02 or 03"
                ))
            })?),
        };
        Self::from_key(transform, &key)
    }

    /// The secret of `key` (32, 48 or 64 bytes) with `transform`.
    pub fn from_key(transform: Option<Hash>, key: &[u8]) -> Result<Self, KeyError> {
        if ![32, 48, 64].contains(&key.len()) {
            return Err(KeyError(format!(
                "DH-HMAC-CHAP secret: a key of {} bytes (32, 48 or 64 expected)",
                key.len()
            )));
        }
        Ok(Self {
            transform,
            key: Zeroizing::new(key.to_vec()),
        })
    }

    /// The secret as its string.
    pub fn encode(&self) -> Zeroizing<String> {
        encode("DHHC-1", self.transform.map_or(0, Hash::id), &self.key)
    }

    /// The key the protocol uses for `nqn` (the NQN of the party that owns
    /// the secret): HMAC of the NQN and "NVMe-over-Fabrics" under the
    /// secret with its transform hash, or the secret itself.
    pub fn transformed(&self, nqn: &str) -> Zeroizing<Vec<u8>> {
        match self.transform {
            None => self.key.clone(),
            Some(h) => Zeroizing::new(h.hmac(&self.key, &[nqn.as_bytes(), b"NVMe-over-Fabrics"])),
        }
    }
}

/// A TLS pre-shared key in the PSK interchange format (`NVMeTLSkey-1:...`).
#[derive(Clone, PartialEq, Eq)]
pub struct TlsPsk {
    /// SHA-256 (a 32-byte key) or SHA-384 (48 bytes).
    pub hash: Hash,
    key: Zeroizing<Vec<u8>>,
}

impl fmt::Debug for TlsPsk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TlsPsk({:?}, {} bytes)", self.hash, self.key.len())
    }
}

impl TlsPsk {
    /// Parses `NVMeTLSkey-1:HH:<base64>:` (surrounding white space allowed).
    pub fn parse(s: &str) -> Result<Self, KeyError> {
        let (id, key) = decode(s, "NVMeTLSkey-1")?;
        let hash = match id {
            1 => Hash::Sha256,
            2 => Hash::Sha384,
            _ => return Err(KeyError(format!("TLS PSK: hash {id:02} is not 01 or 02"))),
        };
        if key.len() != hash.digest_len() {
            return Err(KeyError(format!(
                "TLS PSK: a key of {} bytes with hash {id:02} ({} expected)",
                key.len(),
                hash.digest_len()
            )));
        }
        Ok(Self { hash, key })
    }

    /// The key as its string.
    pub fn encode(&self) -> Zeroizing<String> {
        encode("NVMeTLSkey-1", self.hash.id(), &self.key)
    }

    /// The configured key's bytes.
    pub fn key(&self) -> &[u8] {
        &self.key
    }
}

/// `PREFIX:HH:<base64 of key || crc>:` into (HH, key), the CRC checked.
fn decode(s: &str, prefix: &str) -> Result<(u8, Zeroizing<Vec<u8>>), KeyError> {
    let what = if prefix == "DHHC-1" {
        "DH-HMAC-CHAP secret"
    } else {
        "TLS PSK"
    };
    let bad = |why: &str| KeyError(format!("{what}: {why} (expected {prefix}:HH:<base64>:)"));
    let s = s.trim();
    let rest = s
        .strip_prefix(prefix)
        .and_then(|r| r.strip_prefix(':'))
        .ok_or_else(|| bad("wrong prefix"))?;
    let (hh, rest) = rest.split_once(':').ok_or_else(|| bad("no hash field"))?;
    let b64 = rest
        .strip_suffix(':')
        .ok_or_else(|| bad("no closing ':'"))?;
    if hh.len() != 2 {
        return Err(bad("the hash field is not two digits"));
    }
    let id = u8::from_str_radix(hh, 16).map_err(|_| bad("the hash field is not hexadecimal"))?;
    let raw = Zeroizing::new(STANDARD.decode(b64).map_err(|_| bad("not base64"))?);
    if raw.len() < 5 {
        return Err(bad("too short"));
    }
    let (key, crc) = raw.split_at(raw.len() - 4);
    if crc32fast::hash(key).to_le_bytes() != crc {
        return Err(KeyError(format!(
            "{what}: CRC mismatch (mistyped or truncated)"
        )));
    }
    Ok((id, Zeroizing::new(key.to_vec())))
}

fn encode(prefix: &str, id: u8, key: &[u8]) -> Zeroizing<String> {
    let mut raw = Zeroizing::new(key.to_vec());
    raw.extend_from_slice(&crc32fast::hash(key).to_le_bytes());
    Zeroizing::new(format!("{prefix}:{id:02}:{}:", STANDARD.encode(&*raw)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NQN: &str = "nqn.2014-08.org.nvmexpress:uuid:5f1b0c2e-8d4a-4c61-9b7e-2a3d6e9f0c41";

    /// (kind, hmac, secret, key) of each line of the nvme-cli fixture.
    fn fixtures() -> Vec<(String, u8, Vec<u8>, String)> {
        include_str!("../testdata/nvme-cli-2.13-keys.txt")
            .lines()
            .map(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                let field = |i: usize, name: &str| f[i].strip_prefix(name).unwrap().to_owned();
                let hex = field(2, "secret=");
                let secret = (0..hex.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                    .collect();
                (
                    f[0].to_owned(),
                    field(1, "hmac=").parse().unwrap(),
                    secret,
                    field(3, "key="),
                )
            })
            .collect()
    }

    #[test]
    fn nvme_cli_dhchap_secrets_parse_transform_and_round_trip() {
        let mut seen = 0;
        for (kind, hmac, secret, key) in fixtures().into_iter().filter(|f| f.0 == "dhchap") {
            let s = DhchapSecret::parse(&key).unwrap_or_else(|e| panic!("{kind} {key}: {e}"));
            assert_eq!(s.transform.map_or(0, Hash::id), hmac);
            // nvme-cli stores a secret given with --hmac N already
            // transformed for the NQN: ours must compute the same.
            let want = match Hash::from_id(hmac) {
                None => secret.clone(),
                Some(h) => h.hmac(
                    &secret[..h.digest_len()],
                    &[NQN.as_bytes(), b"NVMe-over-Fabrics"],
                ),
            };
            assert_eq!(*s.key, want, "{key}");
            assert_eq!(*s.encode(), key, "re-encoded as nvme-cli writes it");
            seen += 1;
        }
        assert_eq!(seen, 4);
        // The transformation the protocol applies.
        let raw = DhchapSecret::parse(&fixtures()[0].3).unwrap();
        let with = DhchapSecret {
            transform: Some(Hash::Sha256),
            key: raw.key.clone(),
        };
        assert_eq!(
            *with.transformed(NQN),
            *DhchapSecret::parse(&fixtures()[1].3).unwrap().key
        );
        assert_eq!(raw.transformed(NQN), raw.key, "00: used as it is");
    }

    #[test]
    fn nvme_cli_tls_keys_parse_and_round_trip() {
        let mut seen = 0;
        for (_, hmac, secret, key) in fixtures().into_iter().filter(|f| f.0 == "tls") {
            let k = TlsPsk::parse(&key).unwrap();
            assert_eq!(k.hash.id(), hmac);
            assert_eq!(k.key(), &secret[..k.hash.digest_len()]);
            assert_eq!(*k.encode(), key);
            seen += 1;
        }
        assert_eq!(seen, 3);
    }

    #[test]
    fn bad_key_strings_are_refused_with_the_reason() {
        let good = fixtures()[0].3.clone();
        let mut flipped = good.clone().into_bytes();
        flipped[12] = if flipped[12] == b'A' { b'B' } else { b'A' };
        let flipped = String::from_utf8(flipped).unwrap();
        let hash_04 = good.replace(":00:", ":04:");
        for (s, why) in [
            (flipped.as_str(), "CRC mismatch"),
            (hash_04.as_str(), "hash 04"),
            ("DHHC-2:00:AAAA:", "wrong prefix"),
            (good.trim_end_matches(':'), "no closing"),
            ("DHHC-1:00:!!!!:", "not base64"),
        ] {
            let e = DhchapSecret::parse(s).unwrap_err();
            assert!(e.0.contains(why), "{s}: {e}");
        }
        // A TLS key where a DH-HMAC-CHAP secret belongs, and the reverse.
        assert!(DhchapSecret::parse(&fixtures()[4].3).is_err());
        assert!(TlsPsk::parse(&good).is_err());
        assert!(!format!("{:?}", DhchapSecret::parse(&good).unwrap()).contains("AAEC"));
    }
}
