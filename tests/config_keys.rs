//! The configuration reference (`docs/configuration.md`) and the commented
//! example config (`systemd/frameloop.toml`) against the keys the parser
//! accepts, as `frameloop::config::keys::all_keys` reads them from the
//! config types. A key added to a config type fails these tests until it is
//! documented in both places; the failure lists each missing key and where
//! to add it.

use frameloop::config::keys::{ConfigKey, all_keys, header_of};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

const REFERENCE: &str = "docs/configuration.md";
const EXAMPLE: &str = "systemd/frameloop.toml";

fn read(relative: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// `[x]` / `[[x]]` (as written in a heading's backticks or a TOML header
/// line) as a [`ConfigKey::table`]: `x` / `x[]`.
fn table_of(header: &str) -> Option<String> {
    let header = header.trim();
    if let Some(inner) = header.strip_prefix("[[").and_then(|h| h.strip_suffix("]]")) {
        return Some(format!("{inner}[]"));
    }
    header.strip_prefix('[').and_then(|h| h.strip_suffix(']')).map(str::to_owned)
}

fn is_key_name(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The keys `docs/configuration.md` documents, by table. The page's rules:
/// a heading holding a backticked table header (`` ## `[ingest]` ``,
/// `` ## `[[chain]]` ``) starts that table's keys, a heading that says
/// "top level" starts the top-level keys, other headings (an operator's
/// subsection) keep the table; a key is a table row whose first cell is the
/// key in backticks (`` | `bind` | ... ``).
fn documented_keys(page: &str) -> BTreeMap<(String, String), usize> {
    let mut table: Option<String> = None;
    let mut keys = BTreeMap::new();
    for (n, line) in page.lines().enumerate() {
        if line.starts_with('#') {
            let ticked = line.split('`').nth(1);
            if let Some(t) = ticked.and_then(table_of) {
                table = Some(t);
            } else if line.to_ascii_lowercase().contains("top level") {
                table = Some(String::new());
            }
            continue;
        }
        let Some(cell) = line.strip_prefix("| `") else { continue };
        let Some(key) = cell.split('`').next() else { continue };
        if let (Some(t), true) = (&table, is_key_name(key)) {
            keys.entry((t.clone(), key.to_owned())).or_insert(n + 1);
        }
    }
    keys
}

fn expected() -> BTreeSet<(String, String)> {
    all_keys().into_iter().map(|k| (k.table, k.key)).collect()
}

fn describe(missing: &BTreeSet<(String, String)>) -> String {
    let ops: BTreeMap<(String, String), Vec<String>> =
        all_keys().into_iter().fold(BTreeMap::new(), |mut m, k: ConfigKey| {
            if let Some(op) = k.op {
                m.entry((k.table, k.key)).or_default().push(op);
            }
            m
        });
    missing
        .iter()
        .map(|(table, key)| {
            let op = ops
                .get(&(table.clone(), key.clone()))
                .map(|o| format!(" (op = {})", o.join(", ")))
                .unwrap_or_default();
            format!("  - `{key}`{op} under {}", header_of(table))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_configuration_reference_documents_every_key_and_no_other() {
    let documented = documented_keys(&read(REFERENCE));
    let expected = expected();
    let found: BTreeSet<_> = documented.keys().cloned().collect();
    let missing: BTreeSet<_> = expected.difference(&found).cloned().collect();
    let unknown: Vec<String> = documented
        .iter()
        .filter(|(k, _)| !expected.contains(*k))
        .map(|((table, key), line)| format!("  - `{key}` under {} (line {line})", header_of(table)))
        .collect();
    let mut report = String::new();
    if !missing.is_empty() {
        report += &format!(
            "{REFERENCE} does not document these keys; add a row `| `key` | type | default | meaning |` \
             to the table under the heading that names their table (`## `[ingest]`` ...; \
             top-level keys under the \"Top level\" heading):\n{}\n",
            describe(&missing)
        );
    }
    if !unknown.is_empty() {
        report += &format!(
            "{REFERENCE} documents keys the parser does not accept (renamed or removed? fix or delete the row):\n{}\n",
            unknown.join("\n")
        );
    }
    assert!(report.is_empty(), "{report}");
}

/// The keys `systemd/frameloop.toml` mentions, commented out or not: a line
/// `key = ...` or `# key = ...` under the last table header line (`[x]`,
/// `[[x]]`, commented or not). A header `[loop.ingest]` inside `[[loop]]`
/// mentions the `[[loop]]` key `ingest`.
fn example_keys(text: &str) -> BTreeSet<(String, String)> {
    let mut table = String::new();
    let mut keys = BTreeSet::new();
    for line in text.lines() {
        let line = line.trim_start();
        let bare = line.trim_start_matches('#').trim_start();
        let code = bare.split(" #").next().unwrap_or(bare).trim_end();
        if let Some(t) = table_of(code) {
            match t.trim_end_matches("[]").split_once('.') {
                Some(("loop", inner)) if table == "loop[]" || table.starts_with("loop[].") => {
                    keys.insert(("loop[]".to_owned(), inner.to_owned()));
                    table = format!("loop[].{inner}");
                }
                _ => table = t,
            }
            continue;
        }
        if let Some((key, _)) = code.split_once('=')
            && is_key_name(key.trim())
        {
            keys.insert((table.clone(), key.trim().to_owned()));
        }
    }
    keys
}

#[test]
fn the_example_config_mentions_every_key() {
    let mentioned = example_keys(&read(EXAMPLE));
    let missing: BTreeSet<_> = expected().difference(&mentioned).cloned().collect();
    assert!(
        missing.is_empty(),
        "{EXAMPLE} does not mention these keys; add each, with its default (or commented out as \
         `# key = value  # example` when it has none) and a comment saying what it does, under its \
         table's header (a commented `# [table]` header is fine):\n{}",
        describe(&missing)
    );
}

#[test]
fn the_checks_read_the_formats_they_describe() {
    let page = "## Top level\n| `backend` | x |\n## `[ingest]`\n| `bind` | y |\n## `[[chain]]`\n### `op = \"fir\"`\n| `taps` | z |\n";
    let keys: BTreeSet<_> = documented_keys(page).into_keys().collect();
    let want: BTreeSet<(String, String)> = [("", "backend"), ("ingest", "bind"), ("chain[]", "taps")]
        .iter()
        .map(|(t, k)| (t.to_string(), k.to_string()))
        .collect();
    assert_eq!(keys, want);
    let toml = "backend = \"auto\"\n[ingest]\n# bind = \"0.0.0.0:5000\"  # example\n# [[loop]]\n# name = \"a\"\n# [loop.ring]\n# slots = 8\n";
    let keys = example_keys(toml);
    for (t, k) in [("", "backend"), ("ingest", "bind"), ("loop[]", "name"), ("loop[]", "ring")] {
        assert!(keys.contains(&(t.to_owned(), k.to_owned())), "{t}.{k} not read from {toml}: {keys:?}");
    }
    assert!(!keys.contains(&("loop[]".to_owned(), "slots".to_owned())));
}
