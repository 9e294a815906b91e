//! Wire formats of NVMe over Fabrics on TCP (NVMe/TCP transport specification
//! 1.0, NVMe base specification 2.0), as pure functions over byte buffers.
//!
//! Nothing here does I/O: the target's connection state machine reads bytes
//! from a socket into a buffer, asks [`pdu::parse_header`] what they are, and
//! writes replies built by the `encode_*` functions. Keeping the codec pure
//! makes it fuzzable on its own (see `fuzz/`) and reusable by the host-side
//! load generator.
//!
//! - [`pdu`]: the PDU common header and every PDU kind's specific header,
//!   with the validation that decides when a connection must be ended with a
//!   TermReq ([`pdu::FatalError`]).
//! - [`sqe`] / [`cqe`]: the 64-byte submission and 16-byte completion queue
//!   entries carried in command and response capsules.
//! - [`digest`]: CRC32C header and data digests.
//! - [`keys`] and [`auth`]: the secrets of in-band authentication and TLS,
//!   and DH-HMAC-CHAP's messages and computations.
//! - [`tls`]: the secure channel's PSK identities and TLS PSK derivation.

pub mod auth;
pub mod cqe;
pub mod digest;
pub mod keys;
pub mod pdu;
pub mod sqe;
pub mod tls;
