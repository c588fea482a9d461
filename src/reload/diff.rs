//! What a config reload changes: every changed key, classified as an
//! operator parameter, a change of the chain's shape, or one that needs a
//! restart. Pure: it compares two parsed configs and reads nothing.
//!
//! Keys are named as in the file: `chain[3].level`, `chain[1].taps`,
//! `chain[2].params.gain`, `ring.slots`, `ingest.bind`. Every key outside
//! `[[chain]]` needs a restart (rings, sockets, backend, ingest, loop timing,
//! sinks, metrics); inside it, values that keep the chain's buffers and
//! kernels are parameters and the rest is shape.

use crate::config::Config;
use crate::ops::OpSpec;
use serde_json::Value;

/// How a changed key can be applied to a running appliance (ordered from
/// the cheapest to the most disruptive).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ChangeClass {
    /// An operator parameter (threshold level, FIR tap values of the same
    /// count, gain, filter values, user-kernel params): the next frame runs
    /// with the new value.
    Parameter,
    /// The chain's shape (an operator added, removed or reordered, a tap
    /// count, an FFT size, a sample format): the chain is rebuilt between
    /// frames.
    Shape,
    /// Rings, sockets, backend, ingest and every other section: only a
    /// restart applies it.
    Restart,
}

impl ChangeClass {
    /// Word used in logs.
    pub fn name(self) -> &'static str {
        match self {
            ChangeClass::Parameter => "parameter",
            ChangeClass::Shape => "chain shape",
            ChangeClass::Restart => "needs a restart",
        }
    }
}

/// One changed key, with its old and new values as written in JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangedKey {
    pub key: String,
    pub class: ChangeClass,
    pub from: String,
    pub to: String,
}

impl std::fmt::Display for ChangedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} -> {} ({})", self.key, self.from, self.to, self.class.name())
    }
}

/// Every key that differs between two configs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConfigChange {
    pub keys: Vec<ChangedKey>,
}

impl ConfigChange {
    /// The most disruptive class among the changed keys; `None` when nothing changed.
    pub fn class(&self) -> Option<ChangeClass> {
        self.keys.iter().map(|k| k.class).max()
    }

    /// The changed keys of one class.
    pub fn of(&self, class: ChangeClass) -> impl Iterator<Item = &ChangedKey> {
        self.keys.iter().filter(move |k| k.class == class)
    }

    /// One line naming every changed key, for the log.
    pub fn summary(&self) -> String {
        if self.keys.is_empty() {
            return "nothing changed".into();
        }
        self.keys.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
    }
}

/// Classifies every difference between the running config `old` and `new`.
pub fn classify(old: &Config, new: &Config) -> ConfigChange {
    let mut keys = Vec::new();
    let (mut old_rest, mut new_rest) = (to_value(old), to_value(new));
    for rest in [&mut old_rest, &mut new_rest] {
        if let Value::Object(map) = rest {
            map.remove("chain");
        }
    }
    let mut restart = Vec::new();
    leaf_diff("", &old_rest, &new_rest, &mut restart);
    keys.extend(restart.into_iter().map(|(key, from, to)| ChangedKey {
        key,
        class: ChangeClass::Restart,
        from,
        to,
    }));
    chain_diff(&old.chain, &new.chain, &mut keys);
    ConfigChange { keys }
}

fn to_value<T: serde::Serialize>(v: &T) -> Value {
    // Every config type serialises (plain data; NaN becomes null).
    serde_json::to_value(v).unwrap_or(Value::Null)
}

fn chain_names(chain: &[OpSpec]) -> String {
    chain.iter().map(OpSpec::name).collect::<Vec<_>>().join(" -> ")
}

fn chain_diff(old: &[OpSpec], new: &[OpSpec], keys: &mut Vec<ChangedKey>) {
    let same_ops = old.len() == new.len() && old.iter().zip(new).all(|(a, b)| a.name() == b.name());
    if !same_ops {
        keys.push(ChangedKey {
            key: "chain".into(),
            class: ChangeClass::Shape,
            from: chain_names(old),
            to: chain_names(new),
        });
        return;
    }
    for (index, (a, b)) in old.iter().zip(new).enumerate() {
        let prefix = format!("chain[{index}]");
        let mut changed = Vec::new();
        leaf_diff(&prefix, &to_value(a), &to_value(b), &mut changed);
        for (key, from, to) in changed {
            let field = key[prefix.len()..].trim_start_matches('.');
            let class = op_key_class(a, b, field);
            keys.push(ChangedKey { key, class, from, to });
        }
    }
}

