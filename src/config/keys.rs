//! Every key the config file accepts, read from the config types themselves
//! (their serde field lists), so that the configuration reference
//! (`docs/configuration.md`) and the commented example config
//! (`systemd/frameloop.toml`) can be checked against the parser by tests.
//!
//! The field names come from serde: each section type is asked to
//! deserialize a table holding one key no type has, and its
//! `deny_unknown_fields` refusal carries the list of fields it expected (a
//! type that flattens another into itself refuses without the list, so its
//! keys are read from its default value serialized instead). The chain's
//! operators are read the same way from the `op` tag's variants. What this
//! module lists by hand is only which type parses which table: the same
//! wiring `config::parse` does, checked against the parser's own list of
//! top-level keys by the tests below.

use super::{LoopConfig, RingConfig, SECTIONS, loops};
use serde::de::{self, DeserializeOwned, IntoDeserializer, MapAccess, Visitor};
use std::collections::BTreeSet;
use std::fmt;

/// One key of the config file.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConfigKey {
    /// The table the key sits in, as written in the file's header without
    /// brackets: `""` for the top level, `"ingest"`, `"sink.nats"`; an array
    /// of tables ends in `[]` (`"chain[]"` for `[[chain]]`, `"loop[]"` for
    /// `[[loop]]`).
    pub table: String,
    /// The key's name within its table.
    pub key: String,
    /// For a `[[chain]]` key that belongs to one operator, that operator's
    /// `op` value (`"fir"` for `taps`); `None` for every other key.
    pub op: Option<String>,
}

impl ConfigKey {
    /// The key's dotted path: `ingest.bind`, `chain[].taps`, `backend`.
    pub fn path(&self) -> String {
        if self.table.is_empty() { self.key.clone() } else { format!("{}.{}", self.table, self.key) }
    }

    /// The table header a config file writes the key under: `[ingest]`,
    /// `[[chain]]`, or `(top level)`.
    pub fn header(&self) -> String {
        header_of(&self.table)
    }
}

/// The header a file writes for `table` (as in [`ConfigKey::table`]).
pub fn header_of(table: &str) -> String {
    match table.strip_suffix("[]") {
        _ if table.is_empty() => "(top level)".to_owned(),
        Some(array) => format!("[[{array}]]"),
        None => format!("[{table}]"),
    }
}

impl fmt::Display for ConfigKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.op {
            Some(op) => write!(f, "{} (op = \"{op}\")", self.path()),
            None => f.write_str(&self.path()),
        }
    }
}

/// Every key the config file accepts, sorted by table then key: the keys of
/// each section type, the `[[chain]]` operators' keys (each with its `op`),
/// and the `[[loop]]` keys (its own and the resident-loop keys of `[loop]`).
/// A table is listed through its keys, not as a key of its parent, except
/// `ingest`, `ring` and `chain` inside `[[loop]]`, which take the keys of
/// the top-level tables of the same names.
pub fn all_keys() -> Vec<ConfigKey> {
    let mut keys = BTreeSet::new();
    let mut add = |table: &str, key: &str, op: Option<&str>| {
        keys.insert(ConfigKey { table: table.to_owned(), key: key.to_owned(), op: op.map(str::to_owned) });
    };
    for top in SECTIONS {
        if !is_wired(top) && !ARRAY_OR_TABLE.contains(top) {
            add("", top, None);
        }
    }
    for (table, fields) in SECTION_TABLES {
        for field in fields() {
            if !is_wired(&format!("{}.{field}", table.trim_end_matches("[]"))) {
                add(table, &field, None);
            }
        }
    }
    let (tag, ops) = chain_keys();
    add("chain[]", &tag, None);
    for (op, fields) in ops {
        for field in fields {
            add("chain[]", &field, Some(&op));
        }
    }
    for key in loops::OWN_KEYS.iter().map(|k| k.to_string()).chain(field_names::<LoopConfig>()) {
        add("loop[]", &key, None);
    }
    keys.into_iter().collect()
}

/// The keys of `table` (as in [`ConfigKey::table`]: `"ingest"`), for the
/// message about an unknown key of a table whose type does not list them.
pub fn keys_of_table(table: &str) -> Vec<String> {
    all_keys().into_iter().filter(|k| k.table == table).map(|k| k.key).collect()
}

/// Top-level keys that are not one table of one type: `chain` (an array of
/// tables, the operators) and `loop` (`[loop]` or `[[loop]]`).
const ARRAY_OR_TABLE: &[&str] = &["chain", "loop"];

type Fields = fn() -> Vec<String>;

