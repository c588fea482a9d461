//! House rules that keep the library readable, checked on the source text:
//! no two top-level modules of the library import each other (dependencies
//! point one way: `wire` at the bottom, the config sections and
//! `config_problem` below the `config` that aggregates them, `app` on top),
//! every public error enum is `#[non_exhaustive]`, no library function
//! returns `Result<_, String>`, and the docs stay short enough to read (no
//! page of `docs/` over 650 lines, the README at most 150).
//!
//! The scanners read text, not the compiler's resolution: a module counts as
//! using another when its files name `crate::other` anywhere (a `use`, a
//! path in code, or an intra-doc link, since a link to a higher module is
//! knowledge of it too) or list `other` in a `use crate::{...}` group.
//! `super::` paths stay inside a module and are not counted.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The library's top-level modules (those `src/lib.rs` declares), each with
/// its files: `src/x.rs` or every `.rs` file under `src/x/`.
fn library_modules(src: &Path) -> BTreeMap<String, Vec<PathBuf>> {
    let lib = fs::read_to_string(src.join("lib.rs")).expect("src/lib.rs");
    let mut modules = BTreeMap::new();
    for line in lib.lines() {
        // `mod x;`, `pub mod x;`, `#[doc(hidden)] pub(crate) mod x;`.
        let line = line.trim();
        let Some(rest) = line.strip_suffix(';') else { continue };
        let words: Vec<&str> = rest.split_whitespace().collect();
        let [.., "mod", name] = words[..] else { continue };
        if line.starts_with("//") {
            continue;
        }
        let file = src.join(format!("{name}.rs"));
        let dir = src.join(name);
        let mut files = Vec::new();
        if file.is_file() {
            files.push(file.clone());
        }
        if dir.is_dir() {
            rust_files(&dir, &mut files);
        }
        assert!(
            !files.is_empty(),
            "src/lib.rs declares `mod {name}` but neither {file:?} nor {dir:?} exists"
        );
        files.sort();
        modules.insert(name.to_owned(), files);
    }
    modules
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("readable source folder") {
        let path = entry.expect("a folder entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The leading identifier of `s`.
fn ident(s: &str) -> &str {
    let end = s.find(|c: char| !is_ident(c)).unwrap_or(s.len());
    &s[..end]
}

/// The top-level modules `text` names through `crate::`: `crate::x::...`,
/// `use crate::x;`, and each item of a `use crate::{x::..., y, z::{...}}`
/// group.
fn crate_paths(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut from = 0;
    while let Some(at) = text[from..].find("crate::") {
        let start = from + at;
        from = start + "crate::".len();
        if text[..start].chars().next_back().is_some_and(is_ident) {
            continue; // `my_crate::`, not this crate
        }
        let rest = &text[from..];
        if let Some(group) = rest.strip_prefix('{') {
            // Items at depth 1 of the group, separated by commas.
            let mut depth = 0usize;
            let mut item_start = 0;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        found.insert(ident(group[item_start..i].trim_start()).to_owned());
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        found.insert(ident(group[item_start..i].trim_start()).to_owned());
                        item_start = i + 1;
                    }
                    _ => {}
                }
            }
        } else {
            found.insert(ident(rest).to_owned());
        }
    }
    found.remove("");
    found
}

/// Every pair of top-level modules that import each other, each with the
/// files on either side that name the other.
fn mutual_imports(src: &Path) -> Vec<String> {
    let modules = library_modules(src);
    // (user, used) -> files of `user` that name `used`.
    let mut uses: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for (name, files) in &modules {
        for file in files {
            let text = fs::read_to_string(file).expect("readable source file");
            for used in crate_paths(&text) {
                if &used != name && modules.contains_key(&used) {
                    let shown = file.strip_prefix(src.parent().unwrap_or(src)).unwrap_or(file);
                    uses.entry((name.clone(), used)).or_default().insert(shown.display().to_string());
                }
            }
        }
    }
    let mut pairs = Vec::new();
    for ((a, b), files) in &uses {
        if a < b
            && let Some(back) = uses.get(&(b.clone(), a.clone()))
        {
            pairs.push(format!("{a} <-> {b}: {a} uses {b} in {files:?}; {b} uses {a} in {back:?}"));
        }
    }
    pairs
}

#[test]
fn no_two_top_level_modules_import_each_other() {
    let src = root().join("src");
    let modules = library_modules(&src);
    assert!(modules.len() > 5 && modules.contains_key("config"), "found only {modules:?} in src/lib.rs");
    let pairs = mutual_imports(&src);
    assert!(
        pairs.is_empty(),
        "top-level modules that import each other (dependencies must point one way: move the shared \
         type or constant into the lower module or a module below both):\n{}",
        pairs.join("\n")
    );
}

