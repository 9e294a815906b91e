//! DH-HMAC-CHAP, the in-band authentication of NVMe over Fabrics (NVMe
//! Base 2.x, "Authentication"): the messages that Authentication Send and
//! Authentication Receive carry, and the computations both ends make.
//!
//! One transaction on one queue: the host sends AUTH_Negotiate (the hashes
//! and Diffie-Hellman groups it supports), the controller answers with
//! DH-HMAC-CHAP_Challenge (its choice, a random challenge C1, a sequence
//! number, its DH public value), the host sends DH-HMAC-CHAP_Reply (its
//! response R1, and for bidirectional authentication its own challenge C2),
//! the controller answers DH-HMAC-CHAP_Success1 (with its response R2 when
//! asked) or AUTH_Failure1, and a host that asked for R2 closes with
//! DH-HMAC-CHAP_Success2 or AUTH_Failure2.
//!
//! - [`chap`]: the responses, over the secrets of [`crate::keys`];
//! - [`ffdhe`]: the RFC 7919 groups' key exchange.
//!
//! Parsing never panics on any input (the fuzzer's `auth` target).

pub mod chap;
pub mod ffdhe;

use crate::keys::Hash;

/// Authentication Send/Receive SECP: NVMe-oF in-band authentication.
pub const SECP: u8 = 0xe9;
/// Authentication Send/Receive SPSP0 and SPSP1.
pub const SPSP: u8 = 0x01;

/// Connect response DW0: authentication is required on this queue
/// (AUTHREQ.ATR, bit 17 of DW0 above the controller id).
pub const CONNECT_AUTHREQ_ATR: u32 = 1 << 17;

/// AUTH_TYPE of a message.
mod auth_type {
    pub const COMMON: u8 = 0x00;
    pub const DHCHAP: u8 = 0x01;
}

/// AUTH_ID of a message.
mod auth_id {
    pub const NEGOTIATE: u8 = 0x00;
    pub const CHALLENGE: u8 = 0x01;
    pub const REPLY: u8 = 0x02;
    pub const SUCCESS1: u8 = 0x03;
    pub const SUCCESS2: u8 = 0x04;
    pub const FAILURE2: u8 = 0xf0;
    pub const FAILURE1: u8 = 0xf1;
}

/// The protocol identifier of DH-HMAC-CHAP in a negotiate descriptor.
const DHCHAP_AUTH_ID: u8 = 0x01;

/// A negotiate descriptor's size: its header and 30 hash and 30 group ids.
const DESCRIPTOR_LEN: usize = 64;
const ID_LIST_LEN: usize = 30;

/// Why a transaction failed (AUTH_Failure1/2 reason code explanation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Failure {
    /// The response did not match, or a key is missing.
    Failed = 0x01,
    /// No authentication protocol both ends support.
    ProtocolUnusable = 0x02,
    /// Secure channel concatenation asked for and not supported.
    ConcatMismatch = 0x03,
    /// No hash both ends support.
    HashUnusable = 0x04,
    /// No Diffie-Hellman group both ends support.
    DhGroupUnusable = 0x05,
    /// A message's fields do not add up.
    IncorrectPayload = 0x06,
    /// A message out of turn.
    IncorrectProtocolMessage = 0x07,
}

/// The reason code of every failure: "authentication failure".
const REASON_FAILED: u8 = 0x01;

/// A Diffie-Hellman group of DH-HMAC-CHAP: none (`Null`, the challenge
/// alone) or one of RFC 7919's finite-field groups.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DhGroup {
    Null,
    Ffdhe2048,
    Ffdhe3072,
    Ffdhe4096,
    Ffdhe6144,
    Ffdhe8192,
}

impl DhGroup {
    /// Every group, the weakest first.
    pub const ALL: [Self; 6] = [
        Self::Null,
        Self::Ffdhe2048,
        Self::Ffdhe3072,
        Self::Ffdhe4096,
        Self::Ffdhe6144,
        Self::Ffdhe8192,
    ];

    /// The identifier in messages (0 to 5).
    pub fn id(self) -> u8 {
        self as u8
    }

