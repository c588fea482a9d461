//! The transport decision: whether the appliance ingests over RDMA or UDP,
//! taken through the [`Verbs`] trait so that every kind of failure (no
//! library, no device, bad address, port down, registration refused) can be
//! driven in tests, and the one-line reason for falling back to UDP.

use super::config::{RdmaConfig, Transport};
use std::fmt;
use std::os::fd::RawFd;
use thiserror::Error;

/// The memory a ring lives in, as registration sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RingRegion {
    /// Host memory (anonymous mapping or page-locked, device-mapped memory):
    /// registered with `ibv_reg_mr`.
    Host { addr: u64, len: usize },
    /// `cuMemAlloc`'d GPU memory with the outcome of its dma-buf export
    /// (the descriptor, or why the export failed).
    Device { dptr: u64, len: usize, dmabuf: Result<RawFd, NoDmabuf> },
}

/// Why a GPU ring has no dma-buf to register (registration then tries
/// nvidia-peermem).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum NoDmabuf {
    /// The ring was not exported; build GPU rings with
    /// [`crate::rdma::GpuFrameRing`], which exports them.
    #[error("the ring memory was not exported as a dma-buf")]
    NotExported,
    /// The export (`cuMemGetHandleForAddressRange`) failed with this CUDA
    /// error; a driver with dma-buf support (and the open kernel modules)
    /// provides it.
    #[error("{reason}")]
    ExportFailed {
        /// The CUDA error, as the driver reported it.
        reason: String,
    },
}

/// A shared library the dynamic loader refused, with the loader's message
/// (`dlerror`); install the library or add its directory to the loader path.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{message}")]
pub struct LibraryNotLoadable {
    /// The loader's message, naming the library.
    pub message: String,
}

/// How the ring was registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RegistrationMethod {
    /// `ibv_reg_mr` on host memory.
    HostMemory,
    /// `ibv_reg_dmabuf_mr` on the GPU memory's dma-buf.
    DmaBuf,
    /// `ibv_reg_mr` on the device pointer, resolved by nvidia-peermem.
    PeerMem,
}

impl RegistrationMethod {
    pub fn describe(self) -> &'static str {
        match self {
            RegistrationMethod::HostMemory => "host memory (ibv_reg_mr)",
            RegistrationMethod::DmaBuf => "GPU memory through dma-buf (ibv_reg_dmabuf_mr)",
            RegistrationMethod::PeerMem => "GPU memory through nvidia-peermem (ibv_reg_mr)",
        }
    }
}

/// One registration step that failed, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedStep {
    pub step: &'static str,
    pub why: String,
}

/// Every registration step tried, in order, each with its failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistrationFailure(pub Vec<FailedStep>);

impl fmt::Display for RegistrationFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, s) in self.0.iter().enumerate() {
            write!(f, "{}{} failed ({})", if i == 0 { "" } else { "; then " }, s.step, s.why)?;
        }
        Ok(())
    }
}

/// Step names, as the reasons quote them.
pub const STEP_HOST_REG: &str = "ibv_reg_mr of the host ring";
pub const STEP_DMABUF_EXPORT: &str = "dma-buf export of the GPU ring (cuMemGetHandleForAddressRange)";
pub const STEP_DMABUF_REG: &str = "ibv_reg_dmabuf_mr";
pub const STEP_PEERMEM_REG: &str = "ibv_reg_mr on the device pointer (needs the nvidia-peermem module)";

/// Why RDMA cannot be used here; each message says what to change.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RdmaUnavailable {
    #[error("frameloop was built without RDMA support (cargo feature `rdma`); rebuild with it")]
    NotBuilt,
    #[error(
        "the RDMA user-space libraries are not installed ({0}); install rdma-core's libraries (Debian/Ubuntu: ibverbs-providers librdmacm1)"
    )]
    NoLibrary(#[source] LibraryNotLoadable),
    #[error("no RDMA device: {0}")]
    NoDevice(String),
    #[error("RDMA device {wanted:?} (rdma.device) not found; devices here: {found}")]
    DeviceNotFound { wanted: String, found: String },
    #[error("rdma.listen {listen}: {why}")]
    Listen { listen: String, why: String },
    #[error("port {port} of {device} is {state}; bring the link up or set rdma.port")]
    PortNotActive { device: String, port: u8, state: String },
    #[error("rdma.gid_index {index} on {device} port {port}: {why}")]
    Gid { device: String, port: u8, index: i32, why: String },
    #[error("the frame ring could not be registered with {device}: {failure}")]
    Registration { device: String, failure: RegistrationFailure },
}