/// The scanner finds a cycle when there is one: two modules of a scratch
/// crate that name each other through a path and through a `use` group.
#[test]
fn the_layering_check_finds_a_cycle() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    fs::create_dir_all(src.join("low")).unwrap();
    fs::write(src.join("lib.rs"), "pub mod low;\n#[doc(hidden)] mod high;\npub(crate) mod side;\n").unwrap();
    fs::write(src.join("low/mod.rs"), "//! Low.\nmod inner;\n").unwrap();
    fs::write(src.join("low/inner.rs"), "use crate::{side::X, high::{self, Y}};\n").unwrap();
    fs::write(src.join("high.rs"), "pub fn f() -> crate::low::T { todo!() }\nuse my_crate::side;\n").unwrap();
    fs::write(src.join("side.rs"), "use super::low::T;\n").unwrap();
    let pairs = mutual_imports(&src);
    assert_eq!(pairs.len(), 1, "{pairs:?}");
    assert!(pairs[0].starts_with("high <-> low"), "{pairs:?}");
    assert!(pairs[0].contains("low/inner.rs") && pairs[0].contains("high.rs"), "{pairs:?}");
    assert_eq!(
        crate_paths("use crate::{a::B, c, d::{e, f::G}};\nlet x = crate::h::i; $crate::j::k; my_crate::l"),
        ["a", "c", "d", "h", "j"].into_iter().map(String::from).collect()
    );
}

/// Every `pub enum ...Error` of the library, with whether the attributes
/// and doc lines directly above it hold `#[non_exhaustive]`.
fn error_enums(src: &Path) -> Vec<(String, bool)> {
    let mut found = Vec::new();
    for files in library_modules(src).values() {
        for file in files {
            let text = fs::read_to_string(file).expect("readable source file");
            let lines: Vec<&str> = text.lines().collect();
            for (i, line) in lines.iter().enumerate() {
                let Some(rest) = line.trim_start().strip_prefix("pub enum ") else { continue };
                let name = ident(rest);
                if !name.ends_with("Error") {
                    continue;
                }
                let above = lines[..i]
                    .iter()
                    .rev()
                    .map(|l| l.trim())
                    .take_while(|l| l.starts_with("#[") || l.starts_with("//") || l.starts_with(")]"));
                let marked = above.into_iter().any(|l| l == "#[non_exhaustive]");
                found.push((format!("{}:{} {name}", file.display(), i + 1), marked));
            }
        }
    }
    found
}

#[test]
fn every_public_error_enum_is_non_exhaustive() {
    let enums = error_enums(&root().join("src"));
    assert!(enums.len() > 20, "found only {enums:?}");
    let unmarked: Vec<&String> = enums.iter().filter(|(_, marked)| !marked).map(|(at, _)| at).collect();
    assert!(
        unmarked.is_empty(),
        "public error enums without #[non_exhaustive] (add it above the enum, so that a new variant \
         is not a breaking change):\n{unmarked:#?}"
    );
}

/// The second type argument of each `Result<..>` in `line`.
fn result_error_types(line: &str) -> Vec<String> {
    let mut errors = Vec::new();
    let mut from = 0;
    while let Some(at) = line[from..].find("Result<") {
        let start = from + at + "Result<".len();
        from = start;
        let (mut depth, mut comma) = (0usize, None);
        let bytes = line.as_bytes();
        let mut i = start;
        while i < bytes.len() {
            match bytes[i] {
                b'-' if bytes.get(i + 1) == Some(&b'>') => i += 1,
                b'<' | b'(' | b'[' => depth += 1,
                b'>' | b')' | b']' if depth > 0 => depth -= 1,
                b'>' => {
                    if let Some(c) = comma {
                        errors.push(line[c + 1..i].trim().to_owned());
                    }
                    break;
                }
                b',' if depth == 0 => comma = Some(i),
                _ => {}
            }
            i += 1;
        }
    }
    errors
}

#[test]
fn no_library_function_returns_a_string_error() {
    let mut found = Vec::new();
    for files in library_modules(&root().join("src")).values() {
        for file in files {
            let text = fs::read_to_string(file).expect("readable source file");
            for (i, line) in text.lines().enumerate() {
                if line.trim_start().starts_with("//") {
                    continue;
                }
                if result_error_types(line).iter().any(|e| e == "String" || e.ends_with("::String")) {
                    found.push(format!("{}:{}: {}", file.display(), i + 1, line.trim()));
                }
            }
        }
    }
    assert_eq!(result_error_types("fn f() -> Result<Vec<u8>, String> {"), ["String"]);
    assert_eq!(
        result_error_types("Result<Box<dyn Fn() -> u8>, std::string::String>"),
        ["std::string::String"]
    );
    assert!(
        found.is_empty(),
        "library functions returning Result<_, String> (return a thiserror enum of the module that \
         keeps the source and says how to fix the problem):\n{}",
        found.join("\n")
    );
}

#[test]
fn docs_stay_short_enough_to_read() {
    let root = root();
    let mut long = Vec::new();
    let mut pages = 0;
    for entry in fs::read_dir(root.join("docs")).expect("docs/") {
        let path = entry.expect("a docs entry").path();
        if path.extension().is_some_and(|e| e == "md") {
            pages += 1;
            let lines = fs::read_to_string(&path).expect("readable page").lines().count();
            if lines > 650 {
                long.push(format!("{}: {lines} lines (at most 650)", path.display()));
            }
        }
    }
    assert!(pages > 5, "found only {pages} pages under docs/");
    let readme = fs::read_to_string(root.join("README.md")).expect("README.md").lines().count();
    if readme > 150 {
        long.push(format!("README.md: {readme} lines (at most 150)"));
    }
    assert!(
        long.is_empty(),
        "pages too long to read (split a self-contained part onto the page it belongs to, or \
         tighten):\n{}",
        long.join("\n")
    );
}
