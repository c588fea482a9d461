//! Latency benchmark of the CUDA backend against launch-per-frame baselines.