/// Which type parses which table: what `config::parse` and the sections'
/// own parsers do, one entry per table (`sink.nats` is the `nats` field of
/// `[sink]`; an array of tables is named with `[]`, `"actuate[]"` for
/// `[[actuate]]`). A table named here is not listed as a key of its parent.
/// A new table of the config needs its line here.
const SECTION_TABLES: &[(&str, Fields)] = &[
    ("ring", field_names::<RingConfig>),
    ("loop", field_names::<LoopConfig>),
    ("ingest", flattened_field_names::<crate::ingest::UdpConfig>),
    ("metrics", field_names::<crate::metrics::MetricsConfig>),
    ("service", field_names::<crate::service::ServiceConfig>),
    ("rdma", field_names::<crate::rdma::RdmaConfig>),
    ("rtp", field_names::<crate::rtp::RtpConfig>),
    ("handler", field_names::<crate::ops::handler::HandlerConfig>),
    ("output", field_names::<crate::output::OutputConfig>),
    ("sink", field_names::<crate::sink::SinkConfig>),
    ("sink.nats", field_names::<crate::sink::nats::NatsSinkConfig>),
    ("actuate[]", field_names::<crate::actuate::ActuateConfig>),
];

/// Whether `table` (a dotted path, without `[]`) has an entry in [`SECTION_TABLES`].
fn is_wired(table: &str) -> bool {
    SECTION_TABLES.iter().any(|(t, _)| t.trim_end_matches("[]") == table)
}

/// The key no config type has, offered to make a type list its fields.
const PROBE: &str = "\u{1}frameloop-key-probe";

/// The fields `T` accepts: every section type derives `Deserialize` with
/// `deny_unknown_fields`, whose refusal of an unknown key lists them.
fn field_names<T: DeserializeOwned>() -> Vec<String> {
    match refusal::<T>(&[(PROBE, Probe::Number)]) {
        Refusal::UnknownField(expected) => expected.iter().map(|s| s.to_string()).collect(),
        _ => Vec::new(),
    }
}

/// The fields of `T`, a type that flattens another into itself: serde then
/// refuses an unknown key without the list, so the keys are read from the
/// default value serialized (such a type has no optional field a default
/// would leave out), together with whatever the refusal gives.
fn flattened_field_names<T: DeserializeOwned + serde::Serialize + Default>() -> Vec<String> {
    let mut names: BTreeSet<String> = field_names::<T>().into_iter().collect();
    if let Ok(toml::Value::Table(table)) = toml::Value::try_from(T::default()) {
        names.extend(table.keys().cloned());
    }
    names.into_iter().collect()
}

/// The chain's tag key (`op`) and each operator's name with its keys.
fn chain_keys() -> (String, Vec<(String, Vec<String>)>) {
    use crate::ops::OpSpec;
    let tag = match refusal::<OpSpec>(&[]) {
        Refusal::MissingField(tag) => tag.to_owned(),
        other => panic!("OpSpec is no longer an internally tagged enum ({other:?}); update config::keys"),
    };
    let Refusal::UnknownVariant(variants) = refusal::<OpSpec>(&[(&tag, Probe::Text(PROBE))]) else {
        panic!("OpSpec's tag `{tag}` no longer names its operators; update config::keys");
    };
    let ops = variants
        .iter()
        .map(|op| {
            let fields = match refusal::<OpSpec>(&[(&tag, Probe::Text(op)), (PROBE, Probe::Number)]) {
                Refusal::UnknownField(expected) => expected.iter().map(|s| s.to_string()).collect(),
                _ => Vec::new(),
            };
            (op.to_string(), fields)
        })
        .collect();
    (tag, ops)
}

/// A value in a probe table.
#[derive(Clone, Copy)]
enum Probe<'a> {
    Number,
    Text(&'a str),
}

/// How a type answered a probe table.
#[derive(Debug)]
enum Refusal {
    /// `deny_unknown_fields`, with the fields expected.
    UnknownField(&'static [&'static str]),
    /// An enum tag's unknown value, with the variants expected.
    UnknownVariant(&'static [&'static str]),
    /// A required field (or an enum's tag) was missing.
    MissingField(&'static str),
    /// Anything else (including acceptance).
    Other,
}

fn refusal<T: DeserializeOwned>(entries: &[(&str, Probe<'_>)]) -> Refusal {
    match T::deserialize(ProbeTable(entries)) {
        Ok(_) => Refusal::Other,
        Err(ProbeError(refusal)) => refusal,
    }
}

/// The error a probe collects: the refusal that carries the names.
#[derive(Debug)]
struct ProbeError(Refusal);

impl fmt::Display for ProbeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

impl std::error::Error for ProbeError {}

impl de::Error for ProbeError {
    fn custom<M: fmt::Display>(_: M) -> Self {
        ProbeError(Refusal::Other)
    }
    fn unknown_field(_: &str, expected: &'static [&'static str]) -> Self {
        ProbeError(Refusal::UnknownField(expected))
    }
    fn unknown_variant(_: &str, expected: &'static [&'static str]) -> Self {
        ProbeError(Refusal::UnknownVariant(expected))
    }
    fn missing_field(field: &'static str) -> Self {
        ProbeError(Refusal::MissingField(field))
    }
}

/// A table of probe entries, offered to whatever the type asks for.
struct ProbeTable<'a>(&'a [(&'a str, Probe<'a>)]);

impl<'de> de::Deserializer<'de> for ProbeTable<'_> {
    type Error = ProbeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ProbeError> {
        visitor.visit_map(ProbeEntries { entries: self.0.iter(), value: None })
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option
        unit unit_struct newtype_struct seq tuple tuple_struct map struct enum identifier ignored_any
    }
}