    /// The group of identifier `id`.
    pub fn from_id(id: u8) -> Option<Self> {
        Self::ALL.get(usize::from(id)).copied()
    }

    /// The name SPDK's RPCs and nvme-cli use ("null", "ffdhe2048", ...).
    pub fn name(self) -> &'static str {
        match self {
            Self::Null => "null",
            Self::Ffdhe2048 => "ffdhe2048",
            Self::Ffdhe3072 => "ffdhe3072",
            Self::Ffdhe4096 => "ffdhe4096",
            Self::Ffdhe6144 => "ffdhe6144",
            Self::Ffdhe8192 => "ffdhe8192",
        }
    }

    /// The group named `name`.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|g| g.name() == name)
    }
}

/// The name of a hash in SPDK's RPCs ("sha256", ...).
pub fn hash_name(h: Hash) -> &'static str {
    match h {
        Hash::Sha256 => "sha256",
        Hash::Sha384 => "sha384",
        Hash::Sha512 => "sha512",
    }
}

/// The hash named `name`.
pub fn hash_from_name(name: &str) -> Option<Hash> {
    [Hash::Sha256, Hash::Sha384, Hash::Sha512]
        .into_iter()
        .find(|h| hash_name(*h) == name)
}

/// A message a host sends (Authentication Send), as the controller reads
/// it. Byte slices borrow from the command's data.
#[derive(Debug, PartialEq, Eq)]
pub enum HostMessage<'a> {
    /// AUTH_Negotiate: what the host supports. `dhchap` is `None` when
    /// no descriptor names DH-HMAC-CHAP.
    Negotiate {
        t_id: u16,
        concat: u8,
        dhchap: Option<Offer>,
    },
    /// DH-HMAC-CHAP_Reply.
    Reply(Reply<'a>),
    /// DH-HMAC-CHAP_Success2: the host accepted the controller's response.
    Success2 { t_id: u16 },
    /// AUTH_Failure2: the host refused the controller's response.
    Failure2 { t_id: u16, explanation: u8 },
}

/// The hashes and groups a host offers, as identifiers (unknown ones
/// included, for the controller to skip).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Offer {
    pub hashes: Vec<u8>,
    pub groups: Vec<u8>,
}

/// DH-HMAC-CHAP_Reply.
#[derive(Debug, PartialEq, Eq)]
pub struct Reply<'a> {
    pub t_id: u16,
    /// The host's response R1 (`hl` bytes).
    pub response: &'a [u8],
    /// The host's challenge C2 when it asks for bidirectional
    /// authentication (CVALID), with its sequence number.
    pub challenge: Option<(&'a [u8], u32)>,
    /// The host's DH public value (empty for the null group).
    pub dh_value: &'a [u8],
}

/// Why a host message was not understood.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParseError {
    /// Its fields do not add up (lengths, reserved values).
    Payload,
    /// Not a message a host sends.
    Protocol,
}

