//! What SPDK's userspace initiator (`spdk_nvme_perf`) does differently from
//! Linux's, replayed through the in-memory host: an empty host NQN, and a
//! shutdown (CC.SHN) with an Asynchronous Event Request outstanding.

use nvmf_harness::{self as harness, HostStream};
use nvmf_host::wire::prop;

#[test]
fn empty_host_nqn_connects_where_any_host_is_allowed() {
    // The harness's subsystem allows any host; SPDK's perf sends an empty
    // host NQN unless given one, and SPDK's target accepts it.
    let s = HostStream::new()
        .ic_req()
        .connect_as(1, 0, 31, 0, "")
        .enable(2)
        .into_bytes();
    let out = harness::run(&s);
    let a = harness::check_controller_stream(&s, &out).unwrap();
    assert_eq!(a.responses, [(1, 0), (2, 0)], "Connect and enable succeed");
}

#[test]
fn shutdown_answers_property_set_and_leaves_aers_unanswered() {
    // perf keeps an AER outstanding and abandons it before it writes
    // CC.SHN: a completion for it would be a cid the host no longer knows
    // ("no tcp_req is found with cid=...", "Failed to write CC.SHN").
    let s = HostStream::new()
        .ic_req()
        .connect(1, 0, 31, 0)
        .enable(2)
        .async_event_request(3)
        .property_set(4, prop::CC, prop::CC_ENABLE | prop::CC_SHN_NORMAL)
        .into_bytes();
    let out = harness::run(&s);
    let a = harness::check_controller_stream(&s, &out).unwrap();
    assert_eq!(
        a.responses,
        [(1, 0), (2, 0), (4, 0)],
        "the Property Set is answered, the AER is not"
    );
}
