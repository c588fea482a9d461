//! The `[[actuate]]` tables: a loop's actuation outputs, each saying where
//! its messages go, what they carry and for which frames, with the bounds on
//! their size and rate; checked into an [`ActuationPlan`] with every problem
//! naming its key (`actuate[0].destination`, `loop[1].actuate[0].when`).

use crate::config_problem::{ConfigProblem, deserialize_table, no_listed_keys};
use crate::ingest::{Transport, UdpConfig};
use crate::wire::actuation::{
    HEADER_LEN, MAX_MESSAGE_BYTES, MessageShape, PART_RECORD, PART_SAMPLES, PART_USER, payload_bytes,
};
use serde::{Deserialize, Deserializer, Serialize};
use std::net::SocketAddr;

/// Most `[[actuate]]` tables one loop may have.
pub const MAX_OUTPUTS: usize = 8;
/// `max_rate` unless given: messages per second of one output.
pub const DEFAULT_MAX_RATE: u32 = 100_000;
/// `max_bytes` unless given: one datagram on a 1500-byte MTU.
pub const DEFAULT_MAX_BYTES: u32 = 1472;
/// Most fixed destinations of one output.
pub const MAX_DESTINATIONS: usize = 16;

/// Which frames an output sends a message for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum When {
    /// Every processed frame.
    #[default]
    Every,
    /// Frames in which the threshold operator detected something
    /// (`detect_count > 0`); the chain must have a threshold operator.
    Detection,
    /// Frames for which a user kernel asked (`fl_request_actuation`, or a
    /// host user stage setting `actuate_request`).
    Flag,
}

/// One payload part an output carries (`send = [...]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Part {
    /// The frame's result record (192 bytes).
    Record,
    /// The 48 user result bytes user kernels wrote.
    User,
    /// The first `samples` output samples of the chain.
    Samples,
}

/// One `[[actuate]]` table as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ActuateConfig {
    /// A label for metrics and logs (default `actuate<i>`).
    pub name: Option<String>,
    /// `"reply"` (back to the address the frame's stream came from, which
    /// `ingest.allow` must admit), or one or more `"HOST:PORT"` addresses.
    #[serde(deserialize_with = "one_or_many")]
    pub destination: Vec<String>,
    /// Payload parts, in the message in the order record, user, samples.
    pub send: Vec<Part>,
    /// With `"samples"` in `send`: how many of the first output samples.
    pub samples: u32,
    /// `every`, `detection` or `flag`.
    pub when: When,
    /// Messages per second this output sends at most; more are dropped and counted.
    pub max_rate: u32,
    /// The largest message (header included) the output may send; the
    /// configured parts must fit it.
    pub max_bytes: u32,
}

impl Default for ActuateConfig {
    fn default() -> Self {
        Self {
            name: None,
            destination: Vec::new(),
            send: vec![Part::Record],
            samples: 0,
            when: When::Every,
            max_rate: DEFAULT_MAX_RATE,
            max_bytes: DEFAULT_MAX_BYTES,
        }
    }
}

fn one_or_many<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    match OneOrMany::deserialize(d) {
        Ok(OneOrMany::One(s)) => Ok(vec![s]),
        Ok(OneOrMany::Many(v)) => Ok(v),
        Err(_) => Err(serde::de::Error::custom(
            "must be \"reply\" or addresses like \"10.0.0.5:6000\" or [\"10.0.0.5:6000\", \"10.0.0.6:6000\"]",
        )),
    }
}

/// Where an output's messages go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// To each of these addresses.
    Fixed(Vec<SocketAddr>),
    /// Back to the newest admitted source of the frame's stream.
    Reply,
}

/// One checked output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputPlan {
    pub name: String,
    pub destination: Destination,
    pub shape: MessageShape,
    pub when: When,
    pub max_rate: u32,
}

/// A loop's checked actuation outputs, in config order (the output index
/// in each message is the position here).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ActuationPlan {
    pub outputs: Vec<OutputPlan>,
}

impl ActuationPlan {
    /// True when the loop sends nothing.
    pub fn is_empty(&self) -> bool {
        self.outputs.is_empty()
    }

    /// The largest message any output sends (0 without outputs).
    pub fn max_message_bytes(&self) -> usize {
        self.outputs.iter().map(|o| o.shape.max_bytes() as usize).max().unwrap_or(0)
    }
}

/// What the checks need to know of the loop around the outputs.
pub struct LoopContext<'a> {
    pub ingest: &'a UdpConfig,
    /// The chain has a threshold operator (detections can happen).
    pub has_threshold: bool,
}

