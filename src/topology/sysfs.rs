//! Bounded, tolerant reads of a sysfs tree rooted anywhere: the live `/sys`
//! or a recorded copy. A missing, oversized or irregular file reads as
//! unknown (`None`), never as an error or a blocking read.

use super::TopologyError;
use std::fs::{self, OpenOptions};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};

/// The most bytes one attribute may hold: a sysfs attribute fits in a page.
const ATTRIBUTE_LIMIT: usize = 4096;
/// The most entries taken from one directory, so a runaway tree cannot
/// make the reader allocate without bound.
const LISTING_LIMIT: usize = 4096;

/// A sysfs tree: every path given to it is relative to its root.
#[derive(Debug)]
pub(crate) struct Sysfs {
    /// The canonical root, so resolved links can be made relative to it.
    root: PathBuf,
}

impl Sysfs {
    /// Opens the tree at `root` (usually `/sys`); it must be a directory.
    pub(crate) fn open(root: &Path) -> Result<Self, TopologyError> {
        let canonical = fs::canonicalize(root)
            .map_err(|source| TopologyError::SysfsRoot { path: root.to_path_buf(), source })?;
        if !canonical.is_dir() {
            return Err(TopologyError::SysfsRoot {
                path: root.to_path_buf(),
                source: std::io::Error::new(std::io::ErrorKind::NotADirectory, "not a directory"),
            });
        }
        Ok(Sysfs { root: canonical })
    }

    /// The trimmed text of the attribute at `rel`, or `None` when it is
    /// missing, not a regular file, larger than a page or not UTF-8.
    pub(crate) fn attribute(&self, rel: &str) -> Option<String> {
        let path = self.root.join(rel);
        // A FIFO or device node would block or stream forever: only regular
        // files are opened, and without blocking in case one is swapped in.
        if !fs::metadata(&path).ok()?.is_file() {
            return None;
        }
        let file = OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(&path).ok()?;
        if !file.metadata().ok()?.is_file() {
            return None;
        }
        let mut bytes = Vec::with_capacity(64);
        file.take(ATTRIBUTE_LIMIT as u64 + 1).read_to_end(&mut bytes).ok()?;
        if bytes.len() > ATTRIBUTE_LIMIT {
            return None;
        }
        Some(String::from_utf8(bytes).ok()?.trim().to_owned())
    }

    /// The names in directory `rel`, sorted; empty when it is missing.
    pub(crate) fn entries(&self, rel: &str) -> Vec<String> {
        let Ok(dir) = fs::read_dir(self.root.join(rel)) else {
            return Vec::new();
        };
        let mut names: Vec<String> = dir
            .filter_map(Result::ok)
            .take(LISTING_LIMIT)
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        names.sort();
        names
    }

    /// Whether `rel` exists (a link counts even when it dangles).
    pub(crate) fn exists(&self, rel: &str) -> bool {
        fs::symlink_metadata(self.root.join(rel)).is_ok()
    }

    /// Where `rel` really lies, as path components below the root
    /// (`["devices", "pci0000:00", "0000:00:01.0", ...]`), following every
    /// link; `None` when it dangles or leads out of the tree.
    pub(crate) fn resolve(&self, rel: &str) -> Option<Vec<String>> {
        let real = fs::canonicalize(self.root.join(rel)).ok()?;
        let below = real.strip_prefix(&self.root).ok()?;
        below
            .components()
            .map(|c| match c {
                Component::Normal(name) => name.to_str().map(str::to_owned),
                _ => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_oversized_and_irregular_files_read_as_unknown() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("small"), "0x10de\n").unwrap();
        fs::write(dir.path().join("huge"), vec![b'7'; ATTRIBUTE_LIMIT + 1]).unwrap();
        fs::write(dir.path().join("page"), vec![b'7'; ATTRIBUTE_LIMIT]).unwrap();
        fs::create_dir(dir.path().join("adir")).unwrap();
        nix::unistd::mkfifo(&dir.path().join("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        let sysfs = Sysfs::open(dir.path()).unwrap();
        assert_eq!(sysfs.attribute("small").as_deref(), Some("0x10de"));
        assert_eq!(sysfs.attribute("page").map(|s| s.len()), Some(ATTRIBUTE_LIMIT));
        assert_eq!(sysfs.attribute("huge"), None);
        assert_eq!(sysfs.attribute("adir"), None);
        assert_eq!(sysfs.attribute("fifo"), None, "a FIFO is not opened, so this returns at once");
        assert_eq!(sysfs.attribute("missing"), None);
        assert!(sysfs.entries("missing").is_empty());
    }

    #[test]
    fn links_resolve_below_the_root_and_not_outside_it() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("devices/pci0000:00/0000:00:01.0")).unwrap();
        fs::create_dir_all(dir.path().join("bus")).unwrap();
        std::os::unix::fs::symlink("../devices/pci0000:00/0000:00:01.0", dir.path().join("bus/dev")).unwrap();
        std::os::unix::fs::symlink("/", dir.path().join("bus/out")).unwrap();
        std::os::unix::fs::symlink("nowhere", dir.path().join("bus/dangling")).unwrap();
        let sysfs = Sysfs::open(dir.path()).unwrap();
        assert_eq!(sysfs.resolve("bus/dev").unwrap(), ["devices", "pci0000:00", "0000:00:01.0"]);
        assert_eq!(sysfs.resolve("bus/out"), None);
        assert_eq!(sysfs.resolve("bus/dangling"), None);
        assert!(sysfs.exists("bus/dangling"));
        assert_eq!(sysfs.entries("bus"), ["dangling", "dev", "out"]);
    }

    #[test]
    fn a_missing_root_names_the_path() {
        let err = Sysfs::open(Path::new("/nonexistent/sysfs")).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/sysfs"), "{err}");
    }
}
