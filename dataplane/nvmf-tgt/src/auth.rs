//! What in-band authentication (DH-HMAC-CHAP) takes from the target's
//! configuration: each allowed host's keys (`nvmf_subsystem_add_host
//! --dhchap-key --dhchap-ctrlr-key`, replaced by `nvmf_subsystem_set_keys`)
//! and the hashes and groups the target accepts (`nvmf_set_config`). The
//! protocol itself runs per queue pair in `ctrlr::auth`.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use nvmf::auth::DhGroup;
use nvmf::keys::{DhchapSecret, Hash, TlsPsk};

/// A secret with the keyring name it was configured by (the name is what
/// configuration dumps show; the secret never leaves the process).
pub struct NamedKey {
    pub name: String,
    pub secret: DhchapSecret,
}

/// A TLS PSK with the keyring name it was configured by.
pub struct NamedPsk {
    pub name: String,
    pub psk: TlsPsk,
}

/// One allowed host's keys. With a DH-HMAC-CHAP host key the host must
/// authenticate on every queue; with a controller key too, a host that
/// asks can authenticate the controller (bidirectional). With a TLS PSK
/// the host connects only through a secure-channel listener, its TLS PSK
/// identity naming it and the subsystem.
#[derive(Clone, Default)]
pub struct HostKeys {
    pub host: Option<Arc<NamedKey>>,
    pub ctrlr: Option<Arc<NamedKey>>,
    pub psk: Option<Arc<NamedPsk>>,
    /// The host has keys this target does not hold yet (a restarted
    /// daemon's host whose keys lived in memory only): its Connects are
    /// answered Controller Busy, which a host retries without giving up,
    /// until keys are set. Never let in keyless meanwhile.
    pub pending: bool,
}

impl HostKeys {
    /// Whether the host must authenticate.
    pub fn required(&self) -> bool {
        self.host.is_some()
    }
}

/// The hashes and groups the target accepts, as bit masks by identifier
/// (default: all of them; the strongest both ends accept is chosen).
pub struct AuthPolicy {
    digests: AtomicU8,
    groups: AtomicU8,
}

impl Default for AuthPolicy {
    fn default() -> Self {
        Self {
            digests: AtomicU8::new(Self::mask(
                [Hash::Sha256, Hash::Sha384, Hash::Sha512].map(Hash::id),
            )),
            groups: AtomicU8::new(Self::mask(DhGroup::ALL.map(DhGroup::id))),
        }
    }
}

impl AuthPolicy {
    fn mask(ids: impl IntoIterator<Item = u8>) -> u8 {
        ids.into_iter().fold(0, |m, id| m | 1 << id)
    }

    /// Accepts only `digests` and `groups` (neither empty).
    pub fn set(&self, digests: &[Hash], groups: &[DhGroup]) {
        self.digests.store(
            Self::mask(digests.iter().map(|h| h.id())),
            Ordering::Relaxed,
        );
        self.groups
            .store(Self::mask(groups.iter().map(|g| g.id())), Ordering::Relaxed);
    }

    /// The accepted hashes, strongest first.
    pub fn digests(&self) -> Vec<Hash> {
        let m = self.digests.load(Ordering::Relaxed);
        [Hash::Sha512, Hash::Sha384, Hash::Sha256]
            .into_iter()
            .filter(|h| m & 1 << h.id() != 0)
            .collect()
    }

    /// The accepted groups, strongest first.
    pub fn groups(&self) -> Vec<DhGroup> {
        let m = self.groups.load(Ordering::Relaxed);
        DhGroup::ALL
            .into_iter()
            .rev()
            .filter(|g| m & 1 << g.id() != 0)
            .collect()
    }
}
