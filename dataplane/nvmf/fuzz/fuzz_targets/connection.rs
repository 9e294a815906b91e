//! Feeds arbitrary bytes as a host's side of one NVMe/TCP connection to a
//! real target (one subsystem on a small malloc bdev, any host allowed,
//! controller 1's admin queue already connected and enabled, so the bytes
//! may open an admin or an I/O queue): ICReq, Connect, admin and I/O
//! commands, R2T/H2CData and malformed PDUs all go through the connection's
//! state machine and command dispatch. Nothing may panic or hang (the
//! harness bounds each run in bytes and time), and everything the target
//! sends back must be complete, well-formed controller PDUs.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nvmf_harness as harness;

fuzz_target!(|data: &[u8]| {
    let out = harness::run(data);
    if let Err(e) = harness::check_controller_stream(data, &out) {
        panic!("malformed answer: {e}");
    }
});
