//! The TCP endpoint's certificate follows its files, as the operator
//! rotates it: the files are swapped the kubelet's way (a new directory,
//! then the `..data` symlink flipped), and new connections get the new
//! certificate without a restart; unusable replacements (key of another
//! certificate, not PEM, already expired) are refused with a warning and
//! the previous certificate keeps serving.

mod common;

use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::{Duration, Instant};

use common::tls::{https, peer_certificate, rpc_request, Issued, TestCa};
use common::{free_port, rpc, Daemon};
use testkit::TempDir;
use tokio_rustls::rustls::pki_types::CertificateDer;

const TOKEN: &str = "0123456789abcdef-test-token";
/// The warning a refused replacement logs.
const REFUSED: &str = "keeping the previous certificate";
/// The line a switch logs.
const REPLACED: &str = "TLS certificate replaced";
/// Bound on waiting for the daemon to look at the files again (it does at
/// most every few seconds, on a new connection).
const WAIT: Duration = Duration::from_secs(60);

/// Publishes `cert` and `key` as generation `generation` of a Secret
/// volume in `dir`: `tls.crt` -> `..data/tls.crt`, `..data` -> the
/// generation's directory, flipped by one rename.
fn publish(dir: &Path, generation: u32, cert: &str, key: &str) {
    let name = format!("..gen{generation}");
    std::fs::create_dir(dir.join(&name)).unwrap();
    std::fs::write(dir.join(&name).join("tls.crt"), cert).unwrap();
    std::fs::write(dir.join(&name).join("tls.key"), key).unwrap();
    symlink(&name, dir.join("..data_tmp")).unwrap();
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
    for f in ["tls.crt", "tls.key"] {
        if !dir.join(f).exists() {
            symlink(format!("..data/{f}"), dir.join(f)).unwrap();
        }
    }
}

/// (serial, notAfter as Unix time) of a DER certificate.
fn serial_and_expiry(der: &CertificateDer<'_>) -> (String, i64) {
    let (_, c) = x509_parser::parse_x509_certificate(der).unwrap();
    (c.raw_serial_as_string(), c.validity().not_after.timestamp())
}

fn log(work: &TempDir) -> String {
    std::fs::read_to_string(work.path().join("spdk.sock").with_extension("log")).unwrap()
}

/// Connects again and again (each connection lets the daemon look at the
/// files) until the log holds `count` lines with `what`; every connection
/// meanwhile must still get `serving`.
fn wait_for_log(
    work: &TempDir,
    port: u16,
    ca: &CertificateDer<'static>,
    what: &str,
    count: usize,
    serving: &Issued,
) {
    let deadline = Instant::now() + WAIT;
    while log(work).matches(what).count() < count {
        assert!(
            Instant::now() < deadline,
            "no {what:?} #{count} in the log:\n{}",
            log(work)
        );
        assert_eq!(
            peer_certificate(port, ca).unwrap(),
            serving.der,
            "switched to an unusable pair"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_rotated_certificate_is_served_without_restart_and_a_broken_one_is_refused() {
    let work = TempDir::new("rackcache-tls-reload");
    let secret = work.path().join("secret");
    std::fs::create_dir(&secret).unwrap();
    let ca = TestCa::new("rotation");
    let first = ca.issue(0x1001, (2030, 1, 1));
    publish(&secret, 1, &first.cert_pem, &first.key_pem);
    let token_file = work.path().join("token");
    std::fs::write(&token_file, TOKEN).unwrap();

    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let socket = work.path().join("spdk.sock");
    let (cert, key) = (secret.join("tls.crt"), secret.join("tls.key"));
    let _d = Daemon::start_with(
        &socket,
        None,
        &[
            "--rpc-listen",
            &addr,
            "--rpc-token-file",
            token_file.to_str().unwrap(),
            "--rpc-tls-cert",
            cert.to_str().unwrap(),
            "--rpc-tls-key",
            key.to_str().unwrap(),
        ],
    );
    // State that a restart would lose (no configuration is persisted).
    rpc(
        &socket,
        "bdev_malloc_create",
        serde_json::json!({"name": "M0", "num_blocks": 64, "block_size": 512}),
    );
    let served = peer_certificate(port, ca.der()).unwrap();
    assert_eq!(serial_and_expiry(&served), serial_and_expiry(&first.der));

    // Unusable replacements, each warned about, none served.
    let second = ca.issue(0x1002, (2031, 1, 1));
    let expired = ca.issue(0x1003, (2021, 1, 1));
    // (certificate, key, what the warning must say)
    let broken = [
        (
            second.cert_pem.clone(),
            first.key_pem.clone(),
            "the private key does not match the certificate",
        ),
        (
            "not a certificate\n".to_owned(),
            second.key_pem.clone(),
            "holds no PEM certificate",
        ),
        (
            expired.cert_pem.clone(),
            expired.key_pem.clone(),
            "expired at Jan  1 00:00:00 2021",
        ),
    ];
    for (i, (c, k, reason)) in broken.iter().enumerate() {
        publish(&secret, 2 + i as u32, c, k);
        wait_for_log(&work, port, ca.der(), REFUSED, i + 1, &first);
        assert_eq!(
            peer_certificate(port, ca.der()).unwrap(),
            first.der,
            "served although {reason}"
        );
        let logged = log(&work);
        let warning = logged
            .lines()
            .filter(|l| l.contains(REFUSED))
            .nth(i)
            .unwrap();
        assert!(warning.contains(reason), "{reason:?} not in {warning}");
    }

    // A good replacement: new connections get it, with no restart between.
    let third = ca.issue(0x1004, (2032, 6, 1));
    publish(&secret, 9, &third.cert_pem, &third.key_pem);
    let deadline = Instant::now() + WAIT;
    loop {
        let served = peer_certificate(port, ca.der()).unwrap();
        if served == third.der {
            break;
        }
        assert_eq!(served, first.der, "neither the old nor the new certificate");
        assert!(
            Instant::now() < deadline,
            "the new certificate was never served:\n{}",
            log(&work)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        serial_and_expiry(&peer_certificate(port, ca.der()).unwrap()),
        serial_and_expiry(&third.der)
    );
    let logged = log(&work);
    let line = logged
        .lines()
        .find(|l| l.contains(REPLACED))
        .unwrap_or_else(|| panic!("no {REPLACED:?}:\n{logged}"));
    assert!(
        line.contains("2032"),
        "the new expiry is not logged: {line}"
    );
    // The same process: the bdev made before is still there, over TLS.
    let list = r#"{"jsonrpc":"2.0","id":1,"method":"bdev_get_bdevs"}"#;
    let (code, body) = https(port, ca.der(), &rpc_request(Some(TOKEN.as_bytes()), list));
    assert_eq!(code, 200);
    assert!(body.contains("\"M0\""), "{body}");
    // No key material in the log.
    assert!(!logged.contains("PRIVATE KEY"), "{logged}");
    for k in [&first, &second, &expired, &third] {
        let body_line = k.key_pem.lines().nth(1).unwrap();
        assert!(
            !logged.contains(body_line),
            "a private key leaked into the log"
        );
    }
}
