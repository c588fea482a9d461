//! User CUDA kernels as chain operators (`op = "kernel"`): the config entry,
//! its parameter declaration and checks, the C layout of the parameter
//! struct, and the launch shape. Compiling the source is the CUDA backend's
//! job (`gpu::user::source`); nothing here reads files.

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// Threads per block when `threads` is not given.
pub const DEFAULT_THREADS: u32 = 256;
/// Most threads per block CUDA launches.
pub const MAX_THREADS: u32 = 1024;
/// Most blocks a fixed launch may ask for (CUDA's grid x limit).
pub const MAX_BLOCKS: u32 = i32::MAX as u32;
/// Most dynamic shared memory per block without opting in (48 KiB).
pub const MAX_SHARED_BYTES: u32 = 48 * 1024;
/// Largest parameter struct (bytes); it lives in device memory.
pub const MAX_PARAM_BYTES: usize = 4096;
/// Most output samples `output = { samples = N }` may ask for (256 MiB of f32).
pub const MAX_OUTPUT_SAMPLES: u32 = 1 << 26;

/// A `[[chain]]` entry with `op = "kernel"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserKernelSpec {
    /// The `.cu` file; a relative path is relative to the config file's
    /// directory. Empty when the source is given as `code`.
    #[serde(default, skip_serializing_if = "is_empty_path")]
    pub source: PathBuf,
    /// The kernel's CUDA source itself, as a string, instead of a file
    /// (`source`): compiled and checked the same way, its errors named
    /// after [`UserKernelSpec::source_name`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// The `extern "C" __global__` function to launch.
    pub entry: String,
    /// Parameter values by name.
    #[serde(default)]
    pub params: BTreeMap<String, ParamValue>,
    /// The parameter struct's fields in order, each `"name: type"`.
    #[serde(default)]
    pub param_types: Vec<String>,
    #[serde(default)]
    pub output: OutputSize,
    /// Threads per block (default [`DEFAULT_THREADS`]).
    #[serde(default)]
    pub threads: Option<u32>,
    /// A fixed number of blocks (default: enough for one thread per output sample).
    #[serde(default)]
    pub blocks: Option<u32>,
    /// Dynamic shared memory per block.
    #[serde(default)]
    pub shared_bytes: u32,
}

fn is_empty_path(p: &Path) -> bool {
    p.as_os_str().is_empty()
}

/// Longest `code` a kernel entry may carry (bytes), as for a `.cu` file.
pub const MAX_CODE_BYTES: usize = 4 << 20;

/// A parameter's value as written in the config: TOML has integers and
/// floats; anything else is kept as what it is (`NotANumber`, reported by
/// the checks with its key).
#[derive(Debug, Clone, PartialEq)]
pub enum ParamValue {
    Int(i64),
    Float(f64),
    /// What was written instead of a number, e.g. `the string "loud"`.
    NotANumber(String),
}

impl fmt::Display for ParamValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamValue::Int(v) => write!(f, "{v}"),
            ParamValue::Float(v) => write!(f, "{v:?}"),
            ParamValue::NotANumber(what) => f.write_str(what),
        }
    }
}

impl Serialize for ParamValue {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ParamValue::Int(v) => s.serialize_i64(*v),
            ParamValue::Float(v) => s.serialize_f64(*v),
            ParamValue::NotANumber(what) => s.serialize_str(what),
        }
    }
}

