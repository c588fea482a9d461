//! Wire formats: pure parsers and encoders over bytes, no I/O.

pub mod actuation;
pub mod hsb;
pub mod native;
pub mod rtp4175;
