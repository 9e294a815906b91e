//! The responses of DH-HMAC-CHAP (NVMe Base 2.x, "DH-HMAC-CHAP protocol"):
//!
//! ```text
//! R1 = HMAC(Kh, C1' || S1 || T_ID || 0 || "HostHost"   || NQNh || 0 || NQNc)
//! R2 = HMAC(Kc, C2' || S2 || T_ID || 0 || "Controller" || NQNc || 0 || NQNh)
//! ```
//!
//! with the hash the controller chose; Kh is the host's secret transformed
//! for the host's NQN, Kc the controller's secret transformed for the
//! subsystem's NQN ([`DhchapSecret::transformed`]); S and T_ID
//! little-endian; C' the challenge itself with the null group, else
//! augmented with the session key: HMAC(H(session key), C).

use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use crate::keys::{DhchapSecret, Hash};

/// One response's inputs besides the secret.
pub struct Exchange<'a> {
    /// The hash the controller chose.
    pub hash: Hash,
    /// The challenge being answered.
    pub challenge: &'a [u8],
    /// The challenger's sequence number.
    pub seqnum: u32,
    /// The transaction.
    pub t_id: u16,
    /// The Diffie-Hellman shared secret (absent with the null group).
    pub session_key: Option<&'a [u8]>,
    /// The host's NQN.
    pub hostnqn: &'a str,
    /// The subsystem's NQN.
    pub subnqn: &'a str,
}

impl Exchange<'_> {
    /// R1: the host's response, under the host's secret.
    pub fn host_response(&self, host_key: &DhchapSecret) -> Zeroizing<Vec<u8>> {
        let key = host_key.transformed(self.hostnqn);
        self.response(&key, b"HostHost", self.hostnqn, self.subnqn)
    }

    /// R2: the controller's response, under the controller's secret.
    pub fn controller_response(&self, ctrlr_key: &DhchapSecret) -> Zeroizing<Vec<u8>> {
        let key = ctrlr_key.transformed(self.subnqn);
        self.response(&key, b"Controller", self.subnqn, self.hostnqn)
    }

    fn response(&self, key: &[u8], label: &[u8], nqn1: &str, nqn2: &str) -> Zeroizing<Vec<u8>> {
        let augmented;
        let challenge = match self.session_key {
            None => self.challenge,
            Some(s) => {
                let hashed = Zeroizing::new(self.hash.digest(s));
                augmented = Zeroizing::new(self.hash.hmac(&hashed, &[self.challenge]));
                &augmented[..]
            }
        };
        Zeroizing::new(self.hash.hmac(
            key,
            &[
                challenge,
                &self.seqnum.to_le_bytes(),
                &self.t_id.to_le_bytes(),
                &[0],
                label,
                nqn1.as_bytes(),
                &[0],
                nqn2.as_bytes(),
            ],
        ))
    }
}

/// Whether `got` is `expected`, in time independent of where they differ.
pub fn matches(got: &[u8], expected: &[u8]) -> bool {
    got.len() == expected.len() && bool::from(got.ct_eq(expected))
}