impl<'de> Deserialize<'de> for ParamValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ParamValue;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number (parameters are f32, f64, i32, u32, i64 or u64)")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ParamValue, E> {
                Ok(ParamValue::Int(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ParamValue, E> {
                i64::try_from(v).map(ParamValue::Int).map_err(|_| E::custom("integer is over i64::MAX"))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<ParamValue, E> {
                Ok(ParamValue::Float(v))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<ParamValue, E> {
                Ok(ParamValue::NotANumber(format!("the boolean {v}")))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ParamValue, E> {
                Ok(ParamValue::NotANumber(format!("the string {v:?}")))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<ParamValue, A::Error> {
                while seq.next_element::<de::IgnoredAny>()?.is_some() {}
                Ok(ParamValue::NotANumber("an array".into()))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ParamValue, A::Error> {
                while map.next_entry::<de::IgnoredAny, de::IgnoredAny>()?.is_some() {}
                Ok(ParamValue::NotANumber("a table".into()))
            }
        }
        d.deserialize_any(V)
    }
}

/// How many samples the kernel writes per frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputSize {
    /// As many as it reads (`output = "same"`, the default).
    #[default]
    Same,
    /// A fixed count (`output = { samples = N }`).
    Samples(u32),
}

impl Serialize for OutputSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match *self {
            OutputSize::Same => s.serialize_str("same"),
            OutputSize::Samples(n) => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("samples", &n)?;
                m.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for OutputSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = OutputSize;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("\"same\" or { samples = N }")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<OutputSize, E> {
                match v {
                    "same" => Ok(OutputSize::Same),
                    _ => Err(E::custom(format!(
                        "\"{v}\" is not an output size; use \"same\" or {{ samples = N }}"
                    ))),
                }
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<OutputSize, A::Error> {
                let mut samples = None;
                while let Some(key) = map.next_key::<String>()? {
                    if key != "samples" || samples.is_some() {
                        return Err(de::Error::custom(format!(
                            "unexpected key \"{key}\"; write output = {{ samples = N }}"
                        )));
                    }
                    samples = Some(map.next_value::<u32>()?);
                }
                samples
                    .map(OutputSize::Samples)
                    .ok_or_else(|| de::Error::custom("write output = { samples = N }"))
            }
        }
        d.deserialize_any(V)
    }
}

/// A parameter field's C type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamType {
    F32,
    F64,
    I32,
    U32,
    I64,
    U64,
}

impl ParamType {
    const ALL: [(&'static str, ParamType); 6] = [
        ("f32", ParamType::F32),
        ("f64", ParamType::F64),
        ("i32", ParamType::I32),
        ("u32", ParamType::U32),
        ("i64", ParamType::I64),
        ("u64", ParamType::U64),
    ];

    fn parse(s: &str) -> Option<Self> {
        Self::ALL.iter().find(|(n, _)| *n == s).map(|(_, t)| *t)
    }

    /// The config's name of the type.
    pub fn name(self) -> &'static str {
        Self::ALL.iter().find(|(_, t)| *t == self).map_or("?", |(n, _)| n)
    }

    /// The C type the kernel's struct declares (from `frameloop.cuh`'s integer typedefs).
    pub fn c_type(self) -> &'static str {
        match self {
            ParamType::F32 => "float",
            ParamType::F64 => "double",
            ParamType::I32 => "int32_t",
            ParamType::U32 => "uint32_t",
            ParamType::I64 => "int64_t",
            ParamType::U64 => "uint64_t",
        }
    }

    /// Size and alignment in bytes (natural alignment).
    fn size(self) -> usize {
        match self {
            ParamType::F32 | ParamType::I32 | ParamType::U32 => 4,
            ParamType::F64 | ParamType::I64 | ParamType::U64 => 8,
        }
    }

    /// The little-endian bytes of `value` in this type, or why it does not fit.
    fn encode(self, value: &ParamValue) -> Result<Vec<u8>, BadParamValue> {
        /// A number as written: whole or not.
        #[derive(Clone, Copy)]
        enum Number {
            Int(i64),
            Float(f64),
        }
        let value = match value {
            ParamValue::Int(i) => Number::Int(*i),
            ParamValue::Float(f) => Number::Float(*f),
            ParamValue::NotANumber(what) => {
                return Err(BadParamValue::NotANumber { what: what.clone(), ty: self.name() });
            }
        };
        let int = |v: Number| match v {
            Number::Int(i) => Ok(i),
            Number::Float(value) => Err(BadParamValue::FloatForInt { value, ty: self.name() }),
        };
        let range = |i: i64, lo: i128, hi: i128| {
            if (lo..=hi).contains(&i128::from(i)) {
                Ok(i)
            } else {
                Err(BadParamValue::OutOfRange { value: i, ty: self.name(), lo, hi })
            }
        };
        Ok(match self {
            ParamType::F32 => match value {
                Number::Int(i) => {
                    let f = i as f32;
                    if f as i128 != i128::from(i) {
                        return Err(BadParamValue::InexactF32 { value: i });
                    }
                    f.to_le_bytes().to_vec()
                }
                Number::Float(v) => {
                    if !v.is_finite() || (v as f32).is_infinite() {
                        return Err(BadParamValue::NotFiniteF32 { value: v });
                    }
                    (v as f32).to_le_bytes().to_vec()
                }
            },
            ParamType::F64 => match value {
                Number::Int(i) => {
                    let f = i as f64;
                    if f as i128 != i128::from(i) {
                        return Err(BadParamValue::InexactF64 { value: i });
                    }
                    f.to_le_bytes().to_vec()
                }
                Number::Float(v) => {
                    if !v.is_finite() {
                        return Err(BadParamValue::NotFinite { value: v });
                    }
                    v.to_le_bytes().to_vec()
                }
            },
            ParamType::I32 => {
                (range(int(value)?, i32::MIN.into(), i32::MAX.into())? as i32).to_le_bytes().to_vec()
            }
            ParamType::U32 => (range(int(value)?, 0, u32::MAX.into())? as u32).to_le_bytes().to_vec(),
            ParamType::I64 => int(value)?.to_le_bytes().to_vec(),
            ParamType::U64 => (range(int(value)?, 0, i64::MAX.into())? as u64).to_le_bytes().to_vec(),
        })
    }
}

