//! The GPUs whose resident loop an appliance of this process runs: a second
//! appliance started on such a GPU would wait for the first one's graph to
//! end before its own could be built, that is for ever, so it is refused
//! with a message instead. Several loops on one GPU are started together by
//! one `[[loop]]` config (each built before any launches), which claims
//! nothing here.

use super::AppError;
use std::collections::BTreeSet;
use std::sync::{Mutex, PoisonError};

static CLAIMED: Mutex<BTreeSet<usize>> = Mutex::new(BTreeSet::new());

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
}
