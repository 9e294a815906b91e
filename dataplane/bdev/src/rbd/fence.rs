//! Fencing another Ceph client: before a mirror server takes a volume
//! over, the old owner's librados connection is blocklisted, so that a
//! write it still has in flight (or sends later, cut off from the control
//! plane) is refused by every OSD instead of landing after the new owner's
//! writes. Ceph does the work (`osd blocklist add`); here are the two
//! calls it takes, a connection's own address (what the other side
//! blocklists) and the blocklisting, and the address check between them.

use std::ffi::{c_char, c_int, CStr};
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::ptr;

use super::{check, cstring, RbdCluster};
use crate::{BdevError, Result};

mod ffi {
    use std::ffi::{c_char, c_int};

    use super::super::ffi::rados_t;

    extern "C" {
        pub fn rados_getaddrs(cluster: rados_t, addrs: *mut *mut c_char) -> c_int;
        pub fn rados_blocklist_add(
            cluster: rados_t,
            client_address: *mut c_char,
            expire_seconds: u32,
        ) -> c_int;
        pub fn rados_buffer_free(buf: *mut c_char);
    }
}

/// One Ceph client instance's address, as `osd blocklist` takes it:
/// `IP:PORT/NONCE`, optionally with a messenger prefix (`v1:`, `v2:`,
/// `any:`), which the OSDs ignore when they match blocklist entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CephClientAddr {
    addr: SocketAddr,
    nonce: u32,
}

impl CephClientAddr {
    /// Parses `s` (as `rados_getaddrs`, `ceph osd blocklist ls` and
    /// `bdev_rbd_get_clusters_info` show an address). A nonce is required
    /// and must not be 0: `IP:0/0` is how Ceph blocklists every client on
    /// that IP, which is never what fencing one server means.
    pub fn parse(s: &str) -> Result<Self> {
        let bad = |why: &str| {
            Err(BdevError::InvalidArgument(format!(
                "Ceph client address {s:?}: {why} (expected IP:PORT/NONCE, e.g. v2:10.0.0.5:0/3271845612)"
            )))
        };
        if s.len() > 128 || !s.bytes().all(|b| b.is_ascii_graphic()) {
            return bad("at most 128 printable ASCII characters");
        }
        let bare = ["v1:", "v2:", "any:"]
            .iter()
            .find_map(|p| s.strip_prefix(p))
            .unwrap_or(s);
        let Some((sock, nonce)) = bare.rsplit_once('/') else {
            return bad("no /NONCE: the address must name one client instance");
        };
        let Ok(addr) = sock.parse::<SocketAddr>() else {
            return bad("not IP:PORT before the nonce");
        };
        match nonce.parse::<u32>() {
            Ok(0) => bad("nonce 0 would blocklist every client on that IP"),
            Ok(nonce) => Ok(Self { addr, nonce }),
            Err(_) => bad("the nonce is not a 32-bit number"),
        }
    }

    /// Whether both name the same client instance (messenger prefixes
    /// aside; an unspecified IP, a connection that has not learnt its
    /// address, matches any).
    pub fn same_client(&self, other: &Self) -> bool {
        let (a, b): (IpAddr, IpAddr) = (self.addr.ip(), other.addr.ip());
        self.nonce == other.nonce
            && self.addr.port() == other.addr.port()
            && (a == b || a.is_unspecified() || b.is_unspecified())
    }
}

impl fmt::Display for CephClientAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.nonce)
    }
}

/// Longest blocklisting: a year. A fenced server is cleaned up (its
/// pod restarted, with a new connection) long before; the bound only
/// catches unit mistakes (milliseconds for seconds).
pub const MAX_BLOCKLIST_SECONDS: u32 = 365 * 24 * 3600;

impl RbdCluster {
    /// This connection's address as Ceph knows it (what another client
    /// blocklists to fence this one), e.g. `v2:10.0.0.5:0/3271845612`. A
    /// connection with several (one per messenger version) gives the
    /// first: the OSDs match blocklist entries whatever the version.
    pub fn client_address(&self) -> Result<String> {
        let mut out: *mut c_char = ptr::null_mut();
        // SAFETY: connected handle; out receives a heap string or stays
        // null.
        let rc = unsafe { ffi::rados_getaddrs(self.handle, &mut out) };
        check(
            || format!("get the client address of cluster {}", self.name),
            rc,
        )?;
        if out.is_null() {
            return Err(BdevError::Ceph {
                op: format!("get the client address of cluster {}", self.name),
                errno: -libc::ENOENT,
            });
        }
        // SAFETY: librados returned a NUL-terminated string, freed below
        // with its own allocator, once.
        let all = unsafe {
            let s = CStr::from_ptr(out).to_string_lossy().into_owned();
            ffi::rados_buffer_free(out);
            s
        };
        Ok(first_address(&all).to_owned())
    }

