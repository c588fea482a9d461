//! The `[handler]` config section: a user data-ready handler (a CUDA
//! `__device__` function, `fl_handler_fn` in `frameloop.cuh`) that decides
//! when a ring slot holds a new frame, replacing the built-in handler that
//! watches the ring's head sequence. Compiling it is the CUDA backend's job
//! (`gpu::user::handler`); nothing here reads files.

use super::user_kernel::is_c_identifier;
use serde::{Deserialize, Deserializer, Serialize};
use std::path::{Path, PathBuf};

/// `[handler]`: which source file and which function.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandlerConfig {
    /// The `.cu` file; a relative path is relative to the config file's directory.
    pub source: PathBuf,
    /// The `__device__` function with the `fl_handler_fn` signature.
    #[serde(deserialize_with = "entry_name")]
    pub entry: String,
}

/// `entry` must be a C identifier: it is spliced into the generated wrapper kernel.
fn entry_name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let entry = String::deserialize(d)?;
    if is_c_identifier(&entry) {
        Ok(entry)
    } else {
        Err(serde::de::Error::custom(format!(
            "{entry:?} is not a C identifier; name the __device__ function (letters, digits, _)"
        )))
    }
}

impl HandlerConfig {
    /// The source file, a relative `source` taken relative to the directory
    /// of `config_file` (the file the section was loaded from).
    pub fn source_path(&self, config_file: &Path) -> PathBuf {
        if self.source.is_absolute() {
            return self.source.clone();
        }
        config_file.parent().unwrap_or(Path::new(".")).join(&self.source)
    }

    /// Why the host backend cannot run this handler, for its refusal.
    pub fn host_refusal(&self) -> String {
        format!(
            "handler \"{}\" is CUDA device code that polls ring memory on the GPU; the host backend cannot run it: \
             use backend = \"cuda\" on a machine with a GPU, or remove [handler]",
            self.entry
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_resolves_the_source_next_to_the_config() {
        let h: HandlerConfig = toml::from_str("source = 'h/hsb.cu'\nentry = 'hsb_ready'").unwrap();
        assert_eq!(h.entry, "hsb_ready");
        assert_eq!(h.source_path(Path::new("/etc/frameloop/a.toml")), Path::new("/etc/frameloop/h/hsb.cu"));
        let abs: HandlerConfig = toml::from_str("source = '/x/y.cu'\nentry = 'e'").unwrap();
        assert_eq!(abs.source_path(Path::new("/etc/a.toml")), Path::new("/x/y.cu"));
    }

    #[test]
    fn refuses_an_entry_that_is_not_an_identifier_and_unknown_keys() {
        let err = toml::from_str::<HandlerConfig>("source = 'a.cu'\nentry = 'x); evil('").unwrap_err();
        assert!(err.to_string().contains("not a C identifier"), "{err}");
        assert!(toml::from_str::<HandlerConfig>("source = 'a.cu'\nentry = 'e'\nthreads = 2").is_err());
        assert!(toml::from_str::<HandlerConfig>("entry = 'e'").is_err());
    }
}
