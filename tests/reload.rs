//! Live reload on the whole appliance (host backend) under a loopback stream
//! at 1,000 frames/s: 50 parameter reloads and 5 shape reloads lose no
//! frame, every result is computed with exactly the chain of the generation
//! it carries (and not with its neighbours'), and an invalid config or a
//! change that needs a restart leaves the running chain untouched.

mod appliance_support;
mod reload_support;

use appliance_support::host_config;
use reload_support::{FRAME_BYTES, chain_of, reloads_under_load};

const FRAMES: u64 = 9000;

#[test]
fn fifty_five_reloads_under_load_lose_nothing_and_each_result_has_its_generation() {
    let mut cfg = host_config(chain_of(0));
    cfg.ring.slot_bytes = FRAME_BYTES;
    // Room for every frame: however long the loop is descheduled, none is dropped.
    cfg.ring.slots = (FRAMES as usize).next_power_of_two();
    reloads_under_load(&cfg, FRAMES, 1000.0, "host");
}
