//! The transport decision against this machine's real RDMA stack (none on
//! CI: no libibverbs, no device): `auto` takes UDP with a one-line reason
//! and leaves the ring's writer to the UDP receiver; `rdma` fails with the
//! same reason; `udp` never looks.

use frameloop::rdma::{IngestPlan, RdmaConfig, RdmaError, RdmaUnavailable, Transport, select_ingest};
use frameloop::ring::layout::ring_bytes;
use frameloop::ring::{FrameRing, HostMemory, OverrunPolicy};
use std::sync::Arc;

fn host_ring() -> Arc<FrameRing> {
    let mem = HostMemory::new(ring_bytes(4, 4096).unwrap()).unwrap();
    FrameRing::new(Box::new(mem), 4, 4096, OverrunPolicy::Every).unwrap()
}

fn roce_config() -> RdmaConfig {
    RdmaConfig { listen: "127.0.0.1:7471".into(), ..Default::default() }
}

/// Whether this machine can use RDMA at all (then these tests have nothing to check).
fn rdma_present() -> bool {
    std::path::Path::new("/sys/class/infiniband").read_dir().is_ok_and(|mut d| d.next().is_some())
}

#[test]
fn rdma_fails_naming_why_and_auto_falls_back_to_udp_with_that_reason() {
    if rdma_present() {
        eprintln!("an RDMA device is present; the fallback cannot be observed here");
        return;
    }
    let ring = host_ring();
    let err = select_ingest(Transport::Rdma, &roce_config(), &ring).unwrap_err();
    let RdmaError::Unavailable(why) = &err else { panic!("expected an availability error, got {err}") };
    assert!(
        matches!(
            why,
            RdmaUnavailable::NoLibrary(_) | RdmaUnavailable::NoDevice(_) | RdmaUnavailable::NotBuilt
        ),
        "without a device the decision stops before registration: {why:?}"
    );
    assert!(err.to_string().starts_with("ingest.transport = \"rdma\" but RDMA is not usable: "), "{err}");
    assert!(ring.writer().is_some(), "a failed RDMA start leaves the writer to UDP");

    let ring = host_ring();
    match select_ingest(Transport::Auto, &roce_config(), &ring).unwrap() {
        IngestPlan::Udp { reason } => {
            eprintln!("fallback: {reason}");
            assert_eq!(reason, format!("RDMA not usable: {why}"));
            assert!(!reason.contains('\n'), "one log line: {reason}");
        }
        other => panic!("expected UDP, got {other:?}"),
    }
    assert!(ring.writer().is_some(), "UDP takes the ring's writer after the fallback");
}

#[test]
fn auto_with_the_default_wildcard_listen_address_still_falls_back() {
    if rdma_present() {
        return;
    }
    let ring = host_ring();
    let plan = select_ingest(Transport::Auto, &RdmaConfig::default(), &ring).unwrap();
    assert!(
        matches!(plan, IngestPlan::Udp { ref reason } if reason.starts_with("RDMA not usable: ")),
        "{plan:?}"
    );
}

#[test]
fn udp_is_taken_without_probing() {
    let ring = host_ring();
    match select_ingest(Transport::Udp, &roce_config(), &ring).unwrap() {
        IngestPlan::Udp { reason } => assert_eq!(reason, "ingest.transport = \"udp\""),
        other => panic!("expected UDP, got {other:?}"),
    }
    assert!(ring.writer().is_some());
}
