//! Feeds arbitrary bytes to the DH-HMAC-CHAP message parsers, as a
//! controller reads what a host sends (and a host what a controller
//! sends), and a Reply's DH value to the key exchange. Nothing may panic;
//! what parses accounts for every byte.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nvmf::auth::ffdhe::KeyPair;
use nvmf::auth::{ControllerMessage, DhGroup, HostMessage};
use std::sync::OnceLock;

/// One key pair per run: generating one per input would dominate the
/// time; the peer-value checks are what is fuzzed.
fn key_pair() -> &'static KeyPair {
    static KP: OnceLock<KeyPair> = OnceLock::new();
    KP.get_or_init(|| KeyPair::generate(DhGroup::Ffdhe2048).expect("key pair"))
}

fuzz_target!(|data: &[u8]| {
    match HostMessage::parse(data) {
        Ok(HostMessage::Reply(r)) => {
            assert_eq!(16 + 2 * r.response.len() + r.dh_value.len(), data.len());
            if r.dh_value.len() == 256 {
                let _ = key_pair().shared_secret(r.dh_value);
            }
        }
        Ok(HostMessage::Success2 { .. }) => assert_eq!(data.len(), 16),
        Ok(HostMessage::Negotiate {
            dhchap: Some(o), ..
        }) => {
            assert!(o.hashes.len() <= 30 && o.groups.len() <= 30);
        }
        _ => {}
    }
    let _ = ControllerMessage::parse(data);
});
