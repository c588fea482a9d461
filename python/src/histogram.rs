//! `frameloop.Histogram`: one latency segment's HDR histogram (values in
//! nanoseconds), as the appliance recorded it: percentiles, the recorded
//! values for plotting, merging, and the standard compressed V2 encoding
//! that HdrHistogram libraries (Java, Python `hdrhistogram`) decode.

use base64::prelude::{BASE64_STANDARD, Engine as _};
use hdrhistogram::Histogram as Hdr;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// A latency histogram of nanosecond values.
#[pyclass(module = "frameloop", name = "Histogram", frozen)]
pub struct Histogram {
    segment: String,
    h: Hdr<u64>,
}

impl Histogram {
    pub fn new(segment: &str, h: Hdr<u64>) -> Self {
        Self { segment: segment.to_string(), h }
    }
}

fn check_percentile(p: f64) -> PyResult<f64> {
    if (0.0..=100.0).contains(&p) {
        Ok(p)
    } else {
        Err(PyValueError::new_err(format!("percentile {p} is not from 0 to 100")))
    }
}

#[pymethods]
impl Histogram {
    /// The latency segment ("end_to_end", "compute", ...), or what `merge` made of two.
    #[getter]
    fn segment(&self) -> &str {
        &self.segment
    }

    /// Values recorded.
    #[getter]
    fn count(&self) -> u64 {
        self.h.len()
    }

    fn __len__(&self) -> usize {
        self.h.len() as usize
    }

    /// Smallest value recorded (ns; 0 when empty).
    #[getter]
    fn min(&self) -> u64 {
        if self.h.is_empty() { 0 } else { self.h.min() }
    }

    /// Largest value recorded (ns; 0 when empty).
    #[getter]
    fn max(&self) -> u64 {
        self.h.max()
    }

    /// Mean of the values (ns, at the histogram's resolution).
    #[getter]
    fn mean(&self) -> f64 {
        self.h.mean()
    }

    #[getter]
    fn stdev(&self) -> f64 {
        self.h.stdev()
    }

    /// The value (ns) at percentile `p` (0 to 100): `percentile(99.9)`.
    fn percentile(&self, p: f64) -> PyResult<u64> {
        Ok(self.h.value_at_percentile(check_percentile(p)?))
    }

    /// `{p: value_ns}` for each percentile in `ps` (default 50, 90, 99, 99.9, 99.99, 100).
    #[pyo3(signature = (ps=None))]
    fn percentiles(&self, ps: Option<Vec<f64>>) -> PyResult<Vec<(f64, u64)>> {
        let ps = ps.unwrap_or_else(|| vec![50.0, 90.0, 99.0, 99.9, 99.99, 100.0]);
        ps.into_iter().map(|p| Ok((p, self.h.value_at_percentile(check_percentile(p)?)))).collect()
    }

    /// The percentile distribution, as HdrHistogram's reports print it:
    /// `[(percentile, value_ns), ...]` with `ticks_per_half` steps per
    /// halving of the distance to 100% — what a latency-by-percentile plot
    /// draws (x: 1 / (1 - percentile / 100) on a log scale).
    #[pyo3(signature = (ticks_per_half=5))]
    fn distribution(&self, ticks_per_half: u32) -> PyResult<Vec<(f64, u64)>> {
        if ticks_per_half == 0 {
            return Err(PyValueError::new_err("ticks_per_half must be at least 1"));
        }
        Ok(self
            .h
            .iter_quantiles(ticks_per_half)
            .map(|v| (v.quantile_iterated_to() * 100.0, v.value_iterated_to()))
            .collect())
    }

    /// Every recorded value bucket: `[(value_ns, count), ...]`, ascending
    /// (a histogram plot: `plt.bar` or `numpy.repeat`).
    fn buckets(&self) -> Vec<(u64, u64)> {
        self.h.iter_recorded().map(|v| (v.value_iterated_to(), v.count_at_value())).collect()
    }

    /// A new histogram holding the values of both (e.g. two appliances' end to end).
    fn merge(&self, other: &Histogram) -> PyResult<Histogram> {
        let mut h = self.h.clone();
        h.add(&other.h).map_err(|e| PyValueError::new_err(format!("cannot merge the histograms: {e:?}")))?;
        let segment = if self.segment == other.segment {
            self.segment.clone()
        } else {
            format!("{}+{}", self.segment, other.segment)
        };
        Ok(Histogram { segment, h })
    }

    fn __add__(&self, other: &Histogram) -> PyResult<Histogram> {
        self.merge(other)
    }

    /// The histogram in the compressed V2 encoding, base64 (what
    /// HdrHistogram's interval logs hold; `hdrhistogram.HdrHistogram.decode`
    /// reads it).
    fn encode(&self) -> PyResult<String> {
        let mut bytes = Vec::new();
        V2DeflateSerializer::new()
            .serialize(&self.h, &mut bytes)
            .map_err(|e| PyValueError::new_err(format!("cannot encode the histogram: {e:?}")))?;
        Ok(BASE64_STANDARD.encode(bytes))
    }

    /// A histogram from `encode()`'s text (or any V2 encoding, base64).
    #[staticmethod]
    #[pyo3(signature = (text, segment="decoded"))]
    fn decode(text: &str, segment: &str) -> PyResult<Histogram> {
        let bytes = BASE64_STANDARD
            .decode(text.trim())
            .map_err(|e| PyValueError::new_err(format!("not base64: {e}")))?;
        let h: Hdr<u64> = Deserializer::new()
            .deserialize(&mut bytes.as_slice())
            .map_err(|e| PyValueError::new_err(format!("not an encoded histogram: {e:?}")))?;
        Ok(Histogram { segment: segment.to_string(), h })
    }

    fn __repr__(&self) -> String {
        format!(
            "Histogram(segment={:?}, count={}, p50={} ns, p99={} ns, max={} ns)",
            self.segment,
            self.h.len(),
            self.h.value_at_quantile(0.5),
            self.h.value_at_quantile(0.99),
            self.h.max()
        )
    }
}
