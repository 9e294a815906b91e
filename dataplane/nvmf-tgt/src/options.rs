//! Transport options (SPDK's `nvmf_create_transport` for TCP) and their
//! ranges.

use std::time::Duration;

use crate::TargetError;

/// The longest timeout an option may set: deadlines computed from them
/// stay far from overflow, and a host waits an hour at most.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

/// Transport parameters (SPDK `nvmf_create_transport` for TCP).
#[derive(Clone, Debug)]
pub struct TransportOptions {
    /// Entries per I/O queue (CAP.MQES + 1, MAXCMD).
    pub max_queue_depth: u16,
    /// Entries of the admin queue at most.
    pub max_aq_depth: u16,
    /// I/O queues per controller at most (admin queue not included).
    pub max_io_qpairs_per_ctrlr: u16,
    /// In-capsule data accepted, bytes (IOCCSZ - 64).
    pub in_capsule_data_size: u32,
    /// Largest transfer of one command, bytes (a power of two of 4 KiB:
    /// MDTS).
    pub max_io_size: u32,
    /// Largest H2CData PDU payload (MAXH2CDATA).
    pub max_h2c_data: u32,
    /// Send read data with the C2HData SUCCESS flag and no response capsule
    /// (off by default: some initiators mishandle it).
    pub c2h_success: bool,
    /// How long a queue pair that ends waits for the commands it already
    /// handed to a bdev (graceful shutdown, host disconnect, keep-alive
    /// expiry, removal); commands still running then are abandoned and
    /// counted in `rackcache_nvmf_abandoned_requests_total`.
    pub drain_timeout: Duration,
    /// Data buffer units shared by every queue pair (SPDK's
    /// `num_shared_buffers`): the budget is `num_shared_buffers *
    /// io_unit_size` bytes.
    pub num_shared_buffers: u32,
    /// Freed buffers each queue pair keeps for reuse (SPDK's
    /// `buf_cache_size`; here per queue pair, holding no budget units; all
    /// caches together keep at most the budget's bytes).
    pub buf_cache_size: u32,
    /// Bytes of one buffer unit (SPDK's `io_unit_size`).
    pub io_unit_size: u32,
    /// A write whose data has not all arrived this long after its R2T was
    /// sent ends its queue pair, freeing its buffers (each request has its
    /// own deadline: data for one does not extend another's). A command
    /// that has waited this long for buffer units is failed with Command
    /// Interrupted (the host retries it).
    pub h2c_data_timeout: Duration,
    /// A socket write that makes no progress for this long (the host does
    /// not read) ends the queue pair.
    pub write_timeout: Duration,
    /// Hosts connected at once through one listener (queue pairs past
    /// their Fabrics Connect); a Connect beyond it is answered Controller
    /// Busy.
    pub max_connections_per_listener: u32,
    /// Sockets of one listener that have not yet identified themselves
    /// (ICReq and a successful Connect); more are closed when accepted.
    pub max_unidentified_per_listener: u32,
    /// The same, per peer address.
    pub max_unidentified_per_peer: u32,
    /// A socket that has not sent its ICReq and a successful Connect this
    /// long after it was accepted is closed.
    pub identify_timeout: Duration,
    /// A queue whose host has a DH-HMAC-CHAP key and has not authenticated
    /// this long after its Connect is closed (keep-alive does not run
    /// before: the host cannot send Keep Alive yet). Generous: a host's
    /// first FFDHE-8192 exchange, crypto self-tests included, takes
    /// seconds on a slow CPU.
    pub auth_timeout: Duration,
    /// A connection whose peer stops answering TCP keep-alive probes (sent
    /// after this long without traffic, then every third of it, three
    /// times), or leaves sent data unacknowledged this long, is closed: a
    /// host that vanished with keep-alive (KATO) 0 does not hold its
    /// controller forever.
    pub tcp_keepalive: Duration,
}

impl Default for TransportOptions {
    fn default() -> Self {
        Self {
            max_queue_depth: 128,
            max_aq_depth: 128,
            max_io_qpairs_per_ctrlr: 127,
            in_capsule_data_size: 8192,
            max_io_size: 1 << 20,
            max_h2c_data: 128 << 10,
            c2h_success: false,
            drain_timeout: Duration::from_secs(5),
            num_shared_buffers: 511,
            buf_cache_size: 32,
            io_unit_size: 128 << 10,
            h2c_data_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(10),
            max_connections_per_listener: 1024,
            max_unidentified_per_listener: 128,
            max_unidentified_per_peer: 32,
            identify_timeout: Duration::from_secs(10),
            auth_timeout: Duration::from_secs(30),
            tcp_keepalive: Duration::from_secs(30),
        }
    }
}

