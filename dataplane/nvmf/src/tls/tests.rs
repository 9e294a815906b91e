use super::*;

const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:5f1b0c2e-8d4a-4c61-9b7e-2a3d6e9f0c41";
const SUB: &str = "nqn.2016-06.io.spdk:cnode1";

#[test]
fn identities_parse_and_encode_as_hosts_send_them() {
    let v0 = format!("NVMe0R01 {HOST} {SUB}");
    let id = PskIdentity::parse(v0.as_bytes()).unwrap();
    assert_eq!((id.version, id.hash), (0, Hash::Sha256));
    assert_eq!((id.hostnqn.as_str(), id.subnqn.as_str()), (HOST, SUB));
    assert_eq!(id.digest, None);
    assert_eq!(id.encode(), v0);
    let v1 = format!("NVMe1R02 {HOST} {SUB} AbCd+/==");
    let id = PskIdentity::parse(v1.as_bytes()).unwrap();
    assert_eq!((id.version, id.hash), (1, Hash::Sha384));
    assert_eq!(id.digest.as_deref(), Some("AbCd+/=="));
    assert_eq!(id.encode(), v1);
}

#[test]
fn bad_identities_are_refused_with_the_reason() {
    for (s, why) in [
        (format!("NVMe0G01 {HOST} {SUB}"), "generated"),
        (format!("NVMe2R01 {HOST} {SUB}"), "version 2"),
        (format!("NVMe0R03 {HOST} {SUB}"), "hash 03"),
        (format!("NVMe0R01 {HOST}"), "2 fields"),
        (format!("NVMe0R01 {HOST}  {SUB}"), "fields"),
        (format!("NVMe1R01 {HOST} {SUB}"), "3 fields"),
        (format!("NVMe0R01 {HOST} {SUB}\u{202e}"), "printable"),
        ("TLS0R01 a b".to_owned(), "NVMe"),
        ("x".repeat(700), "too long"),
    ] {
        let e = PskIdentity::parse(s.as_bytes()).unwrap_err();
        assert!(e.0.contains(why), "{s:?}: {e}");
    }
}

/// What nvme-cli 2.13 (libnvme 1.13) put into a Linux 6.12 guest's .nvme
/// keyring for one configured PSK, host and subsystem, with identity
/// versions 0 and 1 (`nvme check-tls-key --identity=N --insert`, then
/// `nvme tls-key --export`, which prints each key's payload in the
/// interchange format): the TLS PSKs tlshd hands to the handshake.
#[test]
fn tls_psks_match_what_nvme_cli_put_into_the_kernel_keyring() {
    let configured =
        TlsPsk::parse("NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:").unwrap();
    let payload = |exported: &str| {
        // The export writes the identity version where the format's
        // version is; the payload is a key like any other.
        TlsPsk::parse(&exported.replacen("NVMeTLSkey-0", "NVMeTLSkey-1", 1))
            .unwrap()
            .key()
            .to_vec()
    };
    let v0 = PskIdentity::parse(format!("NVMe0R01 {HOST} {SUB}").as_bytes()).unwrap();
    assert_eq!(
        *configured.tls_psk(&v0),
        payload("NVMeTLSkey-0:01:cdExgKSza/fiQRwzDBzGGY6jGYm2h+GGFD3e49ukg+GzAwZV:")
    );
    let v1 = PskIdentity::parse(
        format!("NVMe1R01 {HOST} {SUB} eWTbo/cTYMOh3T4bQjfzYb7/Yyd/6HkC1qgG1DEtOCU=").as_bytes(),
    )
    .unwrap();
    assert_eq!(
        *configured.tls_psk(&v1),
        payload("NVMeTLSkey-1:01:B3UmQ3oHRty25EXWDn5RZ3+sKl5OZODfzPExLSocYVAU2Z5P:")
    );
    // Another host or subsystem gets another key.
    let other = PskIdentity {
        subnqn: "nqn.2016-06.io.spdk:cnode2".into(),
        ..v0
    };
    assert_ne!(*configured.tls_psk(&other), *configured.tls_psk(&v1));
}
