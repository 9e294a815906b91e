//! Finite-field Diffie-Hellman over the RFC 7919 groups, as DH-HMAC-CHAP
//! uses it: public values and the shared secret are big-endian and padded
//! to the group's size (the Linux host and SPDK both pad).
//!
//! The groups' primes come from rustls (`rustls::ffdhe_groups`, RFC 7919
//! Appendix A); the arithmetic is crypto-bigint's constant-time Montgomery
//! exponentiation. Private exponents have twice the group's security
//! strength in bits (RFC 7919 section 5.2, as the Linux kernel's `dh`
//! does): 225 to 400 bits instead of the modulus' 2048 to 8192, which
//! keeps an 8192-bit exchange to milliseconds.

use crypto_bigint::modular::{BoxedMontyForm, BoxedMontyParams};
use crypto_bigint::{BoxedUint, Odd};
use rustls::ffdhe_groups::{self, FfdheGroup};
use zeroize::Zeroizing;

use super::DhGroup;

/// Why a key exchange failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DhError {
    /// The null group has no key exchange.
    NullGroup,
    /// The peer's public value is not of the group's size or not in
    /// 2..p-2.
    BadPeerValue,
    /// The system's random source failed.
    Random,
}

impl std::fmt::Display for DhError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::NullGroup => "the null group has no key exchange",
            Self::BadPeerValue => "the peer's DH public value is out of range",
            Self::Random => "the random source failed",
        })
    }
}

impl std::error::Error for DhError {}

/// A group's parameters and the bit length of its private exponents.
fn parameters(group: DhGroup) -> Option<(FfdheGroup<'static>, u32)> {
    Some(match group {
        DhGroup::Null => return None,
        DhGroup::Ffdhe2048 => (ffdhe_groups::FFDHE2048, 2 * 112),
        DhGroup::Ffdhe3072 => (ffdhe_groups::FFDHE3072, 2 * 128),
        DhGroup::Ffdhe4096 => (ffdhe_groups::FFDHE4096, 2 * 152),
        DhGroup::Ffdhe6144 => (ffdhe_groups::FFDHE6144, 2 * 176),
        DhGroup::Ffdhe8192 => (ffdhe_groups::FFDHE8192, 2 * 200),
    })
}

/// One side's ephemeral key pair in one group.
pub struct KeyPair {
    params: BoxedMontyParams,
    modulus: BoxedUint,
    private: BoxedUint,
    exponent_bits: u32,
    public: Vec<u8>,
}

impl KeyPair {
    /// A fresh key pair in `group`.
    pub fn generate(group: DhGroup) -> Result<Self, DhError> {
        let (g, exponent_bits) = parameters(group).ok_or(DhError::NullGroup)?;
        let bits = (g.p.len() * 8) as u32;
        let modulus = BoxedUint::from_be_slice(g.p, bits).expect("RFC 7919 primes fit their size");
        let params =
            BoxedMontyParams::new(Odd::new(modulus.clone()).expect("RFC 7919 primes are odd"));
        // Random bits with the top one set: exactly `exponent_bits` long.
        let mut raw = Zeroizing::new(vec![0u8; exponent_bits.div_ceil(8) as usize]);
        getrandom::fill(&mut raw).map_err(|_| DhError::Random)?;
        let excess = raw.len() as u32 * 8 - exponent_bits;
        raw[0] &= 0xff >> excess;
        raw[0] |= 0x80 >> excess;
        let limb_bits = exponent_bits.div_ceil(64) * 64;
        let private = BoxedUint::from_be_slice(&raw, limb_bits).expect("sized to fit");
        let generator = BoxedUint::from_be_slice(g.g, bits).expect("the generator fits");
        let public = BoxedMontyForm::new(generator, params.clone())
            .pow_bounded_exp(&private, exponent_bits)
            .retrieve();
        Ok(Self {
            public: public.to_be_bytes().into_vec(),
            params,
            modulus,
            private,
            exponent_bits,
        })
    }

    /// The public value to send, padded to the group's size.
    pub fn public(&self) -> &[u8] {
        &self.public
    }

    /// The shared secret with the peer whose public value is `peer`,
    /// padded to the group's size.
    pub fn shared_secret(&self, peer: &[u8]) -> Result<Zeroizing<Vec<u8>>, DhError> {
        let bits = self.modulus.bits_precision();
        if peer.len() * 8 != bits as usize {
            return Err(DhError::BadPeerValue);
        }
        let y = BoxedUint::from_be_slice(peer, bits).map_err(|_| DhError::BadPeerValue)?;
        // 1 < y < p - 1: 0, 1 and p - 1 (of order 1 or 2) would give away
        // the secret; with a safe prime every other value has a large order.
        let one = BoxedUint::one_with_precision(bits);
        let p_minus_one = self.modulus.wrapping_sub(&one);
        if y <= one || y >= p_minus_one {
            return Err(DhError::BadPeerValue);
        }
        let s = BoxedMontyForm::new(y, self.params.clone())
            .pow_bounded_exp(&self.private, self.exponent_bits)
            .retrieve();
        Ok(Zeroizing::new(s.to_be_bytes().into_vec()))
    }
}

impl Drop for KeyPair {
    fn drop(&mut self) {
        use zeroize::Zeroize;
        self.private.zeroize();
    }
}
