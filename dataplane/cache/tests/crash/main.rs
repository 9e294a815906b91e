//! Crash consistency of cached volumes, in process. The devices are RAM
//! behind bdevs the test steers ([`device`]): a crash drops every write from
//! then on (as after `kill -9`, only completed writes are on the media),
//! gates ([`gate`]) hold chosen operations to open the windows where
//! ordering matters, and faults fail them. After the crash the volume is
//! loaded again from the same RAM and what was acknowledged must read back.
//!
//! No test orders events by a delay: each waits until the operation that
//! opens its window is held at a gate, and every test runs under a paused
//! clock, which moves only when no task can run: [`rig::settle`] is "all
//! that can happen has happened", and a hang or a hot loop fails the test
//! within a bounded number of scheduler turns ([`rig::must`]). With
//! correct ordering every assertion holds whatever the interleaving; the
//! gates make sure the interleaving that breaks a wrong ordering happens.
//!
//! - [`rig`]: the set-up, the crash and the restart every test shares.
//! - [`acknowledgement`]: requests answered before their metadata is durable.
//! - [`ordering`]: metadata and data reaching the device in the wrong order.
//! - [`lifecycle`]: shrinking, a failing cache device, failing metadata.

#[path = "../common/mod.rs"]
mod common;
mod device;
mod gate;
mod rig;

mod acknowledgement;
mod lifecycle;
mod ordering;