impl From<ParseError> for Failure {
    fn from(e: ParseError) -> Self {
        match e {
            ParseError::Payload => Failure::IncorrectPayload,
            ParseError::Protocol => Failure::IncorrectProtocolMessage,
        }
    }
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

impl<'a> HostMessage<'a> {
    /// Reads the message in `data` (exactly the command's transfer length).
    pub fn parse(data: &'a [u8]) -> Result<Self, ParseError> {
        if data.len() < 8 {
            return Err(ParseError::Payload);
        }
        let t_id = le16(data, 4);
        match (data[0], data[1]) {
            (auth_type::COMMON, auth_id::NEGOTIATE) => {
                let napd = usize::from(data[7]);
                if data.len() != 8 + napd * DESCRIPTOR_LEN {
                    return Err(ParseError::Payload);
                }
                let mut dhchap = None;
                for d in data[8..].chunks_exact(DESCRIPTOR_LEN) {
                    if d[0] != DHCHAP_AUTH_ID || dhchap.is_some() {
                        continue;
                    }
                    let (halen, dhlen) = (usize::from(d[2]), usize::from(d[3]));
                    if halen > ID_LIST_LEN || dhlen > ID_LIST_LEN {
                        return Err(ParseError::Payload);
                    }
                    dhchap = Some(Offer {
                        hashes: d[4..4 + halen].to_vec(),
                        groups: d[34..34 + dhlen].to_vec(),
                    });
                }
                Ok(Self::Negotiate {
                    t_id,
                    concat: data[6],
                    dhchap,
                })
            }
            (auth_type::COMMON, auth_id::FAILURE2) => {
                if data.len() != 8 {
                    return Err(ParseError::Payload);
                }
                Ok(Self::Failure2 {
                    t_id,
                    explanation: data[7],
                })
            }
            (auth_type::DHCHAP, auth_id::REPLY) => {
                if data.len() < 16 {
                    return Err(ParseError::Payload);
                }
                let hl = usize::from(data[6]);
                let cvalid = data[8];
                let dhvlen = usize::from(le16(data, 10));
                let seqnum = le32(data, 12);
                if cvalid > 1 || data.len() != 16 + 2 * hl + dhvlen || (cvalid == 1 && seqnum == 0)
                {
                    return Err(ParseError::Payload);
                }
                let body = &data[16..];
                Ok(Self::Reply(Reply {
                    t_id,
                    response: &body[..hl],
                    challenge: (cvalid == 1).then(|| (&body[hl..2 * hl], seqnum)),
                    dh_value: &body[2 * hl..],
                }))
            }
            (auth_type::DHCHAP, auth_id::SUCCESS2) => {
                if data.len() != 16 {
                    return Err(ParseError::Payload);
                }
                Ok(Self::Success2 { t_id })
            }
            _ => Err(ParseError::Protocol),
        }
    }
}

fn header(kind: u8, id: u8, t_id: u16, len: usize) -> Vec<u8> {
    let mut m = vec![0u8; len];
    m[0] = kind;
    m[1] = id;
    m[4..6].copy_from_slice(&t_id.to_le_bytes());
    m
}

/// DH-HMAC-CHAP_Challenge: the controller's choice, challenge C1, sequence
/// number and DH public value.
pub fn encode_challenge(
    t_id: u16,
    hash: Hash,
    group: DhGroup,
    seqnum: u32,
    challenge: &[u8],
    dh_value: &[u8],
) -> Vec<u8> {
    let hl = challenge.len();
    let mut m = header(
        auth_type::DHCHAP,
        auth_id::CHALLENGE,
        t_id,
        16 + hl + dh_value.len(),
    );
    m[6] = hl as u8;
    m[8] = hash.id();
    m[9] = group.id();
    m[10..12].copy_from_slice(&(dh_value.len() as u16).to_le_bytes());
    m[12..16].copy_from_slice(&seqnum.to_le_bytes());
    m[16..16 + hl].copy_from_slice(challenge);
    m[16 + hl..].copy_from_slice(dh_value);
    m
}

/// DH-HMAC-CHAP_Success1: HL is always set (the Linux host expects it),
/// the controller's response R2 only when the host asked for it.
pub fn encode_success1(t_id: u16, hash: Hash, response: Option<&[u8]>) -> Vec<u8> {
    let hl = hash.digest_len();
    let len = 16 + response.map_or(0, <[u8]>::len);
    let mut m = header(auth_type::DHCHAP, auth_id::SUCCESS1, t_id, len);
    m[6] = hl as u8;
    if let Some(r) = response {
        m[8] = 1;
        m[16..].copy_from_slice(r);
    }
    m
}

/// AUTH_Failure1 with `why`.
pub fn encode_failure1(t_id: u16, why: Failure) -> Vec<u8> {
    let mut m = header(auth_type::COMMON, auth_id::FAILURE1, t_id, 8);
    m[6] = REASON_FAILED;
    m[7] = why as u8;
    m
}

/// What a controller sends (Authentication Receive), as a host reads it.
#[derive(Debug, PartialEq, Eq)]
pub enum ControllerMessage<'a> {
    Challenge {
        t_id: u16,
        hash: u8,
        group: u8,
        seqnum: u32,
        challenge: &'a [u8],
        dh_value: &'a [u8],
    },
    Success1 {
        t_id: u16,
        response: Option<&'a [u8]>,
    },
    Failure1 {
        t_id: u16,
        explanation: u8,
    },
}

