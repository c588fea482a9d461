//! The `[[loop]]` tables: several resident loops in one appliance, each with
//! its own receiver, frame and result rings, chain and GPU. A loop inherits
//! the top-level `[ingest]`, `[ring]` and `[[chain]]` and overrides any of
//! their keys in its own `[loop.ingest]`, `[loop.ring]` and `[[loop.chain]]`;
//! the resident-loop keys of `[loop]` (`poll_budget_us`, ...) sit directly in
//! each `[[loop]]` table. Without `[[loop]]` the appliance runs one loop.

use super::{ChainEntry, Config, LoopConfig, RingConfig};
use super::{ConfigProblem, section};
use crate::ingest::UdpConfig;
use crate::ops::{self, OpSpec};
use crate::topology::CpuList;
use std::net::SocketAddr;

/// Which GPU a loop runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuChoice {
    /// `placement = "auto"` (the default): the GPU closest to the NIC that
    /// owns the loop's bind address, ties going to the least loaded one.
    Auto,
    /// `gpu = N`.
    Ordinal(usize),
}

/// One `[[loop]]` table, with what it inherits already filled in.
#[derive(Debug, Clone, PartialEq)]
pub struct LoopSpec {
    /// Its name: a metrics label and a log prefix (`[A-Za-z0-9_-]`, unique).
    pub name: String,
    /// The GPU it runs on (`gpu = N`, or placed by topology).
    pub gpu: GpuChoice,
    /// The stream ids it serves: labels for metrics and logs on a port of
    /// its own (whose receiver takes every stream reaching it); on a port
    /// shared with other loops (the same `ingest.bind`), the streams its
    /// ring gets from the port's one receiver ([`port_groups`]).
    pub streams: Vec<u32>,
    /// CPUs for its receiver, loop and result threads (`cpus = "8-15"`),
    /// instead of those of its GPU's NUMA node.
    pub cpus: Option<CpuList>,
    /// Its `[ingest]` keys (its own `bind`).
    pub ingest: UdpConfig,
    /// Its `[ring]` keys.
    pub ring: RingConfig,
    /// Its operator chain.
    pub chain: Vec<OpSpec>,
    /// The resident-loop keys (`poll_budget_us`, ...) of this table.
    pub settings: LoopConfig,
    /// Its `[[loop.actuate]]` outputs, or the top-level `[[actuate]]` ones.
    pub actuate: Vec<crate::actuate::ActuateConfig>,
}

/// Keys of a `[[loop]]` table other than the resident-loop ones.
pub(crate) const OWN_KEYS: &[&str] =
    &["name", "gpu", "placement", "streams", "cpus", "ingest", "ring", "chain", "actuate"];

/// `top`'s table `key` with `own`'s keys laid over it (one level deep,
/// except that `own` replaces a nested table as a whole).
fn inherited(top: Option<&toml::Value>, own: Option<&toml::Value>) -> Option<toml::Value> {
    match (top, own) {
        (None, None) => None,
        (Some(t), None) => Some(t.clone()),
        (None, Some(o)) => Some(o.clone()),
        (Some(toml::Value::Table(t)), Some(toml::Value::Table(o))) => {
            let mut merged = t.clone();
            merged.extend(o.iter().map(|(k, v)| (k.clone(), v.clone())));
            Some(toml::Value::Table(merged))
        }
        // A non-table on either side is reported by `section` as it stands.
        (_, Some(o)) => Some(o.clone()),
    }
}

/// Parses a `[[chain]]`-style array at `key`; `None` after a problem.
pub(super) fn parse_chain(
    key: &str,
    value: &toml::Value,
    problems: &mut Vec<ConfigProblem>,
) -> Option<Vec<OpSpec>> {
    let toml::Value::Array(items) = value else {
        problems.push(ConfigProblem::new(key, "must be an array of tables: write [[...chain]] sections"));
        return None;
    };
    let before = problems.len();
    let chain: Vec<Option<OpSpec>> = items
        .iter()
        .enumerate()
        .map(|(i, v)| section::<ChainEntry>(&format!("{key}[{i}]"), Some(v), problems).0)
        .collect();
    if problems.len() > before {
        return None;
    }
    chain.into_iter().collect()
}