/// The verbs operations the decision needs. The sideway implementation
/// opens real devices; tests use a fake that fails where told to.
pub trait Verbs {
    /// An opened device with its protection domain and rdma_cm listener.
    type Device;
    /// A registered memory region.
    type Region;
    /// Why a registration was refused (its text goes into the reason).
    type Error: fmt::Display;

    /// Loads the library, finds the device, binds the listener and checks
    /// the port and GID.
    fn open(&self, cfg: &RdmaConfig) -> Result<Self::Device, RdmaUnavailable>;
    /// Name of an opened device, for messages.
    fn device_name(&self, dev: &Self::Device) -> String;
    /// `ibv_reg_mr` on host memory.
    fn register_host(&self, dev: &Self::Device, addr: u64, len: usize) -> Result<Self::Region, Self::Error>;
    /// `ibv_reg_dmabuf_mr` on a dma-buf; the region is addressed remotely from `iova`.
    fn register_dmabuf(
        &self,
        dev: &Self::Device,
        fd: RawFd,
        len: usize,
        iova: u64,
    ) -> Result<Self::Region, Self::Error>;
    /// `ibv_reg_mr` on a device pointer (nvidia-peermem).
    fn register_device_address(
        &self,
        dev: &Self::Device,
        dptr: u64,
        len: usize,
    ) -> Result<Self::Region, Self::Error>;
}

/// What to ingest with.
#[derive(Debug)]
pub enum Decision<D, R> {
    /// UDP, with the one-line reason.
    Udp { reason: String },
    /// RDMA over an opened device with the ring registered.
    Rdma { device: D, region: R, method: RegistrationMethod },
}

/// Registers `ring` in the order dma-buf, nvidia-peermem (device memory) or
/// plain (host memory), collecting every failed step.
pub fn register<V: Verbs>(
    verbs: &V,
    dev: &V::Device,
    ring: &RingRegion,
) -> Result<(V::Region, RegistrationMethod), RegistrationFailure> {
    let fail = |step, why: String| FailedStep { step, why };
    match ring {
        RingRegion::Host { addr, len } => verbs
            .register_host(dev, *addr, *len)
            .map(|r| (r, RegistrationMethod::HostMemory))
            .map_err(|why| RegistrationFailure(vec![fail(STEP_HOST_REG, why.to_string())])),
        RingRegion::Device { dptr, len, dmabuf } => {
            let mut failed = Vec::new();
            match dmabuf {
                Ok(fd) => match verbs.register_dmabuf(dev, *fd, *len, *dptr) {
                    Ok(r) => return Ok((r, RegistrationMethod::DmaBuf)),
                    Err(why) => failed.push(fail(STEP_DMABUF_REG, why.to_string())),
                },
                Err(why) => failed.push(fail(STEP_DMABUF_EXPORT, why.to_string())),
            }
            match verbs.register_device_address(dev, *dptr, *len) {
                Ok(r) => Ok((r, RegistrationMethod::PeerMem)),
                Err(why) => {
                    failed.push(fail(STEP_PEERMEM_REG, why.to_string()));
                    Err(RegistrationFailure(failed))
                }
            }
        }
    }
}

