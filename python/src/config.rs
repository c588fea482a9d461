//! A config from Python: a dict with the TOML file's keys (or the path of a
//! TOML file), read by the library's own parser and checks, so that every
//! problem is found at once and named by its key; and the exceptions that
//! carry those problems (`ConfigError`, and `CompileError` for user kernel
//! sources NVRTC refuses, with the line).

use crate::{CompileError, ConfigError};
use frameloop::config::{BackendChoice, Config, ConfigProblem};
use frameloop::gpu::user::source::{EntryKind, UserCodeError, check_source, kernel_text};
use frameloop::ops::OpSpec;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use std::path::PathBuf;

/// A config as given to `Appliance`, `reload` or `ReferenceChain`.
pub struct Source {
    pub config: Config,
    /// What relative kernel `source` paths are relative to: the config
    /// file, or a file in `base_dir` for a dict.
    pub anchor: PathBuf,
}

/// Reads `config` (None: the defaults, a dict, or a path), checks it and
/// applies `backend` ("auto", "host", "cuda") over its own.
pub fn read(
    config: Option<&Bound<'_, PyAny>>,
    backend: Option<&str>,
    base_dir: Option<PathBuf>,
) -> PyResult<Source> {
    let backend = backend.map(parse_backend).transpose()?;
    let base = match base_dir {
        Some(d) => d,
        None => std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
    };
    let (mut config, anchor) = match config {
        None => (Config::default(), base.join("frameloop.toml")),
        Some(c) if c.is_instance_of::<PyDict>() => {
            let mut problems = Vec::new();
            let table = to_table(c.cast::<PyDict>()?, "", &mut problems)?;
            let text = toml::to_string(&table)
                .map_err(|e| PyValueError::new_err(format!("the config cannot be written as TOML: {e}")))?;
            let parsed = frameloop::config::parse(&text);
            match parsed {
                Ok(cfg) if problems.is_empty() => (cfg, base.join("frameloop.toml")),
                Ok(_) => return Err(config_error(problems)),
                Err(e) => {
                    problems.extend(e.problems().iter().cloned());
                    return Err(config_error(problems));
                }
            }
        }
        Some(c) => {
            let path: PathBuf = c.extract().map_err(|_| {
                PyValueError::new_err(format!(
                    "config must be a dict with the TOML file's keys, or the path of a TOML file, not {}",
                    type_name(c)
                ))
            })?;
            let cfg = frameloop::config::load(&path).map_err(|e| match e {
                frameloop::config::ConfigError::Invalid(p) => {
                    let pairs: Vec<(String, String)> = p.into_iter().map(|p| (p.key, p.message)).collect();
                    with_problems(format!("{}: {}", path.display(), render(&pairs)), pairs)
                }
                read => with_problems(read.to_string(), Vec::new()),
            })?;
            (cfg, path)
        }
    };
    if let Some(b) = backend {
        config.backend = b;
    }
    if !config.loops.is_empty() {
        return Err(config_error(vec![ConfigProblem::new(
            "loop",
            "[[loop]] tables run several loops from one process as `frameloop run` does; in Python start one \
             Appliance per loop (each on its own port and GPU), or run the config with frameloop run",
        )]));
    }
    config.chain = frameloop::gpu::user::kernel::with_sources_resolved(&config.chain, &anchor);
    Ok(Source { config, anchor })
}

fn parse_backend(name: &str) -> PyResult<BackendChoice> {
    match name {
        "auto" => Ok(BackendChoice::Auto),
        "host" => Ok(BackendChoice::Host),
        "cuda" => Ok(BackendChoice::Cuda),
        other => Err(PyValueError::new_err(format!(
            "backend {other:?} is none of \"auto\" (CUDA when a GPU is usable, else host), \"host\" or \"cuda\""
        ))),
    }
}

/// Compiles every user kernel of the chain with NVRTC and checks its entry,
/// as `frameloop validate` does, raising `CompileError` with each error's
/// key, file and line. Needs NVRTC, not a GPU; skipped on the host backend
/// (which refuses user kernels anyway, with its own message).
pub fn check_kernels(source: &Source) -> PyResult<()> {
    if source.config.backend == BackendChoice::Host {
        return Ok(());
    }
    let mut errors: Vec<(String, UserCodeError)> = Vec::new();
    for (i, op) in source.config.chain.iter().enumerate() {
        let OpSpec::Kernel(k) = op else { continue };
        let key = format!("chain[{i}].{}", if k.code.is_some() { "code" } else { "source" });
        match kernel_text(k, Some(&source.anchor)) {
            Ok((file, text)) => {
                for e in check_source(&file, &text, &k.entry, EntryKind::Kernel) {
                    let key = if e.key() == "entry" { format!("chain[{i}].entry") } else { key.clone() };
                    errors.push((key, e));
                }
            }
            Err(e) => errors.push((key, e)),
        }
    }
    if errors.is_empty() {
        return Ok(());
    }
    Err(compile_error(&errors))
}