/// Parses the `[[loop]]` array. `top` is the whole file (for what the loops
/// inherit) and `chain` the top-level chain already parsed.
pub(super) fn parse(
    items: &[toml::Value],
    top: &toml::Table,
    chain: &[OpSpec],
    problems: &mut Vec<ConfigProblem>,
) -> Vec<LoopSpec> {
    let mut loops = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let prefix = format!("loop[{i}]");
        let Some(table) = item.as_table() else {
            problems.push(ConfigProblem::new(prefix, "must be a table: write [[loop]] sections"));
            continue;
        };
        let key = |k: &str| format!("{prefix}.{k}");
        let name = match table.get("name") {
            None => format!("loop{i}"),
            Some(toml::Value::String(s)) => s.clone(),
            Some(_) => {
                problems.push(ConfigProblem::new(key("name"), "must be a string, like name = \"cam0\""));
                format!("loop{i}")
            }
        };
        if name.is_empty()
            || name.len() > 32
            || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            problems.push(ConfigProblem::new(
                key("name"),
                format!(
                    "{name:?} is not a usable loop name (it labels metrics and names files); use 1 to 32 \
                     letters, digits, '-' or '_'"
                ),
            ));
        }
        let gpu_number = match table.get("gpu") {
            None => None,
            Some(toml::Value::Integer(n)) if *n >= 0 => Some(*n as usize),
            Some(v) => {
                problems.push(ConfigProblem::new(
                    key("gpu"),
                    format!("{v} is not a GPU number; write gpu = 0 (see `frameloop topology`)"),
                ));
                None
            }
        };
        let auto = match table.get("placement") {
            None => false,
            Some(toml::Value::String(s)) if s == "auto" => true,
            Some(v) => {
                problems.push(ConfigProblem::new(
                    key("placement"),
                    format!("{v} is not a placement; write placement = \"auto\" or set gpu = N instead"),
                ));
                false
            }
        };
        if auto && gpu_number.is_some() {
            problems.push(ConfigProblem::new(
                key("placement"),
                "is \"auto\" but the loop also sets gpu; keep one of the two",
            ));
        }
        let gpu = gpu_number.map_or(GpuChoice::Auto, GpuChoice::Ordinal);
        let streams = match table.get("streams") {
            None => Vec::new(),
            Some(toml::Value::Array(ids)) => ids
                .iter()
                .filter_map(|id| match id.as_integer().and_then(|n| u32::try_from(n).ok()) {
                    Some(n) => Some(n),
                    None => {
                        problems.push(ConfigProblem::new(
                            key("streams"),
                            format!("{id} is not a stream id; use numbers from 0 to {}", u32::MAX),
                        ));
                        None
                    }
                })
                .collect(),
            Some(v) => {
                problems.push(ConfigProblem::new(
                    key("streams"),
                    format!("{v} is not a list; write streams = [1, 2]"),
                ));
                Vec::new()
            }
        };
        let cpus = match table.get("cpus") {
            None => None,
            Some(toml::Value::String(s)) => match CpuList::parse(s) {
                Some(list) if list.count() > 0 => Some(list),
                _ => {
                    problems.push(ConfigProblem::new(
                        key("cpus"),
                        format!("{s:?} is not a CPU list; write it like \"8-15\" or \"0,2,4\""),
                    ));
                    None
                }
            },
            Some(v) => {
                problems.push(ConfigProblem::new(
                    key("cpus"),
                    format!("{v} is not a CPU list; write it like cpus = \"8-15\""),
                ));
                None
            }
        };
        let ingest = section::<UdpConfig>(
            &key("ingest"),
            inherited(top.get("ingest"), table.get("ingest")).as_ref(),
            problems,
        );
        let ring = section::<RingConfig>(
            &key("ring"),
            inherited(top.get("ring"), table.get("ring")).as_ref(),
            problems,
        );
        let chain = match table.get("chain") {
            None => chain.to_vec(),
            Some(v) => parse_chain(&key("chain"), v, problems).unwrap_or_else(|| chain.to_vec()),
        };
        let actuate = match table.get("actuate").or(top.get("actuate")) {
            None => Vec::new(),
            Some(v) => crate::actuate::config::parse_tables(&key("actuate"), v, problems),
        };
        let mut rest = table.clone();
        rest.retain(|k, _| !OWN_KEYS.contains(&k));
        let settings = section::<LoopConfig>(&prefix, Some(&toml::Value::Table(rest)), problems);
        loops.push(LoopSpec { name, gpu, streams, cpus, ingest, ring, chain, settings, actuate });
    }
    loops
}

