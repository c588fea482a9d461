//! The framing the datagram fuzz targets read their input in: a 2-byte
//! big-endian length before each datagram (the last one cut short where
//! the input ends).

/// The datagrams of `data`, in order.
pub fn datagrams(mut data: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        if data.len() < 2 {
            return None;
        }
        let len = u16::from_be_bytes([data[0], data[1]]) as usize;
        let end = (2 + len).min(data.len());
        let datagram = &data[2..end];
        data = &data[end..];
        Some(datagram)
    })
}