/// `CompileError(message, problems, lines)`: `lines` holds `(key, file,
/// line, message)` of every compiler error with a line.
pub fn compile_error(errors: &[(String, UserCodeError)]) -> PyErr {
    let problems: Vec<(String, String)> = errors.iter().map(|(k, e)| (k.clone(), e.to_string())).collect();
    let lines: Vec<(String, String, u32, String)> = errors
        .iter()
        .filter_map(|(k, e)| match e {
            UserCodeError::Compile { file, line, message } => {
                Some((k.clone(), file.clone(), *line, message.clone()))
            }
            _ => None,
        })
        .collect();
    Python::attach(|py| {
        let err = CompileError::new_err(render(&problems));
        let value = err.value(py);
        let keys: Vec<&str> = problems.iter().map(|(k, _)| k.as_str()).collect();
        let first_line = lines.first().map(|l| l.2);
        // Setting attributes on a fresh exception object cannot fail.
        let _ = value.setattr("keys", keys);
        let _ = value.setattr("problems", problems.clone());
        let _ = value.setattr("lines", lines.clone());
        let _ = value.setattr("line", first_line);
        err
    })
}

/// `ConfigError(message, problems)` naming every problem's key.
pub fn config_error(problems: Vec<ConfigProblem>) -> PyErr {
    let pairs: Vec<(String, String)> = problems.into_iter().map(|p| (p.key, p.message)).collect();
    with_problems(render(&pairs), pairs)
}

fn with_problems(message: String, pairs: Vec<(String, String)>) -> PyErr {
    Python::attach(|py| {
        let err = ConfigError::new_err(message);
        let value = err.value(py);
        let keys: Vec<&str> = pairs.iter().map(|(k, _)| k.as_str()).collect();
        // Setting attributes on a fresh exception object cannot fail.
        let _ = value.setattr("keys", keys);
        let _ = value.setattr("problems", pairs.clone());
        err
    })
}

fn render(problems: &[(String, String)]) -> String {
    let mut s = format!("config has {} problem(s):", problems.len());
    for (key, message) in problems {
        s.push_str(&format!("\n  - {key}: {message}"));
    }
    s
}

fn type_name(value: &Bound<'_, PyAny>) -> String {
    value.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "an object".into())
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() { key.to_string() } else { format!("{prefix}.{key}") }
}

/// A dict as a TOML table: `None` values are left out (the key's default),
/// values TOML cannot hold are problems under their key (and left out, so
/// that the parser still checks the rest).
fn to_table(
    dict: &Bound<'_, PyDict>,
    prefix: &str,
    problems: &mut Vec<ConfigProblem>,
) -> PyResult<toml::Table> {
    let mut table = toml::Table::new();
    for (k, v) in dict.iter() {
        let Ok(key) = k.extract::<String>() else {
            problems.push(ConfigProblem::new(
                join(prefix, &k.str().map(|s| s.to_string()).unwrap_or_default()),
                format!("keys must be strings, not {}", type_name(&k)),
            ));
            continue;
        };
        let name = join(prefix, &key);
        if let Some(value) = to_value(&v, &name, problems)? {
            table.insert(key, value);
        }
    }
    Ok(table)
}

fn to_value(
    v: &Bound<'_, PyAny>,
    key: &str,
    problems: &mut Vec<ConfigProblem>,
) -> PyResult<Option<toml::Value>> {
    if v.is_none() {
        return Ok(None);
    }
    if v.is_instance_of::<PyBool>() {
        return Ok(Some(toml::Value::Boolean(v.extract()?)));
    }
    if v.is_instance_of::<PyString>() {
        return Ok(Some(toml::Value::String(v.extract()?)));
    }
    if v.is_instance_of::<PyInt>() || (v.hasattr("__index__")? && !v.is_instance_of::<PyFloat>()) {
        return Ok(match v.extract::<i64>() {
            Ok(i) => Some(toml::Value::Integer(i)),
            Err(_) => {
                problems.push(ConfigProblem::new(key, format!("{v} is out of range for a config integer")));
                None
            }
        });
    }
    if let Ok(f) = v.extract::<f64>() {
        return Ok(Some(toml::Value::Float(f)));
    }
    if let Ok(dict) = v.cast::<PyDict>() {
        return Ok(Some(toml::Value::Table(to_table(dict, key, problems)?)));
    }
    if let Ok(path) = v.extract::<PathBuf>() {
        return Ok(Some(toml::Value::String(path.display().to_string())));
    }
    // NumPy arrays and other sequences: their elements.
    let items = if v.hasattr("tolist")? { v.call_method0("tolist")? } else { v.clone() };
    if items.is_instance_of::<PyList>() || items.is_instance_of::<PyTuple>() {
        let mut array = Vec::new();
        for (i, item) in items.try_iter()?.enumerate() {
            if let Some(value) = to_value(&item?, &format!("{key}[{i}]"), problems)? {
                array.push(value);
            }
        }
        return Ok(Some(toml::Value::Array(array)));
    }
    problems.push(ConfigProblem::new(
        key,
        format!("{} cannot be written in a config; use a number, string, bool, list or dict", type_name(v)),
    ));
    Ok(None)
}

