//! User code on the GPU: the checks and compilation of a user's CUDA source
//! ([`source`]), a user kernel as a chain operator ([`kernel`]) and a user
//! data-ready handler ([`handler`]).

pub mod handler;
pub mod kernel;
pub mod source;