/// Checks `tables` (written under `prefix`, `actuate` or `loop[1].actuate`)
/// and turns them into a plan; every problem goes to `problems`, naming its key.
pub fn plan(
    prefix: &str,
    tables: &[ActuateConfig],
    cx: &LoopContext<'_>,
    problems: &mut Vec<ConfigProblem>,
) -> ActuationPlan {
    if tables.len() > MAX_OUTPUTS {
        problems.push(ConfigProblem::new(
            prefix,
            format!("has {} tables; a loop has at most {MAX_OUTPUTS} actuation outputs", tables.len()),
        ));
    }
    let mut outputs = Vec::new();
    for (i, t) in tables.iter().enumerate().take(MAX_OUTPUTS) {
        let key = |k: &str| format!("{prefix}[{i}].{k}");
        let before = problems.len();
        let name = t.name.clone().unwrap_or_else(|| format!("actuate{i}"));
        if name.is_empty()
            || name.len() > 32
            || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            problems.push(ConfigProblem::new(
                key("name"),
                format!("{name:?} is not a usable name (it labels metrics); use 1 to 32 letters, digits, '-' or '_'"),
            ));
        }
        if outputs.iter().any(|o: &OutputPlan| o.name == name)
            || tables[..i].iter().any(|o| o.name.as_ref() == Some(&name))
        {
            problems.push(ConfigProblem::new(
                key("name"),
                format!("{name:?} names two outputs; give each its own name"),
            ));
        }
        let destination = destination(&key("destination"), &t.destination, cx.ingest, problems);
        let mut parts = 0u8;
        for p in &t.send {
            let bit = match p {
                Part::Record => PART_RECORD,
                Part::User => PART_USER,
                Part::Samples => PART_SAMPLES,
            };
            if parts & bit != 0 {
                problems
                    .push(ConfigProblem::new(key("send"), format!("names {p:?} twice; name each part once")));
            }
            parts |= bit;
        }
        match (parts & PART_SAMPLES != 0, t.samples) {
            (true, 0) => problems.push(ConfigProblem::new(
                key("samples"),
                "is 0 but send has \"samples\"; set samples = N (the first N output samples to send)",
            )),
            (false, n) if n > 0 => problems.push(ConfigProblem::new(
                key("samples"),
                format!(
                    "is {n} but send does not have \"samples\"; add \"samples\" to send or remove samples"
                ),
            )),
            _ => {}
        }
        if !(HEADER_LEN as u32..=MAX_MESSAGE_BYTES as u32).contains(&t.max_bytes) {
            problems.push(ConfigProblem::new(
                key("max_bytes"),
                format!(
                    "{} is out of range; use a value from {HEADER_LEN} to {MAX_MESSAGE_BYTES}",
                    t.max_bytes
                ),
            ));
        }
        let needed = HEADER_LEN as u64 + payload_bytes(parts, t.samples);
        if needed > u64::from(t.max_bytes) {
            problems.push(ConfigProblem::new(
                key("max_bytes"),
                format!(
                    "is {} but the message the output sends (send = {:?}, samples = {}) takes {needed} bytes; \
                     raise max_bytes (at most {MAX_MESSAGE_BYTES}) or send less",
                    t.max_bytes, t.send, t.samples
                ),
            ));
        }
        if !(1..=10_000_000).contains(&t.max_rate) {
            problems.push(ConfigProblem::new(
                key("max_rate"),
                format!("{} is out of range; use 1 to 10000000 messages per second", t.max_rate),
            ));
        }
        if t.when == When::Detection && !cx.has_threshold {
            problems.push(ConfigProblem::new(
                key("when"),
                "is \"detection\" but the chain has no threshold operator to detect anything; add \
                 [[chain]] op = \"threshold\" or use when = \"every\"",
            ));
        }
        if problems.len() == before
            && let Some(destination) = destination
        {
            outputs.push(OutputPlan {
                name,
                destination,
                shape: MessageShape { parts, samples: t.samples },
                when: t.when,
                max_rate: t.max_rate,
            });
        }
    }
    ActuationPlan { outputs }
}

fn destination(
    key: &str,
    written: &[String],
    ingest: &UdpConfig,
    problems: &mut Vec<ConfigProblem>,
) -> Option<Destination> {
    if written.is_empty() {
        problems.push(ConfigProblem::new(
            key,
            "is missing; write destination = \"reply\" or destination = [\"10.0.0.5:6000\"]",
        ));
        return None;
    }
    if written.iter().any(|d| d == "reply") {
        if written.len() > 1 {
            problems.push(ConfigProblem::new(
                key,
                "mixes \"reply\" with addresses; use one [[actuate]] table for each",
            ));
            return None;
        }
        if ingest.allow.is_empty() {
            problems.push(ConfigProblem::new(
                key,
                "is \"reply\" but ingest.allow is empty, so any source could make the appliance send to it; \
                 list the sensors' addresses in ingest.allow (for example allow = [\"10.0.0.0/24\"])",
            ));
            return None;
        }
        if ingest.transport == Transport::Rdma {
            problems.push(ConfigProblem::new(
                key,
                "is \"reply\" but ingest.transport = \"rdma\" gives no source address to reply to; \
                 use fixed addresses",
            ));
            return None;
        }
        return Some(Destination::Reply);
    }
    if written.len() > MAX_DESTINATIONS {
        problems.push(ConfigProblem::new(
            key,
            format!("lists {} addresses; at most {MAX_DESTINATIONS}", written.len()),
        ));
        return None;
    }
    let mut addrs = Vec::with_capacity(written.len());
    for d in written {
        match d.parse::<SocketAddr>() {
            Ok(a) if a.port() != 0 && !a.ip().is_unspecified() => addrs.push(a),
            _ => {
                problems.push(ConfigProblem::new(
                    key,
                    format!("{d:?} is not a destination; write \"reply\" or an IP address and port like \"10.0.0.5:6000\""),
                ));
                return None;
            }
        }
    }
    Some(Destination::Fixed(addrs))
}

