//! UDP receiver (in progress)
