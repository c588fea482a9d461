//! Fuzz target: any bytes (as UTF-8 text) as a `frameloop.toml` through
//! `config::parse`; a config that parses must report no problems, and every
//! problem it refuses must name a key.
//! Seeds: `fuzz/seeds/config_parse`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match frameloop::config::parse(text) {
        Ok(config) => assert!(config.problems().is_empty(), "an accepted config with problems"),
        Err(e) => {
            for p in e.problems() {
                assert!(!p.key.is_empty(), "a config problem that names no key: {p}");
            }
        }
    }
});
