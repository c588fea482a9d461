//! What one appliance of this process holds and a second one started in
//! the same process must not share, refused with a message instead:
//!
//! - a GPU's resident loop: a second appliance on that GPU would wait for
//!   the first one's graph to end before its own could be built, that is
//!   for ever;
//! - a UDP port: with `SO_REUSEPORT` (`ingest.reuse_port`, on by default)
//!   the second receiver would bind it too, and the kernel would split the
//!   datagrams between the two at random.
//!
//! Several loops on one GPU or port are started together by one `[[loop]]`
//! config (built before any launches, one receiver routing each loop its
//! streams), which claims nothing here.

use super::AppError;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::{Mutex, PoisonError};

static CLAIMED: Mutex<BTreeSet<usize>> = Mutex::new(BTreeSet::new());
static PORTS: Mutex<BTreeSet<(bool, u16)>> = Mutex::new(BTreeSet::new());

/// A UDP port one appliance's receiver is bound to, held until dropped.
#[derive(Debug)]
pub struct PortClaim {
    key: (bool, u16),
}

impl PortClaim {
    /// Claims the port of `addr` (per address family: any address of it
    /// shares the port with a wildcard bind).
    pub fn take(addr: SocketAddr) -> Result<Self, AppError> {
        let key = (addr.is_ipv4(), addr.port());
        let mut claimed = PORTS.lock().unwrap_or_else(PoisonError::into_inner);
        if !claimed.insert(key) {
            return Err(AppError::PortTaken { addr });
        }
        Ok(Self { key })
    }
}

impl Drop for PortClaim {
    fn drop(&mut self) {
        PORTS.lock().unwrap_or_else(PoisonError::into_inner).remove(&self.key);
    }
}

/// GPU `ordinal`'s resident loop, held by one appliance until dropped.
#[derive(Debug)]
pub struct GpuClaim {
    ordinal: usize,
}

impl GpuClaim {
    /// Claims GPU `ordinal`, or says which appliance holds it and what to do.
    pub fn take(ordinal: usize) -> Result<Self, AppError> {
        let mut claimed = CLAIMED.lock().unwrap_or_else(PoisonError::into_inner);
        if !claimed.insert(ordinal) {
            return Err(AppError::GpuTaken { gpu: ordinal });
        }
        Ok(Self { ordinal })
    }
}

impl Drop for GpuClaim {
    fn drop(&mut self) {
        CLAIMED.lock().unwrap_or_else(PoisonError::into_inner).remove(&self.ordinal);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gpu_is_claimed_once_until_its_claim_drops() {
        // An ordinal no other test uses.
        let first = GpuClaim::take(977).unwrap();
        let err = GpuClaim::take(977).unwrap_err().to_string();
        assert!(err.contains("GPU 977") && err.contains("[[loop]]"), "{err}");
        let other = GpuClaim::take(978).unwrap();
        drop(first);
        drop(GpuClaim::take(977).unwrap());
        drop(other);
    }

    #[test]
    fn a_port_is_claimed_once_per_family_until_its_claim_drops() {
        let v4: SocketAddr = "127.0.0.1:59977".parse().unwrap();
        let first = PortClaim::take(v4).unwrap();
        let err = PortClaim::take("0.0.0.0:59977".parse().unwrap()).unwrap_err().to_string();
        assert!(err.contains("59977") && err.contains("ingest.bind"), "{err}");
        let v6 = PortClaim::take("[::1]:59977".parse().unwrap()).unwrap();
        drop(first);
        drop(PortClaim::take(v4).unwrap());
        drop(v6);
    }
}