/// The class of a changed `field` (its path below the operator) of an
/// operator that kept its kind.
fn op_key_class(old: &OpSpec, new: &OpSpec, field: &str) -> ChangeClass {
    let first = field.split(['.', '[']).next().unwrap_or(field);
    match (old, new) {
        (OpSpec::Unpack { .. }, _) if first == "format" => ChangeClass::Shape,
        (OpSpec::Fir { taps: a }, OpSpec::Fir { taps: b }) if a.len() != b.len() => ChangeClass::Shape,
        (OpSpec::Filter2d { .. }, _) if first == "width" => ChangeClass::Shape,
        (OpSpec::Fft(_), _) if matches!(first, "n" | "output") => ChangeClass::Shape,
        (OpSpec::Kernel(_), _) if first != "params" => ChangeClass::Shape,
        _ => ChangeClass::Parameter,
    }
}

/// Appends `(key, old, new)` for every leaf that differs below `prefix`.
/// Objects recurse by key; anything else (arrays included: a tap list is
/// one key) is a leaf.
fn leaf_diff(prefix: &str, a: &Value, b: &Value, out: &mut Vec<(String, String, String)>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut names: Vec<&String> = x.keys().chain(y.keys().filter(|k| !x.contains_key(*k))).collect();
            names.sort();
            for name in names {
                let key = if prefix.is_empty() { name.clone() } else { format!("{prefix}.{name}") };
                let null = Value::Null;
                leaf_diff(&key, x.get(name).unwrap_or(&null), y.get(name).unwrap_or(&null), out);
            }
        }
        _ if a != b => out.push((prefix.to_string(), short(a), short(b))),
        _ => {}
    }
}

