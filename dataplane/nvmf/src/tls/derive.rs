//! The TLS PSK of a secure channel, derived from the configured PSK
//! (NVMe TCP Transport "PSK derivation", TP 8018) the way libnvme 1.13
//! (nvme-cli 2.13, Debian 13) derives the key it puts into the kernel's
//! keyring for the Linux host:
//!
//! 1. retained PSK = HKDF(configured PSK, info "tls13 HostNQN" || host NQN);
//! 2. TLS PSK = HKDF(retained PSK, info "tls13 nvme-tls-psk" || context),
//!    the context being the whole PSK identity (version 0) or
//!    "<hh> <PSK digest>" (version 1);
//!
//! each HKDF an Extract with a zero salt then an Expand to the hash's
//! length L, and each info prefixed with L as two little-endian bytes.
//! This is not RFC 8446's HkdfLabel (big-endian length, length-prefixed
//! label and context), which the specification names: later libnvme
//! releases switched to that and keep this one as "compat"; the Linux
//! hosts this project supports write this one. The fixture in the tests
//! is what nvme-cli 2.13 put into a 6.12 kernel's keyring.

use hkdf::Hkdf;
use sha2::{Sha256, Sha384};
use zeroize::Zeroizing;

use super::PskIdentity;
use crate::keys::{Hash, TlsPsk};

/// HKDF-Extract (zero salt) and Expand of `ikm` to `hash`'s length, with
/// `label` and `context` after the little-endian length as info.
fn derive(hash: Hash, ikm: &[u8], label: &str, context: &[u8]) -> Zeroizing<Vec<u8>> {
    let len = hash.digest_len();
    let mut info = Vec::with_capacity(2 + label.len() + context.len());
    info.extend_from_slice(&(len as u16).to_le_bytes());
    info.extend_from_slice(label.as_bytes());
    info.extend_from_slice(context);
    let mut out = Zeroizing::new(vec![0u8; len]);
    let r = match hash {
        Hash::Sha384 => Hkdf::<Sha384>::new(None, ikm).expand(&info, &mut out),
        _ => Hkdf::<Sha256>::new(None, ikm).expand(&info, &mut out),
    };
    r.expect("one hash length is a valid HKDF output length");
    out
}

/// The retained PSK of `configured` for `hostnqn`.
pub(super) fn retained_psk(configured: &TlsPsk, hostnqn: &str) -> Zeroizing<Vec<u8>> {
    derive(
        configured.hash,
        configured.key(),
        "tls13 HostNQN",
        hostnqn.as_bytes(),
    )
}

/// The TLS PSK of a secure channel with `identity`.
pub(super) fn tls_psk(configured: &TlsPsk, identity: &PskIdentity) -> Zeroizing<Vec<u8>> {
    let retained = retained_psk(configured, &identity.hostnqn);
    let context = match &identity.digest {
        Some(d) => format!("{:02} {d}", identity.hash.id()),
        None => identity.encode(),
    };
    derive(
        identity.hash,
        &retained,
        "tls13 nvme-tls-psk",
        context.as_bytes(),
    )
}