    /// Blocklists the client at `addr` for `expire_seconds` (1 to
    /// [`MAX_BLOCKLIST_SECONDS`]): once this returns, the cluster map that
    /// refuses it is out, and this connection has it, so an OSD serving
    /// this connection's next operation refuses every later one of the
    /// blocklisted client. A monitor command: it blocks (up to the
    /// connection's monitor timeout); call it off the async threads.
    /// Refuses this connection's own address.
    pub fn blocklist_add(&self, addr: &CephClientAddr, expire_seconds: u32) -> Result<()> {
        if !(1..=MAX_BLOCKLIST_SECONDS).contains(&expire_seconds) {
            return Err(BdevError::InvalidArgument(format!(
                "expire_seconds {expire_seconds} outside 1..={MAX_BLOCKLIST_SECONDS}"
            )));
        }
        let own = CephClientAddr::parse(&self.client_address()?)?;
        if own.same_client(addr) {
            return Err(BdevError::InvalidArgument(format!(
                "{addr} is cluster {}'s own connection: a server cannot fence itself",
                self.name
            )));
        }
        let c = cstring("client address", &addr.to_string())?;
        // SAFETY: connected handle; librados only reads the string.
        let rc: c_int = unsafe {
            ffi::rados_blocklist_add(self.handle, c.as_ptr() as *mut c_char, expire_seconds)
        };
        check(|| format!("blocklist Ceph client {addr}"), rc)
    }
}

/// The first address of an address vector (`[v2:A/N,v1:B/N]`), or the
/// address itself.
fn first_address(s: &str) -> &str {
    let inner = s
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .unwrap_or(s);
    inner.split(',').next().unwrap_or(inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_addresses_parse_with_or_without_a_messenger_prefix() {
        for s in [
            "v2:10.0.0.5:0/3271845612",
            "10.0.0.5:0/3271845612",
            "any:10.0.0.5:0/3271845612",
        ] {
            let a = CephClientAddr::parse(s).unwrap();
            assert_eq!(a.to_string(), "10.0.0.5:0/3271845612", "{s}");
        }
        let v6 = CephClientAddr::parse("v1:[fd00::5]:6800/77").unwrap();
        assert_eq!(v6.to_string(), "[fd00::5]:6800/77");
    }

    #[test]
    fn addresses_that_name_no_single_client_are_refused() {
        for (s, why) in [
            ("10.0.0.5", "no /NONCE"),
            ("10.0.0.5:0/0", "every client on that IP"),
            ("10.0.0.5/12", "not IP:PORT"),
            ("host.example:0/12", "not IP:PORT"),
            ("10.0.0.5:0/-1", "not a 32-bit number"),
            ("10.0.0.5:0/99999999999", "not a 32-bit number"),
            ("[v2:10.0.0.5:0/1,v1:10.0.0.5:0/1]", "not IP:PORT"),
            ("10.0.0.5:0/1 ", "printable"),
            ("", "no /NONCE"),
        ] {
            let e = CephClientAddr::parse(s).unwrap_err().to_string();
            assert!(e.contains(why), "{s:?}: {e}");
        }
    }

    #[test]
    fn the_same_client_whatever_the_prefix() {
        let p = |s| CephClientAddr::parse(s).unwrap();
        assert!(p("v2:10.0.0.5:0/7").same_client(&p("10.0.0.5:0/7")));
        assert!(
            p("0.0.0.0:0/7").same_client(&p("10.0.0.5:0/7")),
            "not yet learnt"
        );
        assert!(!p("10.0.0.5:0/7").same_client(&p("10.0.0.5:0/8")));
        assert!(!p("10.0.0.5:0/7").same_client(&p("10.0.0.6:0/7")));
    }

    #[test]
    fn an_address_vector_gives_its_first() {
        assert_eq!(
            first_address("[v2:10.0.0.5:0/7,v1:10.0.0.5:0/7]"),
            "v2:10.0.0.5:0/7"
        );
        assert_eq!(first_address("10.0.0.5:0/7"), "10.0.0.5:0/7");
    }
}
