//! Bounded reads of small text files (configs, SDP descriptions): only
//! regular files of at most a limit are read, so a path naming a device,
//! FIFO, directory or huge file fails at once instead of reading forever.

use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Largest config or SDP file read, in bytes.
pub const SMALL_FILE_LIMIT: u64 = 1 << 20;

/// Reads `path` as UTF-8 text if it is a regular file of at most `limit`
/// bytes. Errors name the path and say what to give instead; at most
/// `limit + 1` bytes are read even if the file grows while it is read.
pub fn read_text(path: &Path, limit: u64) -> io::Result<String> {
    let not_regular = |kind: &str| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is {kind}, not a regular file; give the path of a text file", path.display()),
        )
    };
    let too_large = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} is larger than the {limit}-byte limit; give the path of the right (small) text file",
                path.display()
            ),
        )
    };
    // stat first: opening a FIFO for reading would block until a writer came.
    check_regular(&std::fs::metadata(path)?, not_regular)?;
    // O_NONBLOCK: if the path was swapped for a FIFO since, open still returns.
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)?;
    let meta = file.metadata()?;
    check_regular(&meta, not_regular)?;
    if meta.len() > limit {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(too_large());
    }
    String::from_utf8(bytes).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} is not UTF-8 text (byte {}); give the path of a text file",
                path.display(),
                e.utf8_error().valid_up_to()
            ),
        )
    })
}

fn check_regular(meta: &std::fs::Metadata, not_regular: impl Fn(&str) -> io::Error) -> io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    let kind = if t.is_file() {
        return Ok(());
    } else if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "a special file"
    };
    Err(not_regular(kind))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err_of(path: &Path) -> String {
        read_text(path, SMALL_FILE_LIMIT).expect_err("refused").to_string()
    }

    #[test]
    fn reads_a_small_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.toml");
        std::fs::write(&p, "backend = \"host\"\n").unwrap();
        assert_eq!(read_text(&p, SMALL_FILE_LIMIT).unwrap(), "backend = \"host\"\n");
    }

    #[test]
    fn refuses_dev_zero_at_once() {
        let e = err_of(Path::new("/dev/zero"));
        assert!(e.contains("/dev/zero") && e.contains("a device"), "{e}");
    }

    #[test]
    fn refuses_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        let e = err_of(dir.path());
        assert!(e.contains(&dir.path().display().to_string()) && e.contains("a directory"), "{e}");
    }

    #[test]
    fn refuses_a_file_over_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("big.toml");
        std::fs::write(&p, vec![b'#'; 2 << 20]).unwrap();
        let e = err_of(&p);
        assert!(e.contains("big.toml") && e.contains("1048576-byte limit"), "{e}");
        // Exactly at the limit is accepted.
        std::fs::write(&p, vec![b'#'; 64]).unwrap();
        assert_eq!(read_text(&p, 64).unwrap().len(), 64);
        assert!(read_text(&p, 63).is_err());
    }

    #[test]
    fn refuses_a_fifo_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("fifo");
        nix::unistd::mkfifo(&p, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let e = err_of(&p);
        assert!(e.contains("a FIFO"), "{e}");
    }

    #[test]
    fn a_missing_file_keeps_its_io_error_kind() {
        let e = read_text(Path::new("/no/such/file.toml"), SMALL_FILE_LIMIT).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }
}
