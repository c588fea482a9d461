//! Fuzz target: any bytes as the two messages of the output socket's attach
//! handshake: the first 16 as the attach request a consumer sends the
//! appliance (`AttachRequest::decode`), the first 384 as the hello the
//! appliance answers with (`Hello::decode`, which refuses a hello that lies
//! about its sizes before anything is mapped). What decodes encodes back to
//! bytes that decode to the same message.
//! Seeds: `fuzz/seeds/output_handshake`.
#![no_main]

use frameloop::output::handshake::{AttachRequest, HELLO_BYTES, Hello, REQUEST_BYTES};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(bytes) = data.get(..REQUEST_BYTES) {
        let bytes: &[u8; REQUEST_BYTES] = bytes.try_into().expect("16 bytes");
        if let Some(request) = AttachRequest::decode(bytes) {
            assert_eq!(AttachRequest::decode(&request.encode()), Some(request));
            assert_eq!(request.encode()[..12], bytes[..12]);
        }
    }
    if let Some(bytes) = data.get(..HELLO_BYTES) {
        let bytes: &[u8; HELLO_BYTES] = bytes.try_into().expect("384 bytes");
        if let Ok(hello) = Hello::decode(bytes) {
            let again = Hello::decode(&hello.encode()).expect("an encoded hello decodes");
            match (&hello, &again) {
                // A refusal's text is cut to whole characters on encoding.
                (Hello::Refused(a), Hello::Refused(b)) => assert!(a.starts_with(b.as_str())),
                _ => assert_eq!(again, hello),
            }
            if let Hello::Accepted { geometry, .. } = &hello {
                assert!(geometry.control_bytes().is_some() && geometry.data_bytes().is_some());
            }
        }
    }
});