struct ProbeEntries<'a, I> {
    entries: I,
    value: Option<Probe<'a>>,
}

impl<'de, 'a, I: Iterator<Item = &'a (&'a str, Probe<'a>)>> MapAccess<'de> for ProbeEntries<'a, I> {
    type Error = ProbeError;

    fn next_key_seed<K: de::DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, ProbeError> {
        let Some((key, value)) = self.entries.next() else { return Ok(None) };
        self.value = Some(*value);
        seed.deserialize(key.into_deserializer()).map(Some)
    }

    fn next_value_seed<V: de::DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, ProbeError> {
        match self.value.take() {
            Some(Probe::Text(text)) => seed.deserialize(text.into_deserializer()),
            Some(Probe::Number) | None => seed.deserialize(0u64.into_deserializer()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn paths() -> BTreeSet<String> {
        all_keys().iter().map(ConfigKey::path).collect()
    }

    #[test]
    fn the_config_type_and_the_parsers_top_level_list_agree() {
        let Refusal::UnknownField(fields) = refusal::<Config>(&[(PROBE, Probe::Number)]) else {
            panic!("Config no longer refuses unknown keys with their list");
        };
        let from_type: BTreeSet<&str> = fields.iter().copied().collect();
        let from_parser: BTreeSet<&str> = SECTIONS.iter().copied().collect();
        assert_eq!(
            from_type, from_parser,
            "config::SECTIONS (the parser's top-level keys) and Config's fields differ"
        );
    }

    #[test]
    fn every_table_of_the_parser_is_wired_to_its_type() {
        for top in SECTIONS {
            let wired = is_wired(top) || ARRAY_OR_TABLE.contains(top);
            // Only `backend` is a plain value at the top level.
            assert!(
                wired || *top == "backend",
                "top-level table `{top}` has no entry in config::keys::SECTION_TABLES"
            );
        }
        for (table, fields) in SECTION_TABLES {
            assert!(!fields().is_empty(), "no keys read for [{table}]");
            if let Some((parent, field)) = table.trim_end_matches("[]").rsplit_once('.') {
                let parent_fields = SECTION_TABLES
                    .iter()
                    .find(|(t, _)| t.trim_end_matches("[]") == parent)
                    .expect("parent wired")
                    .1();
                assert!(parent_fields.iter().any(|f| f == field), "[{table}] is not a field of [{parent}]");
            }
        }
    }

    #[test]
    fn keys_include_flattened_nested_and_operator_keys() {
        let p = paths();
        for want in [
            "backend",
            "ingest.bind",
            // Flattened into [ingest] from the reassembly settings.
            "ingest.frame_timeout_ms",
            "ingest.restart_window",
            "loop.poll_budget_us",
            "sink.nats.url",
            "chain[].op",
            "chain[].taps",
            "chain[].entry",
            "loop[].name",
            "loop[].poll_budget_us",
            "loop[].ingest",
        ] {
            assert!(p.contains(want), "{want} missing from all_keys(): {p:?}");
        }
        for not_a_key in ["ingest", "sink", "sink.nats", "chain", "loop", "ingest.reassembly", "loop.loops"] {
            assert!(!p.contains(not_a_key), "{not_a_key} is a table, not a key");
        }
        let taps = all_keys().into_iter().find(|k| k.key == "taps").expect("taps");
        assert_eq!(taps.op.as_deref(), Some("fir"));
        assert_eq!(taps.header(), "[[chain]]");
    }

    #[test]
    fn every_listed_key_is_accepted_by_the_parser() {
        // A key the parser does not know is reported as unknown; every key
        // listed must not be (its value may still be refused).
        for bogus in [
            "no_such_key = 0\n",
            "[ingest]\nno_such_key = 0\n",
            "[sink.nats]\nno_such_key = 0\n",
            "[[chain]]\nop = \"fir\"\nno_such_key = 0\n",
            "[[loop]]\nno_such_key = 0\n",
        ] {
            let rendered = crate::config::parse(bogus).expect_err(bogus).to_string();
            assert!(
                rendered.contains("unknown field") || rendered.contains("unknown key"),
                "{bogus}: {rendered}"
            );
        }
        for key in all_keys() {
            let text = match (key.table.as_str(), &key.op) {
                ("", _) => format!("{} = 0\n", key.key),
                ("chain[]", Some(op)) if key.key != "op" => {
                    format!("[[chain]]\nop = \"{op}\"\n{} = 0\n", key.key)
                }
                ("chain[]", _) => format!("[[chain]]\n{} = 0\n", key.key),
                ("loop[]", _) => format!("[[loop]]\n{} = 0\n", key.key),
                (table, _) => format!("[{table}]\n{} = 0\n", key.key),
            };
            if let Err(e) = crate::config::parse(&text) {
                let rendered = e.to_string();
                assert!(
                    !rendered.contains("unknown field") && !rendered.contains("unknown key"),
                    "{key} is listed but the parser refuses it as unknown:\n{text}\n{rendered}"
                );
            }
        }
    }
}