impl<'a> ControllerMessage<'a> {
    /// Reads a controller's message (the host side, for tests and tools).
    pub fn parse(data: &'a [u8]) -> Result<Self, ParseError> {
        if data.len() < 8 {
            return Err(ParseError::Payload);
        }
        let t_id = le16(data, 4);
        match (data[0], data[1]) {
            (auth_type::COMMON, auth_id::FAILURE1) => Ok(Self::Failure1 {
                t_id,
                explanation: data[7],
            }),
            (auth_type::DHCHAP, auth_id::CHALLENGE) if data.len() >= 16 => {
                let hl = usize::from(data[6]);
                let dhvlen = usize::from(le16(data, 10));
                if data.len() < 16 + hl + dhvlen {
                    return Err(ParseError::Payload);
                }
                Ok(Self::Challenge {
                    t_id,
                    hash: data[8],
                    group: data[9],
                    seqnum: le32(data, 12),
                    challenge: &data[16..16 + hl],
                    dh_value: &data[16 + hl..16 + hl + dhvlen],
                })
            }
            (auth_type::DHCHAP, auth_id::SUCCESS1) if data.len() >= 16 => {
                let hl = usize::from(data[6]);
                let response = match data[8] {
                    0 => None,
                    _ if data.len() >= 16 + hl => Some(&data[16..16 + hl]),
                    _ => return Err(ParseError::Payload),
                };
                Ok(Self::Success1 { t_id, response })
            }
            _ => Err(ParseError::Protocol),
        }
    }
}

/// AUTH_Negotiate offering DH-HMAC-CHAP with `hashes` and `groups` (the
/// host side).
pub fn encode_negotiate(t_id: u16, hashes: &[Hash], groups: &[DhGroup]) -> Vec<u8> {
    let mut m = header(
        auth_type::COMMON,
        auth_id::NEGOTIATE,
        t_id,
        8 + DESCRIPTOR_LEN,
    );
    m[7] = 1;
    let d = &mut m[8..];
    d[0] = DHCHAP_AUTH_ID;
    d[2] = hashes.len() as u8;
    d[3] = groups.len() as u8;
    for (i, h) in hashes.iter().enumerate() {
        d[4 + i] = h.id();
    }
    for (i, g) in groups.iter().enumerate() {
        d[34 + i] = g.id();
    }
    m
}

/// DH-HMAC-CHAP_Reply (the host side).
pub fn encode_reply(t_id: u16, reply: &Reply<'_>) -> Vec<u8> {
    let hl = reply.response.len();
    let len = 16 + 2 * hl + reply.dh_value.len();
    let mut m = header(auth_type::DHCHAP, auth_id::REPLY, t_id, len);
    m[6] = hl as u8;
    m[10..12].copy_from_slice(&(reply.dh_value.len() as u16).to_le_bytes());
    m[16..16 + hl].copy_from_slice(reply.response);
    if let Some((c2, seqnum)) = reply.challenge {
        m[8] = 1;
        m[12..16].copy_from_slice(&seqnum.to_le_bytes());
        m[16 + hl..16 + 2 * hl].copy_from_slice(c2);
    }
    m[16 + 2 * hl..].copy_from_slice(reply.dh_value);
    m
}

/// AUTH_Failure2: the host refuses the controller's response (the host
/// side).
pub fn encode_failure2(t_id: u16) -> Vec<u8> {
    let mut m = header(auth_type::COMMON, auth_id::FAILURE2, t_id, 8);
    m[6] = REASON_FAILED;
    m[7] = Failure::Failed as u8;
    m
}

/// DH-HMAC-CHAP_Success2 (the host side).
pub fn encode_success2(t_id: u16) -> Vec<u8> {
    header(auth_type::DHCHAP, auth_id::SUCCESS2, t_id, 16)
}

#[cfg(test)]
mod tests;