/// A value for the log: arrays of numbers say how many there are when long.
fn short(v: &Value) -> String {
    match v {
        Value::Null => "(unset)".into(),
        Value::Array(items) if items.len() > 8 => format!("[{} values]", items.len()),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{FftOutput, FftSpec, FftWindow, SampleFormat, default_chain};

    fn with_chain(chain: Vec<OpSpec>) -> Config {
        Config { chain, ..Config::default() }
    }

    fn keys(change: &ConfigChange) -> Vec<(&str, ChangeClass)> {
        change.keys.iter().map(|k| (k.key.as_str(), k.class)).collect()
    }

    #[test]
    fn nothing_changed() {
        let change = classify(&Config::default(), &Config::default());
        assert_eq!(change.class(), None);
        assert_eq!(change.summary(), "nothing changed");
    }

    #[test]
    fn threshold_gain_and_tap_values_are_parameters() {
        let old = with_chain(default_chain());
        let mut chain = default_chain();
        chain[0] = OpSpec::Unpack { format: SampleFormat::U16, scale: 0.5, offset: 1.0 };
        chain[1] = OpSpec::Fir { taps: vec![0.0, 0.25, 0.5, 0.25, 0.0] };
        chain[3] = OpSpec::Threshold { level: 9.0 };
        let change = classify(&old, &with_chain(chain));
        assert_eq!(change.class(), Some(ChangeClass::Parameter));
        assert_eq!(
            keys(&change),
            vec![
                ("chain[0].offset", ChangeClass::Parameter),
                ("chain[0].scale", ChangeClass::Parameter),
                ("chain[1].taps", ChangeClass::Parameter),
                ("chain[3].level", ChangeClass::Parameter),
            ]
        );
        let summary = change.summary();
        assert!(summary.contains("chain[3].level 8.0 -> 9.0 (parameter)"), "{summary}");
    }

    #[test]
    fn filter_values_and_user_kernel_params_are_parameters_their_shape_is_not() {
        let filter = |width, v| OpSpec::Filter2d { width, kernel: [v; 9] };
        let base = |op: OpSpec| with_chain(vec![default_chain()[0].clone(), op]);
        let change = classify(&base(filter(4, 1.0)), &base(filter(4, 2.0)));
        assert_eq!(keys(&change), vec![("chain[1].kernel", ChangeClass::Parameter)]);
        let change = classify(&base(filter(4, 1.0)), &base(filter(8, 1.0)));
        assert_eq!(keys(&change), vec![("chain[1].width", ChangeClass::Shape)]);

        let kernel = |extra: &str| {
            OpSpec::Kernel(
                toml::from_str(&format!(
                    "source = 'g.cu'\nentry = 'gain'\nparam_types = ['gain: f32']\n{extra}"
                ))
                .unwrap(),
            )
        };
        let change =
            classify(&base(kernel("params = { gain = 1.0 }")), &base(kernel("params = { gain = 2.0 }")));
        assert_eq!(keys(&change), vec![("chain[1].params.gain", ChangeClass::Parameter)]);
        let change = classify(
            &base(kernel("params = { gain = 1.0 }")),
            &base(kernel("params = { gain = 1.0 }\nthreads = 64")),
        );
        assert_eq!(change.class(), Some(ChangeClass::Shape), "{}", change.summary());
    }

    #[test]
    fn added_removed_reordered_ops_and_tap_counts_are_shape() {
        let old = with_chain(default_chain());
        let mut added = default_chain();
        added.insert(2, OpSpec::Delay { us: 1 });
        let change = classify(&old, &with_chain(added));
        assert_eq!(keys(&change), vec![("chain", ChangeClass::Shape)]);
        assert!(change.summary().contains("unpack -> fir -> delay -> stats -> threshold"));
        let mut removed = default_chain();
        removed.remove(1);
        assert_eq!(classify(&old, &with_chain(removed)).class(), Some(ChangeClass::Shape));
        let mut reordered = default_chain();
        reordered.swap(2, 3);
        assert_eq!(classify(&old, &with_chain(reordered)).class(), Some(ChangeClass::Shape));
        let mut taps = default_chain();
        taps[1] = OpSpec::Fir { taps: vec![1.0; 7] };
        assert_eq!(keys(&classify(&old, &with_chain(taps))), vec![("chain[1].taps", ChangeClass::Shape)]);
        let mut format = default_chain();
        format[0] = OpSpec::Unpack { format: SampleFormat::U8, scale: 1.0 / 4096.0, offset: 0.0 };
        assert_eq!(keys(&classify(&old, &with_chain(format))), vec![("chain[0].format", ChangeClass::Shape)]);
    }

    #[test]
    fn fft_size_is_shape_its_window_a_parameter() {
        let fft = |n, window| {
            with_chain(vec![
                default_chain()[0].clone(),
                OpSpec::Fft(FftSpec { n, window, output: FftOutput::Magnitude, scale: None }),
            ])
        };
        let change = classify(&fft(64, FftWindow::Hann), &fft(128, FftWindow::Hann));
        assert_eq!(keys(&change), vec![("chain[1].n", ChangeClass::Shape)]);
        let change = classify(&fft(64, FftWindow::Hann), &fft(64, FftWindow::Blackman));
        assert_eq!(keys(&change), vec![("chain[1].window", ChangeClass::Parameter)]);
    }

    #[test]
    fn rings_sockets_backend_and_ingest_need_a_restart_and_win_over_chain_changes() {
        let old = Config::default();
        let mut new = Config::default();
        new.ring.slots = 128;
        new.ring.slot_bytes = 8192;
        new.ingest.bind = "0.0.0.0:6000".into();
        new.backend = crate::config::BackendChoice::Host;
        new.chain[3] = OpSpec::Threshold { level: 1.0 };
        let change = classify(&old, &new);
        assert_eq!(change.class(), Some(ChangeClass::Restart));
        let restart: Vec<&str> = change.of(ChangeClass::Restart).map(|k| k.key.as_str()).collect();
        assert_eq!(restart, vec!["backend", "ingest.bind", "ring.slot_bytes", "ring.slots"]);
        assert_eq!(change.of(ChangeClass::Parameter).count(), 1);
        let summary = change.summary();
        assert!(summary.contains("ring.slots 64 -> 128 (needs a restart)"), "{summary}");
    }

    #[test]
    fn loop_keys_are_named_as_in_the_file() {
        let mut new = Config::default();
        new.loop_.timeout_ms = 5;
        let change = classify(&Config::default(), &new);
        assert_eq!(keys(&change), vec![("loop.timeout_ms", ChangeClass::Restart)]);
    }
}