/// Runs a section's own validation and puts `loop[i].` in front of its keys
/// (`ring.slots` becomes `loop[0].ring.slots`; the resident-loop keys,
/// `loop.*`, become `loop[0].*`).
fn prefixed(prefix: &str, problems: &mut Vec<ConfigProblem>, check: impl FnOnce(&mut Vec<ConfigProblem>)) {
    let mut own = Vec::new();
    check(&mut own);
    for mut p in own {
        let key = p.key.strip_prefix("loop.").unwrap_or(&p.key);
        p.key = format!("{prefix}.{key}");
        p.message = p.message.replace("loop.", &format!("{prefix}."));
        problems.push(p);
    }
}

/// Two binds that would take the same datagrams: same port (other than 0,
/// which picks a free one) and the same address, or one of them every address.
fn overlap(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() == b.port()
        && a.port() != 0
        && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

/// Loops that share one UDP port: those with the same `ingest.bind` (port
/// other than 0), by index in config order, in groups of two or more. One
/// receiver takes the port's datagrams and gives each loop the streams it
/// lists.
pub fn port_groups(loops: &[LoopSpec]) -> Vec<Vec<usize>> {
    let mut groups: Vec<(SocketAddr, Vec<usize>)> = Vec::new();
    for (i, spec) in loops.iter().enumerate() {
        let Ok(addr) = spec.ingest.bind.parse::<SocketAddr>() else { continue };
        if addr.port() == 0 {
            continue;
        }
        match groups.iter_mut().find(|(a, _)| *a == addr) {
            Some((_, members)) => members.push(i),
            None => groups.push((addr, vec![i])),
        }
    }
    groups.into_iter().map(|(_, members)| members).filter(|m| m.len() > 1).collect()
}

/// The `[ingest]` keys of `cfg` that belong to the socket and its receiving
/// thread (everything but the reassembly keys, which each loop on a shared
/// port keeps for itself), as a TOML table.
fn receiver_keys(cfg: &UdpConfig) -> toml::Table {
    let reassembly = match toml::Value::try_from(&cfg.reassembly) {
        Ok(toml::Value::Table(t)) => t,
        _ => toml::Table::new(),
    };
    let mut keys = match toml::Value::try_from(cfg) {
        Ok(toml::Value::Table(t)) => t,
        _ => toml::Table::new(),
    };
    keys.retain(|k, _| !reassembly.contains_key(k));
    keys
}

/// Problems of loop `i`, which shares its port with the earlier loop `j`
/// (`other`): one receiver serves both, so the receiver's keys must agree,
/// and routing by stream id needs native UDP datagrams.
fn shared_port_problems(
    i: usize,
    spec: &LoopSpec,
    j: usize,
    other: &LoopSpec,
    problems: &mut Vec<ConfigProblem>,
) {
    let (mine, theirs) = (receiver_keys(&spec.ingest), receiver_keys(&other.ingest));
    let differing: Vec<&str> =
        mine.iter().filter(|(k, v)| theirs.get(*k) != Some(*v)).map(|(k, _)| k.as_str()).collect();
    if !differing.is_empty() {
        problems.push(ConfigProblem::new(
            format!("loop[{i}].ingest"),
            format!(
                "shares {} with loop[{j}] ({:?}) but sets {} differently; loops on one port share one receiver, \
                 so give them the same values (only the reassembly keys may differ)",
                spec.ingest.bind,
                other.name,
                differing.join(", ")
            ),
        ));
    }
}

/// Problems of a loop that shares its port with others (`group` holds their
/// indices): it must list its streams, and receive native datagrams by UDP.
fn shared_loop_problems(i: usize, spec: &LoopSpec, group: &[usize], problems: &mut Vec<ConfigProblem>) {
    let others: Vec<String> = group.iter().filter(|&&k| k != i).map(|k| format!("loop[{k}]")).collect();
    let others = others.join(", ");
    if spec.streams.is_empty() {
        problems.push(ConfigProblem::new(
            format!("loop[{i}].streams"),
            format!(
                "is empty, but the loop shares {} with {others}: one receiver splits the port's datagrams by \
                 stream id, so list the streams this loop serves (streams = [1, 2]) or give it its own port",
                spec.ingest.bind
            ),
        ));
    }
    if spec.ingest.transport == crate::ingest::Transport::Rdma {
        problems.push(ConfigProblem::new(
            format!("loop[{i}].ingest.transport"),
            format!(
                "is \"rdma\", but the loop shares {} with {others} and a shared port is received by UDP; \
                 set transport = \"udp\" or give the loop its own port",
                spec.ingest.bind
            ),
        ));
    }
    if spec.ingest.format != crate::ingest::hsb::IngestFormat::default() {
        problems.push(ConfigProblem::new(
            format!("loop[{i}].ingest.format"),
            format!(
                "is not \"native\", but the loop shares {} with {others}; only native datagrams carry a stream \
                 id to split the port by: give the loop its own port",
                spec.ingest.bind
            ),
        ));
    }
}

/// Every problem of `cfg.loops`: each loop's sections, then what loops
/// must not share (names, bind addresses, stream ids on one port), what
/// loops sharing one port must agree on, and the top-level keys that cannot
/// apply to several loops.
pub(super) fn problems(cfg: &Config, problems: &mut Vec<ConfigProblem>) {
    let loops = &cfg.loops;
    for (i, spec) in loops.iter().enumerate() {
        let prefix = format!("loop[{i}]");
        prefixed(&prefix, problems, |p| spec.ring.validate(p));
        prefixed(&prefix, problems, |p| spec.settings.validate(p));
        prefixed(&prefix, problems, |p| spec.ingest.validate(p));
        let cx = crate::actuate::config::LoopContext {
            ingest: &spec.ingest,
            has_threshold: spec.chain.iter().any(|op| matches!(op, OpSpec::Threshold { .. })),
        };
        crate::actuate::config::plan(&format!("{prefix}.actuate"), &spec.actuate, &cx, problems);
        if let Err(errs) = ops::validate_chain(&spec.chain) {
            for e in errs {
                problems.push(ConfigProblem::new(format!("{prefix}.chain"), e.to_string()));
            }
        }
        if let Some(Ok(rtp)) = cfg.rtp.as_ref().map(|r| r.resolve())
            && rtp.geometry.frame_bytes() > spec.ring.slot_bytes
        {
            problems.push(ConfigProblem::new(
                format!("{prefix}.ring.slot_bytes"),
                format!(
                    "{} is smaller than one [rtp] frame; set it to at least {}",
                    spec.ring.slot_bytes,
                    rtp.geometry.frame_bytes()
                ),
            ));
        }
        let mut seen = Vec::new();
        for id in &spec.streams {
            if seen.contains(id) {
                problems.push(ConfigProblem::new(
                    format!("{prefix}.streams"),
                    format!("lists stream {id} twice; list each stream once"),
                ));
            }
            seen.push(*id);
        }
        for (j, other) in loops[..i].iter().enumerate() {
            if other.name == spec.name {
                problems.push(ConfigProblem::new(
                    format!("{prefix}.name"),
                    format!("{:?} is also the name of loop[{j}]; give each loop its own name", spec.name),
                ));
            }
            let (Ok(a), Ok(b)) =
                (spec.ingest.bind.parse::<SocketAddr>(), other.ingest.bind.parse::<SocketAddr>())
            else {
                continue;
            };
            let shared = a == b && a.port() != 0;
            if shared {
                shared_port_problems(i, spec, j, other, problems);
            }
            if overlap(a, b) && !shared {
                problems.push(ConfigProblem::new(
                    format!("{prefix}.ingest.bind"),
                    format!(
                        "{a} takes the same datagrams as loop[{j}] ({:?}) on {b}; give each loop its own port \
                         (or its own address on the port), or bind both to the same address and list disjoint \
                         streams",
                        other.name
                    ),
                ));
            } else if a.port() == b.port() && a.port() != 0 {
                for id in spec.streams.iter().filter(|id| other.streams.contains(id)) {
                    problems.push(ConfigProblem::new(
                        format!("{prefix}.streams"),
                        format!(
                            "stream {id} on port {} is already claimed by loop[{j}] ({:?}); a stream belongs \
                             to one loop",
                            a.port(),
                            other.name
                        ),
                    ));
                }
            }
        }
    }
    for group in port_groups(loops) {
        for &i in &group {
            shared_loop_problems(i, &loops[i], &group, problems);
        }
        if cfg.rtp.is_some() {
            problems.push(ConfigProblem::new(
                "rtp",
                format!(
                    "is set, but loops {group:?} share {}; RTP datagrams carry no native stream id to split the \
                     port by: give each loop its own port",
                    loops[group[0]].ingest.bind
                ),
            ));
        }
    }
    if loops.len() > 1 {
        let svc = &cfg.service;
        for (key, cpu) in [
            ("service.receiver_cpu", svc.receiver_cpu),
            ("service.assembly_cpu", svc.assembly_cpu),
            ("service.loop_cpu", svc.loop_cpu),
            ("service.result_cpu", svc.result_cpu),
        ] {
            if cpu.is_some() {
                problems.push(ConfigProblem::new(
                    key,
                    "would pin the threads of every loop to one core; remove it and set cpus = \"...\" in \
                     each [[loop]] (or let each loop take its GPU's NUMA node)",
                ));
            }
        }
        if !svc.reader_cpus.is_empty() {
            problems.push(ConfigProblem::new(
                "service.reader_cpus",
                "would pin the reading threads of every loop to the same cores; remove it and set cpus = \
                 \"...\" in each [[loop]]",
            ));
        }
    }
}

/// `gpu = N` past the GPUs of the machine (`gpu_count` of them).
pub fn gpu_problems(loops: &[LoopSpec], gpu_count: usize) -> Vec<ConfigProblem> {
    loops
        .iter()
        .enumerate()
        .filter_map(|(i, spec)| match spec.gpu {
            GpuChoice::Ordinal(n) if n >= gpu_count => Some(ConfigProblem::new(
                format!("loop[{i}].gpu"),
                format!(
                    "GPU {n} does not exist on this machine ({gpu_count} GPUs); use a number below \
                     {gpu_count} (see `frameloop topology`) or placement = \"auto\""
                ),
            )),
            _ => None,
        })
        .collect()
}

/// The configuration one loop runs with: the file's, with the loop's
/// ingest, ring, chain and resident-loop settings in place and its
/// histogram log (if any) named after the loop.
pub fn loop_config(cfg: &Config, spec: &LoopSpec) -> Config {
    let mut one = cfg.clone();
    one.loops = Vec::new();
    one.ingest = spec.ingest.clone();
    one.ring = spec.ring.clone();
    one.chain = spec.chain.clone();
    one.loop_ = spec.settings.clone();
    one.actuate = spec.actuate.clone();
    one.metrics.histogram_log = cfg.metrics.histogram_log.as_deref().map(|p| per_loop_path(p, &spec.name));
    one.metrics.frame_log = cfg.metrics.frame_log.as_deref().map(|p| per_loop_path(p, &spec.name));
    one
}

/// `dir/latency.hlog` for loop `cam0`: `dir/latency.cam0.hlog`.
pub fn per_loop_path(path: &std::path::Path, name: &str) -> std::path::PathBuf {
    let stem = path.file_stem().map_or_else(String::new, |s| s.to_string_lossy().into_owned());
    let file = match path.extension() {
        Some(ext) => format!("{stem}.{name}.{}", ext.to_string_lossy()),
        None => format!("{stem}.{name}"),
    };
    path.with_file_name(file)
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::*;

    const TWO: &str = r#"
        backend = "host"
        [ring]
        slots = 16
        [ingest]
        bind = "0.0.0.0:5000"
        frame_timeout_ms = 7
        [[chain]]
        op = "unpack"
        format = "u16"
        [[chain]]
        op = "stats"

        [[loop]]
        name = "cam0"
        gpu = 0
        streams = [1, 2]

        [[loop]]
        name = "cam1"
        placement = "auto"
        streams = [3]
        cpus = "2-3"
        poll_budget_us = 500
        [loop.ingest]
        bind = "0.0.0.0:5001"
        [loop.ring]
        slot_bytes = 8192
        [[loop.chain]]
        op = "unpack"
        format = "u8"
        [[loop.chain]]
        op = "stats"
    "#;

    fn keys_of(text: &str) -> Vec<String> {
        parse(text).unwrap_err().problems().iter().map(|p| p.to_string()).collect()
    }

    #[test]
    fn loops_inherit_the_top_level_sections_and_override_their_own_keys() {
        let cfg = parse(TWO).unwrap();
        let [a, b] = &cfg.loops[..] else { panic!("{:?}", cfg.loops) };
        assert_eq!((a.name.as_str(), a.gpu, &a.streams[..]), ("cam0", GpuChoice::Ordinal(0), &[1, 2][..]));
        assert_eq!((b.name.as_str(), b.gpu, &b.streams[..]), ("cam1", GpuChoice::Auto, &[3][..]));
        assert_eq!(a.ingest.bind, "0.0.0.0:5000");
        assert_eq!(b.ingest.bind, "0.0.0.0:5001");
        // Keys the loop does not set come from the top-level table.
        assert_eq!(b.ingest.reassembly.frame_timeout_ms, 7);
        assert_eq!((a.ring.slots, a.ring.slot_bytes), (16, RingConfig::default().slot_bytes));
        assert_eq!((b.ring.slots, b.ring.slot_bytes), (16, 8192));
        assert_eq!(a.chain, cfg.chain);
        assert_ne!(b.chain, cfg.chain);
        assert_eq!(b.settings.poll_budget_us, 500);
        assert_eq!(a.settings, LoopConfig::default());
        assert_eq!(b.cpus.as_ref().map(ToString::to_string).as_deref(), Some("2-3"));
        let one = loop_config(&cfg, b);
        assert!(one.loops.is_empty());
        assert_eq!(
            (one.ingest.bind.as_str(), one.ring.slot_bytes, one.loop_.poll_budget_us),
            ("0.0.0.0:5001", 8192, 500)
        );
    }

    #[test]
    fn a_file_without_loop_tables_keeps_the_single_loop_config() {
        let cfg = parse("[loop]\npoll_budget_us = 300\n").unwrap();
        assert!(cfg.loops.is_empty());
        assert_eq!(cfg.loop_.poll_budget_us, 300);
    }

    #[test]
    fn each_problem_names_its_loop_and_key() {
        let text =
            |extra: &str| format!("[[loop]]\nname = \"a\"\n[loop.ingest]\nbind = \"0.0.0.0:5000\"\n{extra}");
        let cases = [
            ("[[loop]]\nname = \"a\"\n", "loop[1].name: \"a\" is also the name of loop[0]"),
            (
                "[[loop]]\nname = \"b\"\n[loop.ingest]\nbind = \"127.0.0.1:5000\"\n",
                "loop[1].ingest.bind: 127.0.0.1:5000 takes the same datagrams as loop[0]",
            ),
            (
                "[[loop]]\nname = \"b\"\n",
                "loop[0].streams: is empty, but the loop shares 0.0.0.0:5000 with loop[1]",
            ),
            (
                "[[loop]]\nname = \"b c\"\n[loop.ingest]\nbind = \"0.0.0.0:5001\"\n",
                "loop[1].name: \"b c\" is not",
            ),
            (
                "[[loop]]\nname = \"b\"\nplacement = \"nearest\"\n[loop.ingest]\nbind = \"0.0.0.0:5001\"\n",
                "loop[1].placement: \"nearest\" is not a placement",
            ),
            (
                "[[loop]]\nname = \"b\"\nplacement = \"auto\"\ngpu = 1\n[loop.ingest]\nbind = \"0.0.0.0:5001\"\n",
                "loop[1].placement: is \"auto\" but the loop also sets gpu",
            ),
            (
                "[[loop]]\nname = \"b\"\ngpu = -1\n[loop.ingest]\nbind = \"0.0.0.0:5001\"\n",
                "loop[1].gpu: -1 is not a GPU number",
            ),
            (
                "[[loop]]\nname = \"b\"\ncpus = \"3-1\"\n[loop.ingest]\nbind = \"0.0.0.0:5001\"\n",
                "loop[1].cpus: \"3-1\" is not a CPU list",
            ),
            (
                "[[loop]]\nname = \"b\"\nstreams = [1, 1]\n[loop.ingest]\nbind = \"0.0.0.0:5001\"\n",
                "loop[1].streams: lists stream 1 twice",
            ),
            (
                "[[loop]]\nname = \"b\"\nstreams = [-4]\n[loop.ingest]\nbind = \"0.0.0.0:5001\"\n",
                "loop[1].streams: -4 is not a stream id",
            ),
            (
                "[[loop]]\nname = \"b\"\npoll_budget_us = 5000000\n[loop.ingest]\nbind = \"0.0.0.0:5001\"\n",
                "loop[1].poll_budget_us: 5000000 is out of range",
            ),
            (
                "[[loop]]\nname = \"b\"\nbogus = 1\n[loop.ingest]\nbind = \"0.0.0.0:5001\"\n",
                "loop[1].bogus: unknown key",
            ),
            (
                "[[loop]]\nname = \"b\"\n[loop.ring]\nslots = 1\n[loop.ingest]\nbind = \"0.0.0.0:5001\"\n",
                "loop[1].ring.slots: 1 is out of range",
            ),
            (
                "[[loop]]\nname = \"b\"\n[loop.ingest]\nbind = \"nowhere\"\n",
                "loop[1].ingest.bind: \"nowhere\" is not an address",
            ),
            (
                "[[loop]]\nname = \"b\"\n[loop.ingest]\nbind = \"0.0.0.0:5001\"\n[[loop.chain]]\nop = \"median\"\n",
                "loop[1].chain[0]",
            ),
            (
                "[[loop]]\nname = \"b\"\n[loop.ingest]\nbind = \"0.0.0.0:5001\"\n[service]\nloop_cpu = 1\n",
                "service.loop_cpu: would pin the threads of every loop to one core",
            ),
            (
                "[[loop]]\nname = \"b\"\n[loop.ingest]\nbind = \"0.0.0.0:5001\"\n[service]\nreader_cpus = [1]\n",
                "service.reader_cpus: would pin the reading threads of every loop",
            ),
        ];
        for (extra, want) in cases {
            let problems = keys_of(&text(extra));
            assert!(problems.iter().any(|p| p.starts_with(want)), "want {want:?} in {problems:#?}");
        }
        assert!(parse(&text("[[loop]]\nname = \"b\"\n[loop.ingest]\nbind = \"0.0.0.0:5001\"\n")).is_ok());
    }

    #[test]
    fn a_stream_id_is_claimed_by_one_loop_per_port() {
        let two = |a: &str, b: &str| {
            format!(
                "[[loop]]\nname = \"a\"\nstreams = [1, 2]\n[loop.ingest]\nbind = \"{a}\"\n\
                 [[loop]]\nname = \"b\"\nstreams = [2]\n[loop.ingest]\nbind = \"{b}\"\n"
            )
        };
        let problems = keys_of(&two("10.0.0.1:5000", "10.0.1.1:5000"));
        assert_eq!(
            problems,
            [
                "loop[1].streams: stream 2 on port 5000 is already claimed by loop[0] (\"a\"); a stream belongs to one loop"
            ]
        );
        assert!(parse(&two("10.0.0.1:5000", "10.0.1.1:5001")).is_ok());
        // Port 0 picks a free port for each loop: never a clash.
        assert!(parse(&two("127.0.0.1:0", "127.0.0.1:0")).is_ok());
    }

    /// Two loops on `bind` with streams `a` and `b`; `extra_b` goes into the
    /// second loop's `[loop.ingest]`, `top` before the loops.
    fn sharing(top: &str, a: &str, b: &str, extra_b: &str) -> String {
        format!(
            "{top}\n[[loop]]\nname = \"a\"\n{a}\n[loop.ingest]\nbind = \"0.0.0.0:6000\"\n\
             [[loop]]\nname = \"b\"\n{b}\n[loop.ingest]\nbind = \"0.0.0.0:6000\"\n{extra_b}\n"
        )
    }

    #[test]
    fn loops_on_one_port_split_it_by_disjoint_streams() {
        let ok = parse(&sharing("", "streams = [1, 3]", "streams = [2]", "frame_timeout_ms = 9")).unwrap();
        assert_eq!(port_groups(&ok.loops), [vec![0, 1]]);
        // Reassembly keys are each loop's own.
        assert_eq!(ok.loops[1].ingest.reassembly.frame_timeout_ms, 9);
        let cases = [
            (
                sharing("", "streams = [1]", "", ""),
                vec!["loop[1].streams: is empty, but the loop shares 0.0.0.0:6000 with loop[0]"],
            ),
            (
                sharing("", "streams = [1, 2]", "streams = [2]", ""),
                vec!["loop[1].streams: stream 2 on port 6000 is already claimed by loop[0] (\"a\")"],
            ),
            (
                sharing("", "streams = [1]", "streams = [2]", "batch = 8\ngro = false"),
                vec![
                    "loop[1].ingest: shares 0.0.0.0:6000 with loop[0] (\"a\") but sets batch, gro differently; \
                     loops on one port share one receiver",
                ],
            ),
            (
                sharing("", "streams = [1]", "streams = [2]", "transport = \"rdma\""),
                vec![
                    "loop[1].ingest: shares 0.0.0.0:6000 with loop[0] (\"a\") but sets transport differently",
                    "loop[1].ingest.transport: is \"rdma\", but the loop shares 0.0.0.0:6000 with loop[0]",
                ],
            ),
            (
                sharing(
                    "[rtp]\nsampling = \"YCbCr-4:2:2\"\nwidth = 8\nheight = 8\n",
                    "streams = [1]",
                    "streams = [2]",
                    "",
                ),
                vec!["rtp: is set, but loops [0, 1] share 0.0.0.0:6000"],
            ),
        ];
        for (text, want) in cases {
            let problems = keys_of(&text);
            for w in &want {
                assert!(problems.iter().any(|p| p.starts_with(w)), "want {w:?} in {problems:#?}\n{text}");
            }
            assert!(
                problems.iter().all(|p| !p.contains("  ")),
                "a message with a run of spaces: {problems:#?}"
            );
        }
        // Another address on the same port overlapping 0.0.0.0 is still refused.
        let other =
            sharing("", "streams = [1]", "streams = [2]", "").replacen("0.0.0.0:6000", "127.0.0.1:6000", 1);
        assert!(keys_of(&other)[0].starts_with("loop[1].ingest.bind: 0.0.0.0:6000 takes the same datagrams"));
    }

    #[test]
    fn gpus_past_the_machine_are_named_with_the_count() {
        let cfg = parse(TWO).unwrap();
        assert!(gpu_problems(&cfg.loops, 1).is_empty());
        let mut loops = cfg.loops.clone();
        loops[1].gpu = GpuChoice::Ordinal(3);
        let problems = gpu_problems(&loops, 2);
        assert_eq!(problems.len(), 1);
        assert!(
            problems[0].to_string().starts_with("loop[1].gpu: GPU 3 does not exist on this machine (2 GPUs)"),
            "{}",
            problems[0]
        );
    }

    #[test]
    fn histogram_and_frame_logs_are_named_after_their_loop() {
        let p = per_loop_path(std::path::Path::new("/var/log/latency.hlog"), "cam0");
        assert_eq!(p, std::path::Path::new("/var/log/latency.cam0.hlog"));
        assert_eq!(per_loop_path(std::path::Path::new("lat"), "b"), std::path::Path::new("lat.b"));
        let mut cfg = parse(TWO).unwrap();
        cfg.metrics.frame_log = Some("/var/log/frames.csv".into());
        let one = loop_config(&cfg, &cfg.loops[1]);
        assert_eq!(one.metrics.frame_log.as_deref(), Some(std::path::Path::new("/var/log/frames.cam1.csv")));
        assert_eq!(one.metrics.histogram_log, None);
    }
}