/// Why a `params` value does not fit its declared type; each message says
/// what to write instead.
#[derive(Debug, thiserror::Error)]
enum BadParamValue {
    #[error("is {what}; write a number (the parameter is {ty})")]
    NotANumber { what: String, ty: &'static str },
    #[error("{value:?} is a float but the parameter is {ty}; write a whole number without a decimal point")]
    FloatForInt { value: f64, ty: &'static str },
    #[error("{value} is out of range for {ty}; use a value from {lo} to {hi}")]
    OutOfRange { value: i64, ty: &'static str, lo: i128, hi: i128 },
    #[error("{value} is not exactly representable as f32; declare it f64 or i64")]
    InexactF32 { value: i64 },
    #[error("{value:?} is not a finite f32; use a value within ±3.4e38")]
    NotFiniteF32 { value: f64 },
    #[error("{value} is not exactly representable as f64; declare it i64")]
    InexactF64 { value: i64 },
    #[error("{value:?} is not finite; use a finite value")]
    NotFinite { value: f64 },
}

/// One field of the parameter struct.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamField {
    pub name: String,
    pub ty: ParamType,
    /// Byte offset in the struct, as a C compiler lays it out.
    pub offset: usize,
}

/// The parameter struct's C layout: fields in declaration order, each at
/// the next multiple of its size, the total rounded up to the largest
/// alignment (0 bytes when there are no parameters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamLayout {
    pub fields: Vec<ParamField>,
    pub size: usize,
}

impl ParamLayout {
    /// The C declaration of the struct, named `name`.
    pub fn c_struct(&self, name: &str) -> String {
        let mut s = format!("struct {name} {{\n");
        for f in &self.fields {
            s.push_str(&format!("  {} {};  // offset {}\n", f.ty.c_type(), f.name, f.offset));
        }
        s.push_str(&format!("}};  // {} bytes\n", self.size));
        s
    }
}

/// One problem of a kernel entry: the key under `chain[i].` and the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelProblem {
    pub key: String,
    pub message: String,
}

impl KernelProblem {
    fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self { key: key.into(), message: message.into() }
    }
}

/// The launch of one frame: grid and block (x only) and dynamic shared memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchShape {
    pub blocks: u32,
    pub threads: u32,
    pub shared_bytes: u32,
}