impl TransportOptions {
    /// Checks the options' ranges.
    pub fn validate(&self) -> Result<(), TargetError> {
        let bad = |m: String| Err(TargetError::InvalidArgument(m));
        if !(2..=4096).contains(&self.max_queue_depth) {
            return bad(format!(
                "max_queue_depth {} not in 2..=4096",
                self.max_queue_depth
            ));
        }
        if !(32..=4096).contains(&self.max_aq_depth) {
            return bad(format!(
                "max_aq_depth {} not in 32..=4096",
                self.max_aq_depth
            ));
        }
        if self.max_io_qpairs_per_ctrlr == 0 {
            return bad("max_io_qpairs_per_ctrlr must be at least 1".into());
        }
        if self.in_capsule_data_size < 4096
            || self.in_capsule_data_size > (128 << 10)
            || !self.in_capsule_data_size.is_multiple_of(16)
        {
            return bad(format!(
                "in_capsule_data_size {} must be a multiple of 16 from 4096 to 131072",
                self.in_capsule_data_size
            ));
        }
        if !self.max_io_size.is_power_of_two() || !(4096..=(8 << 20)).contains(&self.max_io_size) {
            return bad(format!(
                "max_io_size {} must be a power of two from 4 KiB to 8 MiB",
                self.max_io_size
            ));
        }
        if self.max_h2c_data < 4096
            || !self.max_h2c_data.is_multiple_of(4)
            || self.max_h2c_data > (1 << 20)
        {
            return bad(format!(
                "max_h2c_data {} must be a multiple of 4 from 4096 to 1 MiB",
                self.max_h2c_data
            ));
        }
        // A unit larger than max_io_size is allowed (SPDK clamps it): each
        // command then takes one unit.
        if !(512..=(8 << 20)).contains(&self.io_unit_size) {
            return bad(format!(
                "io_unit_size {} must be from 512 to 8 MiB",
                self.io_unit_size
            ));
        }
        let per_transfer = self.max_io_size.div_ceil(self.io_unit_size);
        if self.num_shared_buffers < per_transfer {
            return bad(format!(
                "num_shared_buffers {} cannot hold one max_io_size transfer ({per_transfer} units of io_unit_size)",
                self.num_shared_buffers
            ));
        }
        for (what, n) in [
            (
                "max_connections_per_listener",
                self.max_connections_per_listener,
            ),
            (
                "max_unidentified_per_listener",
                self.max_unidentified_per_listener,
            ),
            ("max_unidentified_per_peer", self.max_unidentified_per_peer),
        ] {
            if n == 0 {
                return bad(format!("{what} must be at least 1"));
            }
        }
        for (what, d) in [
            ("h2c_data_timeout", self.h2c_data_timeout),
            ("write_timeout", self.write_timeout),
            ("drain_timeout", self.drain_timeout),
            ("identify_timeout", self.identify_timeout),
            ("auth_timeout", self.auth_timeout),
            ("tcp_keepalive", self.tcp_keepalive),
        ] {
            if d.is_zero() || d > MAX_TIMEOUT {
                return bad(format!(
                    "{what} {} ms must be from 1 ms to {} ms",
                    d.as_millis(),
                    MAX_TIMEOUT.as_millis()
                ));
            }
        }
        Ok(())
    }

    /// MDTS: log2 of the largest transfer in 4 KiB pages.
    pub fn mdts(&self) -> u8 {
        (self.max_io_size / 4096).trailing_zeros() as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_are_bounded() {
        let ok = TransportOptions {
            h2c_data_timeout: MAX_TIMEOUT,
            write_timeout: MAX_TIMEOUT,
            drain_timeout: MAX_TIMEOUT,
            ..TransportOptions::default()
        };
        ok.validate().unwrap();
        // u64::MAX ms (as `rackcache_h2c_data_timeout_ms` may say) would
        // overflow a deadline computed from it.
        for set in [
            |o: &mut TransportOptions, d| o.h2c_data_timeout = d,
            |o: &mut TransportOptions, d| o.write_timeout = d,
            |o: &mut TransportOptions, d| o.drain_timeout = d,
        ] {
            for d in [
                Duration::from_millis(u64::MAX),
                MAX_TIMEOUT + Duration::from_millis(1),
            ] {
                let mut o = TransportOptions::default();
                set(&mut o, d);
                let e = o.validate().unwrap_err().to_string();
                assert!(e.contains("must be from 1 ms to 3600000 ms"), "{e}");
            }
        }
    }
}