/// Parses the `[[actuate]]` array at `key` (`actuate` or `loop[1].actuate`).
pub fn parse_tables(key: &str, value: &toml::Value, problems: &mut Vec<ConfigProblem>) -> Vec<ActuateConfig> {
    let toml::Value::Array(items) = value else {
        problems.push(ConfigProblem::new(key, "must be an array of tables: write [[actuate]] sections"));
        return Vec::new();
    };
    items
        .iter()
        .enumerate()
        .map(|(i, v)| {
            deserialize_table::<ActuateConfig>(&format!("{key}[{i}]"), Some(v), problems, no_listed_keys)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, allow: &[&str]) -> (ActuationPlan, Vec<ConfigProblem>) {
        let value: toml::Table = toml::from_str(text).unwrap();
        let mut problems = Vec::new();
        let tables = parse_tables("actuate", &value["actuate"], &mut problems);
        let ingest = UdpConfig { allow: allow.iter().map(|s| s.to_string()).collect(), ..Default::default() };
        let plan =
            plan("actuate", &tables, &LoopContext { ingest: &ingest, has_threshold: true }, &mut problems);
        (plan, problems)
    }

    #[test]
    fn a_good_table_becomes_a_plan() {
        let (plan, problems) = check(
            "[[actuate]]\ndestination = \"reply\"\nsend = [\"record\", \"samples\"]\nsamples = 64\nwhen = \"detection\"\n\
             [[actuate]]\nname = \"dac\"\ndestination = [\"10.0.0.5:6000\", \"[fd00::1]:7000\"]\nsend = [\"user\"]\n",
            &["127.0.0.1"],
        );
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(plan.outputs.len(), 2);
        assert_eq!(plan.outputs[0].destination, Destination::Reply);
        assert_eq!(plan.outputs[0].shape, MessageShape { parts: PART_RECORD | PART_SAMPLES, samples: 64 });
        assert_eq!(plan.outputs[0].name, "actuate0");
        assert!(matches!(&plan.outputs[1].destination, Destination::Fixed(a) if a.len() == 2));
        assert_eq!(plan.max_message_bytes(), 64 + 192 + 256);
    }

    #[test]
    fn every_problem_names_its_key() {
        let cases: &[(&str, &[&str], &str, &str)] = &[
            ("destination = \"reply\"", &[], "actuate[0].destination", "ingest.allow"),
            ("", &[], "actuate[0].destination", "missing"),
            ("destination = \"nowhere\"", &[], "actuate[0].destination", "not a destination"),
            ("destination = 5", &[], "actuate[0].destination", "reply"),
            ("destination = \"10.0.0.1:9\"\nsend = [\"samples\"]", &[], "actuate[0].samples", "is 0"),
            ("destination = \"10.0.0.1:9\"\nsamples = 3", &[], "actuate[0].samples", "does not have"),
            (
                "destination = \"10.0.0.1:9\"\nsend = [\"samples\"]\nsamples = 1000",
                &[],
                "actuate[0].max_bytes",
                "4064 bytes",
            ),
            ("destination = \"10.0.0.1:9\"\nmax_rate = 0", &[], "actuate[0].max_rate", "out of range"),
            ("destination = \"10.0.0.1:9\"\nwhen = \"sometimes\"", &[], "actuate[0].when", ""),
            (
                "destination = \"10.0.0.1:9\"\nsend = [\"record\", \"record\"]",
                &[],
                "actuate[0].send",
                "twice",
            ),
            ("destination = \"10.0.0.1:9\"\ncolour = 1", &[], "actuate[0].colour", "unknown key"),
            ("destination = \"10.0.0.1:9\"\nname = \"a b\"", &[], "actuate[0].name", "usable"),
        ];
        for (table, allow, key, words) in cases {
            let (plan, problems) = check(&format!("[[actuate]]\n{table}\n"), allow);
            let p = problems
                .iter()
                .find(|p| p.key == *key)
                .unwrap_or_else(|| panic!("{table}: no {key} in {problems:?}"));
            assert!(p.message.contains(words), "{table}: {}", p.message);
            // Keys that fail to parse fall back to their defaults, so the
            // table is planned; the file as a whole is still refused.
            let parse_level = ["colour", "when", "destination = 5"].iter().any(|w| table.contains(w));
            assert!(plan.outputs.is_empty() || parse_level, "{table}: a bad table is not planned");
        }
    }
}
