//! The GPU code's modules depend one way: in `src/gpu/` and in each of its
//! folders no two modules import each other, and the resident executor's
//! parts (`src/gpu/executor/`) import only its settings, never one another
//! or the executor itself. Read from the source text: a module names
//! another by a path (`super::x`, `crate::gpu::x`, or, in a folder's
//! `mod.rs`, `x::`); comments and the unit tests at a file's end are left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn gpu_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/gpu")
}

/// A file's code without comments and without its unit tests.
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => &text[..],
    };
    text.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
}

/// Whether `text` holds `path` (which starts with an identifier) neither
/// preceded nor followed by an identifier character (`super::run` is not
/// `super::runtime`, `graph::` is not `subgraph::`).
fn names(text: &str, path: &str) -> bool {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(path).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + path.len()..].chars().next();
        !before.is_some_and(ident) && !after.is_some_and(ident)
    })
}

/// The `.rs` files of `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    files.sort();
    files
}

fn stem(path: &Path) -> String {
    path.file_stem().unwrap().to_string_lossy().into_owned()
}

/// The modules of `src/gpu/` (a file or a folder) and the siblings each names.
fn gpu_level() -> BTreeMap<String, BTreeSet<String>> {
    let dir = gpu_dir();
    let mut modules: BTreeMap<String, Vec<(PathBuf, bool)>> = BTreeMap::new();
    for file in rust_files(&dir) {
        if stem(&file) != "mod" {
            modules.entry(stem(&file)).or_default().push((file, true));
        }
    }
    for entry in std::fs::read_dir(&dir).unwrap() {
        let folder = entry.unwrap().path();
        if folder.is_dir() {
            let name = folder.file_name().unwrap().to_string_lossy().into_owned();
            for file in rust_files(&folder) {
                // A folder's mod.rs reaches src/gpu by `super::`, its other files by `super::super::`.
                let direct = stem(&file) == "mod";
                modules.entry(name.clone()).or_default().push((file, direct));
            }
        }
    }
    let names_of: Vec<String> = modules.keys().cloned().collect();
    modules
        .iter()
        .map(|(module, files)| {
            let uses = names_of
                .iter()
                .filter(|other| *other != module)
                .filter(|other| {
                    files.iter().any(|(file, direct)| {
                        let text = code(file);
                        let up = if *direct {
                            format!("super::{other}")
                        } else {
                            format!("super::super::{other}")
                        };
                        names(&text, &format!("crate::gpu::{other}")) || names(&text, &up)
                    })
                })
                .cloned()
                .collect();
            (module.clone(), uses)
        })
        .collect()
}

/// The files of the folder `src/gpu/<folder>/` and the siblings each names
/// (`mod` for the folder's `mod.rs`).
fn folder_level(folder: &str) -> BTreeMap<String, BTreeSet<String>> {
    let files = rust_files(&gpu_dir().join(folder));
    let parts: Vec<String> = files.iter().map(|f| stem(f)).filter(|s| s != "mod").collect();
    files
        .iter()
        .map(|file| {
            let me = stem(file);
            let text = code(file);
            let mut uses: BTreeSet<String> = parts
                .iter()
                .filter(|p| **p != me)
                .filter(|p| {
                    if me == "mod" {
                        names(&text, &format!("{p}::"))
                    } else {
                        names(&text, &format!("super::{p}"))
                            || names(&text, &format!("crate::gpu::{folder}::{p}"))
                    }
                })
                .cloned()
                .collect();
            // `super::X` where X is not a sibling names an item of mod.rs.
            let reaches_parent = me != "mod"
                && text.match_indices("super::").any(|(at, _)| {
                    let rest = &text[at + "super::".len()..];
                    let next: String =
                        rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                    !rest.starts_with("super::") && !parts.contains(&next)
                });
            if reaches_parent {
                uses.insert("mod".to_string());
            }
            (me, uses)
        })
        .collect()
}

fn mutual(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    for (a, uses) in graph {
        for b in uses {
            if a < b && graph.get(b).is_some_and(|u| u.contains(a)) {
                pairs.push((a.clone(), b.clone()));
            }
        }
    }
    pairs
}

#[test]
fn no_two_gpu_modules_import_each_other() {
    let graph = gpu_level();
    assert!(graph.contains_key("executor") && graph.contains_key("operators"), "{graph:?}");
    assert_eq!(mutual(&graph), [], "{graph:#?}");
}

#[test]
fn no_two_files_of_a_gpu_folder_import_each_other() {
    for folder in ["executor", "operators", "fused", "user"] {
        let graph = folder_level(folder);
        assert!(graph.len() > 1, "{folder}: {graph:?}");
        assert_eq!(mutual(&graph), [], "{folder}: {graph:#?}");
    }
}

#[test]
fn the_executors_parts_import_only_its_settings() {
    let graph = folder_level("executor");
    for part in ["graph", "run", "live_chain"] {
        let uses = &graph[part];
        assert!(uses.iter().all(|u| u == "options"), "{part} imports {uses:?}");
    }
    assert!(graph["options"].is_empty(), "{:?}", graph["options"]);
    let executor = &graph["mod"];
    for part in ["graph", "run", "live_chain", "options"] {
        assert!(executor.contains(part), "the executor owns {part}: {executor:?}");
    }
}

#[test]
fn the_check_sees_an_import_and_not_a_longer_name() {
    assert!(names("use super::run::RunControl;", "super::run"));
    assert!(!names("use super::runtime::GpuRuntime;", "super::run"));
    assert!(names("pub use graph::{chain_flags};", "graph::"));
    assert!(!names("use crate::gpu::driver::Graph;", "graph::"));
    assert!(!names("let x = subgraph::y;", "graph::"));
}