/// Decides the transport: `udp` takes UDP; `rdma` opens the device and
/// registers the ring or fails with the reason; `auto` does the same but
/// takes UDP, with the reason, where `rdma` would fail.
pub fn decide<V: Verbs>(
    verbs: &V,
    transport: Transport,
    cfg: &RdmaConfig,
    ring: &RingRegion,
) -> Result<Decision<V::Device, V::Region>, RdmaUnavailable> {
    if transport == Transport::Udp {
        return Ok(Decision::Udp { reason: "ingest.transport = \"udp\"".into() });
    }
    let attempt = verbs.open(cfg).and_then(|device| match register(verbs, &device, ring) {
        Ok((region, method)) => Ok(Decision::Rdma { device, region, method }),
        Err(failure) => Err(RdmaUnavailable::Registration { device: verbs.device_name(&device), failure }),
    });
    match (attempt, transport) {
        (Ok(d), _) => Ok(d),
        (Err(why), Transport::Auto) => Ok(Decision::Udp { reason: format!("RDMA not usable: {why}") }),
        (Err(why), _) => Err(why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// A fake verbs layer: `open` returns `open_result`, each registration
    /// succeeds only if named in `accepts`; every call is logged.
    struct FakeVerbs {
        open_result: Result<(), RdmaUnavailable>,
        accepts: &'static [&'static str],
        calls: RefCell<Vec<String>>,
    }

    /// A registration the fake refused.
    #[derive(Debug)]
    struct Refused(String);

    impl fmt::Display for Refused {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(&self.0)
        }
    }

    impl FakeVerbs {
        fn new(open_result: Result<(), RdmaUnavailable>, accepts: &'static [&'static str]) -> Self {
            Self { open_result, accepts, calls: RefCell::new(Vec::new()) }
        }
        fn try_step(&self, step: &str, detail: String) -> Result<String, Refused> {
            self.calls.borrow_mut().push(format!("{step} {detail}"));
            if self.accepts.contains(&step) {
                Ok(format!("mr:{step}"))
            } else {
                Err(Refused(format!("{step} refused: Operation not supported")))
            }
        }
    }

    impl Verbs for FakeVerbs {
        type Device = &'static str;
        type Region = String;
        type Error = Refused;
        fn open(&self, _cfg: &RdmaConfig) -> Result<&'static str, RdmaUnavailable> {
            self.calls.borrow_mut().push("open".into());
            self.open_result.clone().map(|()| "mlx5_0")
        }
        fn device_name(&self, dev: &&'static str) -> String {
            dev.to_string()
        }
        fn register_host(&self, _: &&'static str, addr: u64, len: usize) -> Result<String, Refused> {
            self.try_step("host", format!("{addr:#x}+{len}"))
        }
        fn register_dmabuf(
            &self,
            _: &&'static str,
            fd: RawFd,
            len: usize,
            iova: u64,
        ) -> Result<String, Refused> {
            self.try_step("dmabuf", format!("fd{fd}+{len}@{iova:#x}"))
        }
        fn register_device_address(
            &self,
            _: &&'static str,
            dptr: u64,
            len: usize,
        ) -> Result<String, Refused> {
            self.try_step("peermem", format!("{dptr:#x}+{len}"))
        }
    }

    const HOST: RingRegion = RingRegion::Host { addr: 0x1000, len: 4096 };

    fn gpu_ring(dmabuf: Result<RawFd, NoDmabuf>) -> RingRegion {
        RingRegion::Device { dptr: 0x7000_0000, len: 2 << 20, dmabuf }
    }

    fn reason<D: fmt::Debug, R: fmt::Debug>(d: Decision<D, R>) -> String {
        match d {
            Decision::Udp { reason } => reason,
            other => panic!("expected UDP, got {other:?}"),
        }
    }

    #[test]
    fn udp_is_taken_without_touching_the_verbs() {
        let v = FakeVerbs::new(Ok(()), &["host"]);
        let d = decide(&v, Transport::Udp, &RdmaConfig::default(), &HOST).unwrap();
        assert_eq!(reason(d), "ingest.transport = \"udp\"");
        assert!(v.calls.borrow().is_empty());
    }

    #[test]
    fn each_open_failure_falls_back_with_auto_and_fails_with_rdma() {
        let failures = [
            RdmaUnavailable::NotBuilt,
            RdmaUnavailable::NoLibrary(LibraryNotLoadable {
                message: "libibverbs.so.1: cannot open shared object file".into(),
            }),
            RdmaUnavailable::NoDevice("ibv_get_device_list found none".into()),
            RdmaUnavailable::DeviceNotFound { wanted: "mlx5_9".into(), found: "mlx5_0, mlx5_1".into() },
            RdmaUnavailable::Listen { listen: "0.0.0.0:7471".into(), why: "wildcard".into() },
            RdmaUnavailable::PortNotActive { device: "mlx5_0".into(), port: 1, state: "down".into() },
            RdmaUnavailable::Gid { device: "mlx5_0".into(), port: 1, index: 7, why: "RoCEv1".into() },
        ];
        for failure in failures {
            let v = FakeVerbs::new(Err(failure.clone()), &["host"]);
            let r = reason(decide(&v, Transport::Auto, &RdmaConfig::default(), &HOST).unwrap());
            assert_eq!(r, format!("RDMA not usable: {failure}"));
            assert!(!r.contains('\n'), "one line: {r}");
            assert_eq!(*v.calls.borrow(), ["open"], "no registration after a failed open");
            let v = FakeVerbs::new(Err(failure.clone()), &["host"]);
            assert_eq!(decide(&v, Transport::Rdma, &RdmaConfig::default(), &HOST).unwrap_err(), failure);
        }
    }

    #[test]
    fn host_ring_registers_with_reg_mr() {
        let v = FakeVerbs::new(Ok(()), &["host"]);
        match decide(&v, Transport::Rdma, &RdmaConfig::default(), &HOST).unwrap() {
            Decision::Rdma { region, method, .. } => {
                assert_eq!(region, "mr:host");
                assert_eq!(method, RegistrationMethod::HostMemory);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(*v.calls.borrow(), ["open", "host 0x1000+4096"]);
    }

    #[test]
    fn refused_host_registration_names_the_step() {
        let v = FakeVerbs::new(Ok(()), &[]);
        let r = reason(decide(&v, Transport::Auto, &RdmaConfig::default(), &HOST).unwrap());
        assert_eq!(
            r,
            "RDMA not usable: the frame ring could not be registered with mlx5_0: ibv_reg_mr of the host ring \
             failed (host refused: Operation not supported)"
        );
    }

    #[test]
    fn device_ring_prefers_dmabuf() {
        let v = FakeVerbs::new(Ok(()), &["dmabuf", "peermem"]);
        match decide(&v, Transport::Rdma, &RdmaConfig::default(), &gpu_ring(Ok(42))).unwrap() {
            Decision::Rdma { method, .. } => assert_eq!(method, RegistrationMethod::DmaBuf),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            *v.calls.borrow(),
            ["open", "dmabuf fd42+2097152@0x70000000"],
            "iova is the device pointer"
        );
    }

    #[test]
    fn device_ring_falls_back_to_peermem_when_dmabuf_is_refused_or_not_exported() {
        for dmabuf in [Ok(42), Err(NoDmabuf::ExportFailed { reason: "CUDA_ERROR_NOT_SUPPORTED".into() })] {
            let v = FakeVerbs::new(Ok(()), &["peermem"]);
            match decide(&v, Transport::Rdma, &RdmaConfig::default(), &gpu_ring(dmabuf)).unwrap() {
                Decision::Rdma { method, .. } => assert_eq!(method, RegistrationMethod::PeerMem),
                other => panic!("{other:?}"),
            }
            assert_eq!(v.calls.borrow().last().unwrap(), "peermem 0x70000000+2097152");
        }
    }

    #[test]
    fn device_ring_failure_names_every_step_in_order() {
        let v = FakeVerbs::new(Ok(()), &[]);
        let err = decide(&v, Transport::Rdma, &RdmaConfig::default(), &gpu_ring(Ok(42))).unwrap_err();
        let RdmaUnavailable::Registration { device, failure } = &err else { panic!("{err:?}") };
        assert_eq!(device, "mlx5_0");
        let steps: Vec<_> = failure.0.iter().map(|s| s.step).collect();
        assert_eq!(steps, [STEP_DMABUF_REG, STEP_PEERMEM_REG]);

        let v = FakeVerbs::new(Ok(()), &[]);
        let r = reason(
            decide(
                &v,
                Transport::Auto,
                &RdmaConfig::default(),
                &gpu_ring(Err(NoDmabuf::ExportFailed { reason: "no dma-buf support".into() })),
            )
            .unwrap(),
        );
        assert_eq!(
            r,
            format!(
                "RDMA not usable: the frame ring could not be registered with mlx5_0: {STEP_DMABUF_EXPORT} failed \
                 (no dma-buf support); then {STEP_PEERMEM_REG} failed (peermem refused: Operation not supported)"
            )
        );
    }
}