/// The running config as Python objects (the TOML file's keys).
pub fn to_python<'py>(py: Python<'py>, config: &Config) -> PyResult<Bound<'py, PyAny>> {
    crate::json_to_python(
        py,
        &serde_json::to_value(config).map_err(|e| PyValueError::new_err(e.to_string()))?,
    )
}

/// The chain entry `op` names: an index, `"chain[i]"`, an operator's name
/// (`"threshold"`) or a user kernel's entry; refused when several match.
pub fn find_op(chain: &[OpSpec], op: &Bound<'_, PyAny>) -> PyResult<usize> {
    if let Ok(i) = op.extract::<usize>() {
        return if i < chain.len() {
            Ok(i)
        } else {
            Err(PyValueError::new_err(format!(
                "the chain has {} entries; chain[{i}] is none of them",
                chain.len()
            )))
        };
    }
    let name: String = op.extract()?;
    if let Some(i) =
        name.strip_prefix("chain[").and_then(|r| r.strip_suffix(']')).and_then(|i| i.parse::<usize>().ok())
    {
        return find_op(chain, &i.into_pyobject(op.py())?.into_any());
    }
    let matches: Vec<usize> = chain
        .iter()
        .enumerate()
        .filter(|(_, o)| o.name() == name || matches!(o, OpSpec::Kernel(k) if k.entry == name))
        .map(|(i, _)| i)
        .collect();
    match matches.as_slice() {
        [i] => Ok(*i),
        [] => Err(PyValueError::new_err(format!(
            "the chain has no operator {name:?}; it has {}",
            chain.iter().map(describe_op).collect::<Vec<_>>().join(", ")
        ))),
        _ => Err(PyValueError::new_err(format!(
            "{name:?} names chain entries {matches:?}; name one as \"chain[i]\" or by its index"
        ))),
    }
}

fn describe_op(op: &OpSpec) -> String {
    match op {
        OpSpec::Kernel(k) => format!("kernel {:?}", k.entry),
        other => other.name().to_string(),
    }
}

/// `config` with chain entry `index`'s parameters set to `values` (a
/// user kernel's go into its `params`), checked as a config file's are.
pub fn with_params(config: &Config, index: usize, values: &Bound<'_, PyDict>) -> PyResult<Config> {
    let mut problems = Vec::new();
    let prefix = format!("chain[{index}]");
    let updates = to_table(values, &prefix, &mut problems)?;
    if !problems.is_empty() {
        return Err(config_error(problems));
    }
    let mut entry = toml::Table::try_from(&config.chain[index])
        .map_err(|e| PyValueError::new_err(format!("{prefix} cannot be written as TOML: {e}")))?;
    let target = if matches!(config.chain[index], OpSpec::Kernel(_)) {
        match entry.entry("params").or_insert_with(|| toml::Value::Table(Default::default())) {
            toml::Value::Table(t) => t,
            _ => return Err(PyValueError::new_err(format!("{prefix}.params is not a table"))),
        }
    } else {
        &mut entry
    };
    for (k, v) in updates {
        if k == "op" {
            return Err(PyValueError::new_err("set_params changes parameters; an operator's op is fixed"));
        }
        target.insert(k, v);
    }
    let mut new = config.clone();
    let mut problems = Vec::new();
    let spec: Option<OpSpec> = frameloop::config::section::<Option<OpSpec>>(
        &prefix,
        Some(&toml::Value::Table(entry)),
        &mut problems,
    );
    match spec {
        Some(spec) if problems.is_empty() => new.chain[index] = spec,
        _ => return Err(config_error(problems)),
    }
    let problems = new.problems();
    if problems.is_empty() { Ok(new) } else { Err(config_error(problems)) }
}