/// True for a C identifier (`[A-Za-z_][A-Za-z0-9_]*`).
pub fn is_c_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl UserKernelSpec {
    /// What compiler messages call the source: the `source` path, or
    /// `code:ENTRY` for a source given as `code`.
    pub fn source_name(&self) -> String {
        match &self.code {
            Some(_) => format!("code:{}", self.entry),
            None => self.source.display().to_string(),
        }
    }

    /// The source file, a relative `source` taken relative to the directory
    /// of `config_file` (the file the spec was loaded from).
    pub fn source_path(&self, config_file: &Path) -> PathBuf {
        if self.source.is_absolute() {
            return self.source.clone();
        }
        config_file.parent().unwrap_or(Path::new(".")).join(&self.source)
    }

    /// The parameter struct's layout from `param_types`.
    pub fn layout(&self) -> Result<ParamLayout, Vec<KernelProblem>> {
        let mut problems = Vec::new();
        let mut fields: Vec<ParamField> = Vec::new();
        let (mut size, mut align) = (0usize, 1usize);
        for (i, decl) in self.param_types.iter().enumerate() {
            let key = format!("param_types[{i}]");
            let Some((name, ty)) = decl.split_once(':').map(|(n, t)| (n.trim(), t.trim())) else {
                problems.push(KernelProblem::new(
                    key,
                    format!("\"{decl}\" is not \"name: type\"; write e.g. \"gain: f32\""),
                ));
                continue;
            };
            if !is_c_identifier(name) {
                problems.push(KernelProblem::new(key, format!("\"{name}\" is not a C identifier; the field name must be usable in the kernel's struct")));
                continue;
            }
            let Some(ty) = ParamType::parse(ty) else {
                problems.push(KernelProblem::new(
                    key,
                    format!("unknown type \"{ty}\"; use one of f32, f64, i32, u32, i64, u64"),
                ));
                continue;
            };
            if fields.iter().any(|f| f.name == name) {
                problems.push(KernelProblem::new(
                    key,
                    format!("\"{name}\" is declared twice; give each field its own name"),
                ));
                continue;
            }
            let offset = size.next_multiple_of(ty.size());
            size = offset + ty.size();
            align = align.max(ty.size());
            fields.push(ParamField { name: name.to_string(), ty, offset });
        }
        let size = size.next_multiple_of(align);
        if size > MAX_PARAM_BYTES {
            problems.push(KernelProblem::new(
                "param_types",
                format!("the parameter struct is {size} bytes; at most {MAX_PARAM_BYTES} are allowed"),
            ));
        }
        if problems.is_empty() { Ok(ParamLayout { fields, size }) } else { Err(problems) }
    }

    /// The parameter struct's bytes (little-endian, zero padding), checking
    /// every value against its declared type.
    pub fn param_block(&self) -> Result<Vec<u8>, Vec<KernelProblem>> {
        let layout = self.layout()?;
        let mut problems = Vec::new();
        let mut bytes = vec![0u8; layout.size];
        for f in &layout.fields {
            let key = format!("params.{}", f.name);
            let Some(value) = self.params.get(&f.name) else {
                problems.push(KernelProblem::new(
                    key,
                    format!(
                        "missing; param_types declares \"{}: {}\": add {} = <value> to params",
                        f.name,
                        f.ty.name(),
                        f.name
                    ),
                ));
                continue;
            };
            match f.ty.encode(value) {
                Ok(b) => bytes[f.offset..f.offset + b.len()].copy_from_slice(&b),
                Err(why) => problems.push(KernelProblem::new(key, why.to_string())),
            }
        }
        for name in self.params.keys().filter(|n| !layout.fields.iter().any(|f| &f.name == *n)) {
            problems.push(KernelProblem::new(
                format!("params.{name}"),
                format!("not declared in param_types; add \"{name}: <type>\" there in the struct's field order, or remove it"),
            ));
        }
        if problems.is_empty() { Ok(bytes) } else { Err(problems) }
    }

    /// Output samples per frame for `input` input samples.
    pub fn output_samples(&self, input: u32) -> u32 {
        match self.output {
            OutputSize::Same => input,
            OutputSize::Samples(n) => n,
        }
    }

    /// The launch for `output` output samples: `blocks` × `threads` as
    /// configured, else one thread per output sample (at least one block).
    pub fn launch(&self, output: u32) -> LaunchShape {
        let threads = self.threads.unwrap_or(DEFAULT_THREADS).clamp(1, MAX_THREADS);
        let blocks = self.blocks.unwrap_or_else(|| output.div_ceil(threads).max(1));
        LaunchShape { blocks, threads, shared_bytes: self.shared_bytes }
    }

    /// Every problem of the entry (no file is read).
    pub fn problems(&self) -> Vec<KernelProblem> {
        let mut p = Vec::new();
        match (&self.code, self.source.as_os_str().is_empty()) {
            (None, true) => p.push(KernelProblem::new(
                "source",
                "is empty; give the path of the kernel's .cu file, or its CUDA source as code = \"...\"",
            )),
            (Some(_), false) => p.push(KernelProblem::new(
                "code",
                "is given with source; give the kernel's CUDA source either as a file (source) or as a string (code)",
            )),
            (Some(code), true) if code.trim().is_empty() => {
                p.push(KernelProblem::new("code", "is empty; write the kernel's CUDA source in it"))
            }
            (Some(code), true) if code.len() > MAX_CODE_BYTES => p.push(KernelProblem::new(
                "code",
                format!("is {} bytes; at most {MAX_CODE_BYTES} are allowed", code.len()),
            )),
            _ => {}
        }
        if !is_c_identifier(&self.entry) {
            p.push(KernelProblem::new(
                "entry",
                format!(
                    "\"{}\" is not a C identifier; use the name of the extern \"C\" __global__ function",
                    self.entry
                ),
            ));
        }
        if let Err(e) = self.param_block() {
            p.extend(e);
        }
        if let OutputSize::Samples(n) = self.output
            && !(1..=MAX_OUTPUT_SAMPLES).contains(&n)
        {
            p.push(KernelProblem::new(
                "output.samples",
                format!("{n} is out of range; use a value from 1 to {MAX_OUTPUT_SAMPLES}"),
            ));
        }
        if let Some(t) = self.threads
            && !(1..=MAX_THREADS).contains(&t)
        {
            p.push(KernelProblem::new(
                "threads",
                format!("{t} is out of range; use a value from 1 to {MAX_THREADS}"),
            ));
        }
        if let Some(b) = self.blocks
            && !(1..=MAX_BLOCKS).contains(&b)
        {
            p.push(KernelProblem::new(
                "blocks",
                format!("{b} is out of range; use a value from 1 to {MAX_BLOCKS}"),
            ));
        }
        if self.shared_bytes > MAX_SHARED_BYTES {
            p.push(KernelProblem::new(
                "shared_bytes",
                format!(
                    "{} is over the {MAX_SHARED_BYTES} bytes a block may use; use less",
                    self.shared_bytes
                ),
            ));
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(toml_text: &str) -> UserKernelSpec {
        toml::from_str(toml_text).unwrap()
    }

    fn keys(s: &UserKernelSpec) -> Vec<String> {
        s.problems().into_iter().map(|p| p.key).collect()
    }

    const BEAMFORM: &str = r#"
        source = "beamform.cu"
        entry = "beamform"
        params = { gain = 2.5, channels = 64, bias = -3, total = 7 }
        param_types = ["gain: f32", "channels: u32", "total: u64", "bias: i32"]
    "#;

    #[test]
    fn lays_out_like_a_c_compiler() {
        let s = spec(BEAMFORM);
        assert!(s.problems().is_empty(), "{:?}", s.problems());
        let l = s.layout().unwrap();
        let offsets: Vec<_> = l.fields.iter().map(|f| (f.name.as_str(), f.offset)).collect();
        assert_eq!(offsets, [("gain", 0), ("channels", 4), ("total", 8), ("bias", 16)]);
        assert_eq!(l.size, 24, "rounded up to the u64's alignment");
        let b = s.param_block().unwrap();
        assert_eq!(b.len(), 24);
        assert_eq!(b[0..4], 2.5f32.to_le_bytes());
        assert_eq!(b[4..8], 64u32.to_le_bytes());
        assert_eq!(b[8..16], 7u64.to_le_bytes());
        assert_eq!(b[16..20], (-3i32).to_le_bytes());
        assert_eq!(b[20..24], [0; 4], "padding is zero");
        assert!(l.c_struct("P").contains("uint64_t total;  // offset 8"));
    }

    #[test]
    fn f64_after_f32_is_aligned() {
        let s = spec("source='a.cu'\nentry='k'\nparams={a=1,b=2.0}\nparam_types=['a: f32','b: f64']");
        let l = s.layout().unwrap();
        assert_eq!((l.fields[1].offset, l.size), (8, 16));
        let none = spec("source='a.cu'\nentry='k'");
        assert_eq!(none.param_block().unwrap(), Vec::<u8>::new());
    }

    #[test]
    fn int_in_float_slot_only_when_exact() {
        let ok = spec("source='a.cu'\nentry='k'\nparams={g=16777216}\nparam_types=['g: f32']");
        assert_eq!(ok.param_block().unwrap(), 16777216f32.to_le_bytes());
        let bad = spec("source='a.cu'\nentry='k'\nparams={g=16777217}\nparam_types=['g: f32']");
        let p = bad.problems();
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].key, "params.g");
        assert!(p[0].message.contains("not exactly representable"), "{}", p[0].message);
    }

    #[test]
    fn float_in_int_slot_is_a_problem() {
        let s = spec("source='a.cu'\nentry='k'\nparams={channels=64.0}\nparam_types=['channels: u32']");
        let p = s.problems();
        assert_eq!(keys(&s), ["params.channels"]);
        assert!(p[0].message.contains("without a decimal point"), "{}", p[0].message);
    }

    #[test]
    fn out_of_range_values_are_problems() {
        let s = spec(
            "source='a.cu'\nentry='k'\nparams={a=-1,b=4294967296,c=2147483648,d=1e39,e=-1,f=nan}\n\
             param_types=['a: u32','b: u32','c: i32','d: f32','e: u64','f: f64']",
        );
        let k = keys(&s);
        assert_eq!(k, ["params.a", "params.b", "params.c", "params.d", "params.e", "params.f"]);
        assert!(s.problems()[0].message.contains("from 0 to 4294967295"));
    }

    #[test]
    fn missing_and_extra_params_are_named() {
        let s = spec(
            "source='a.cu'\nentry='k'\nparams={gain=1.0,extra=2}\nparam_types=['gain: f32','channels: u32']",
        );
        let p = s.problems();
        assert_eq!(keys(&s), ["params.channels", "params.extra"]);
        assert!(p[0].message.contains("missing"), "{}", p[0].message);
        assert!(p[1].message.contains("not declared in param_types"), "{}", p[1].message);
    }

    #[test]
    fn bad_declarations_are_named() {
        let s =
            spec("source='a.cu'\nentry='k'\nparam_types=['gain f32','3x: u32','c: u16','d: f32','d: f64']");
        assert_eq!(keys(&s), ["param_types[0]", "param_types[1]", "param_types[2]", "param_types[4]"]);
        assert!(s.problems()[2].message.contains("use one of f32, f64, i32, u32, i64, u64"));
        let big: Vec<String> = (0..600).map(|i| format!("'p{i}: u64'")).collect();
        let s = spec(&format!("source='a.cu'\nentry='k'\nparam_types=[{}]", big.join(",")));
        assert!(keys(&s).contains(&"param_types".to_string()));
    }

    #[test]
    fn launch_settings_are_checked() {
        let s =
            spec("source=''\nentry='not-c'\noutput={samples=0}\nthreads=2048\nblocks=0\nshared_bytes=100000");
        assert_eq!(keys(&s), ["source", "entry", "output.samples", "threads", "blocks", "shared_bytes"]);
    }

    #[test]
    fn launch_shape_defaults_to_a_thread_per_output_sample() {
        let s = spec("source='a.cu'\nentry='k'");
        assert_eq!(s.launch(1000), LaunchShape { blocks: 4, threads: 256, shared_bytes: 0 });
        assert_eq!(s.launch(0).blocks, 1);
        assert_eq!(s.output_samples(77), 77);
        let fixed =
            spec("source='a.cu'\nentry='k'\nthreads=64\nblocks=3\nshared_bytes=512\noutput={samples=10}");
        assert_eq!(fixed.launch(1_000_000), LaunchShape { blocks: 3, threads: 64, shared_bytes: 512 });
        assert_eq!(fixed.output_samples(77), 10);
        let threads_only = spec("source='a.cu'\nentry='k'\nthreads=100");
        assert_eq!(threads_only.launch(1000).blocks, 10);
    }

    #[test]
    fn output_accepts_only_same_or_samples() {
        assert!(toml::from_str::<UserKernelSpec>("source='a'\nentry='k'\noutput='half'").is_err());
        assert!(toml::from_str::<UserKernelSpec>("source='a'\nentry='k'\noutput={count=3}").is_err());
        assert_eq!(spec("source='a'\nentry='k'\noutput='same'").output, OutputSize::Same);
    }

    #[test]
    fn code_replaces_source_and_exactly_one_of_them_is_given() {
        let s = spec("code = 'extern \"C\" __global__ void k() {}'\nentry = 'k'");
        assert!(s.problems().is_empty(), "{:?}", s.problems());
        assert_eq!(s.source_name(), "code:k");
        assert_eq!(spec("source='a.cu'\nentry='k'").source_name(), "a.cu");
        assert_eq!(keys(&spec("source='a.cu'\ncode='x'\nentry='k'")), ["code"]);
        assert_eq!(keys(&spec("code='  '\nentry='k'")), ["code"]);
        assert_eq!(keys(&spec("entry='k'")), ["source"]);
        let round = toml::to_string(&s).unwrap();
        assert!(!round.contains("source"), "an absent source is not written: {round}");
        assert_eq!(toml::from_str::<UserKernelSpec>(&round).unwrap(), s);
    }

    #[test]
    fn relative_sources_follow_the_config_file() {
        let s = spec("source='k/beam.cu'\nentry='k'");
        assert_eq!(
            s.source_path(Path::new("/etc/frameloop/frameloop.toml")),
            Path::new("/etc/frameloop/k/beam.cu")
        );
        assert_eq!(s.source_path(Path::new("frameloop.toml")), Path::new("k/beam.cu"));
        let abs = spec("source='/opt/beam.cu'\nentry='k'");
        assert_eq!(abs.source_path(Path::new("/etc/x.toml")), Path::new("/opt/beam.cu"));
    }
}
