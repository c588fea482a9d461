//! One problem in a config file, the range check and the per-table
//! deserialisation that produce such problems: the vocabulary every config
//! section (`ingest`, `output`, `sink`, ...) and the aggregate `config`
//! share. It sits below all of them and knows nothing of the sections or of
//! the aggregate `Config`, so a section can report its problems without
//! importing the module that aggregates it.

use std::fmt;

/// One problem found in a config, naming the key (`section.key`) and the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblem {
    /// The key (`section.key`, `chain[2].kernel`, ...).
    pub key: String,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl ConfigProblem {
    /// A problem of `key`.
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self { key: key.into(), message: message.into() }
    }
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

/// Checks that `value` lies in `[lo, hi]`, recording a problem for `key` otherwise.
pub fn check_range<T: PartialOrd + fmt::Display + Copy>(
    problems: &mut Vec<ConfigProblem>,
    key: &str,
    value: T,
    lo: T,
    hi: T,
) {
    if value < lo || value > hi {
        problems
            .push(ConfigProblem::new(key, format!("{value} is out of range; use a value from {lo} to {hi}")));
    }
}

/// Turns one serde message into the key it concerns and a readable message;
/// `listed_keys` names a table's keys where serde's refusal does not.
fn classify(prefix: &str, message: &str, listed_keys: ListedKeys) -> (Option<String>, ConfigProblem) {
    let message = message.trim();
    let join = |k: &str| if prefix.is_empty() { k.to_string() } else { format!("{prefix}.{k}") };
    if let Some(rest) = message.strip_prefix("unknown field `") {
        let field = rest.split('`').next().unwrap_or_default().to_string();
        let expected = rest.split_once(", expected ").map(|(_, e)| e).unwrap_or("");
        let expected = expected.strip_prefix("one of ").unwrap_or(expected);
        // A table that flattens another ([ingest]) is refused without the
        // list: name its keys from the config types instead.
        let listed;
        let expected = if expected.is_empty() {
            listed = listed_keys(prefix).iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ");
            listed.as_str()
        } else {
            expected
        };
        let msg = format!("unknown key; remove it or use one of {expected}");
        return (Some(field.clone()), ConfigProblem::new(join(&field), msg));
    }
    if let Some((what, key)) = message.rsplit_once("\nin `") {
        let key = key.trim_end_matches('`').to_string();
        let first = key.split('.').next().unwrap_or(&key).to_string();
        return (Some(first), ConfigProblem::new(join(&key), what.to_string()));
    }
    (None, ConfigProblem::new(if prefix.is_empty() { "(file)" } else { prefix }, message.to_string()))
}

/// The keys of the table named by a prefix (`"ingest"`), for the message
/// about an unknown key where serde's refusal lists none (a type that
/// flattens another into itself refuses that way).
pub type ListedKeys = fn(&str) -> Vec<String>;

/// A [`ListedKeys`] that knows no table: an unknown key of a type that
/// flattens another is then refused without the list of keys.
pub fn no_listed_keys(_prefix: &str) -> Vec<String> {
    Vec::new()
}

/// Deserialises one table, collecting every unknown key and bad value: each
/// offending key is reported, removed and the rest tried again, so one bad
/// key never hides the next. `listed_keys` names the table's keys when serde
/// does not (`config::section` passes the config's own key list).
pub fn deserialize_table<T: serde::de::DeserializeOwned + Default>(
    prefix: &str,
    value: Option<&toml::Value>,
    problems: &mut Vec<ConfigProblem>,
    listed_keys: ListedKeys,
) -> T {
    let Some(value) = value else { return T::default() };
    let mut value = value.clone();
    for _ in 0..64 {
        match value.clone().try_into::<T>() {
            Ok(t) => return t,
            Err(e) => {
                let (key, problem) = classify(prefix, &e.to_string(), listed_keys);
                problems.push(problem);
                // The tag of a tagged table (a chain entry's `op`) decides
                // every other key: without it there is nothing left to check.
                if key.as_deref() == Some("op") {
                    return T::default();
                }
                let removed = match (key, value.as_table_mut()) {
                    (Some(k), Some(t)) => t.remove(&k).is_some(),
                    _ => false,
                };
                if !removed {
                    return T::default();
                }
            }
        }
    }
    T::default()
}
