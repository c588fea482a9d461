//! Rules of the source tree that keep the library a library: the command
//! line (clap) and the benchmark harness live in the binary's own part of
//! the tree (`src/main.rs` and `src/cli/`), never in the library that
//! embedders, tests and the Python module link.

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display())) {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The library's source files: everything under `src/` but the binary
/// (`src/main.rs`) and its command line (`src/cli/`).
fn library_files() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    let binary = [root.join("src/main.rs"), root.join("src/cli")];
    files.sort();
    files
        .into_iter()
        .filter(|f| !binary.iter().any(|b| f.starts_with(b)))
        .map(|f| {
            let text = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("read {}: {e}", f.display()));
            (f.strip_prefix(root).unwrap_or(&f).display().to_string(), text)
        })
        .collect()
}

/// Lines of library files that contain `needle`, as `path:line: text`.
fn library_lines_with(needle: &str) -> Vec<String> {
    let mut hits = Vec::new();
    for (path, text) in library_files() {
        for (n, line) in text.lines().enumerate() {
            if line.contains(needle) {
                hits.push(format!("{path}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    hits
}

#[test]
fn the_library_holds_no_command_line_parser() {
    assert!(library_files().len() > 50, "the library's files were not found");
    let hits = library_lines_with("clap");
    assert!(
        hits.is_empty(),
        "clap belongs to the command line (src/main.rs, src/cli/); the library takes plain option \
         structs and enums. Move these:\n{}",
        hits.join("\n")
    );
}

#[test]
fn the_library_holds_no_benchmark_harness() {
    let mut hits = Vec::new();
    for needle in ["fn run_compare", "CompareOptions", "CompareReport", "pub mod bench", "pub mod floors"] {
        hits.extend(library_lines_with(needle));
    }
    assert!(
        hits.is_empty(),
        "the `bench --compare` harness and its floors belong to the binary (src/cli/bench/); \
         the library keeps only what tests publish frames with. Move these:\n{}",
        hits.join("\n")
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for gone in ["src/gpu/bench.rs", "src/gpu/floors.rs"] {
        assert!(
            !root.join(gone).exists(),
            "{gone} is benchmark code in the library; it lives under src/cli/bench/"
        );
    }
}
