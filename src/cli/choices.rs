//! The choices the command line offers (`--backend`, `--pattern`, ...):
//! clap's view of the library's enums, each turned into the library's own
//! type once parsed. The variants' doc comments are the `--help` text.

/// Declares a command-line choice mirroring a library enum variant by
/// variant, and the conversion into the library's enum.
macro_rules! choice {
    ($(#[$meta:meta])* $name:ident => $lib:ty { $($(#[$vmeta:meta])* $variant:ident,)+ }) => {
        $(#[$meta])*
        #[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl From<$name> for $lib {
            fn from(choice: $name) -> Self {
                match choice {
                    $($name::$variant => <$lib>::$variant,)+
                }
            }
        }
    };
}

choice! {
    /// Which consumer runs the chain (`--backend`).
    BackendChoice => frameloop::config::BackendChoice {
        /// CUDA when a usable GPU and NVRTC are present, host otherwise.
        Auto,
        /// CPU threads with the operators' reference implementations.
        Host,
        /// The GPU-resident graph.
        Cuda,
    }
}

choice! {
    /// How frames reach the appliance (`send --transport`).
    Transport => frameloop::rdma::Transport {
        /// RDMA when a device is usable and the ring registers with it, UDP
        /// otherwise (saying why in one log line).
        Auto,
        /// RDMA only: start-up fails, with the reason, when RDMA is not usable.
        Rdma,
        /// UDP only.
        Udp,
    }
}

choice! {
    /// What `frameloop send` puts on the wire (`--format`).
    SendFormat => frameloop::sender::hsb::SendFormat {
        /// frameloop's native datagrams (48-byte header, docs/wire-format.md).
        Native,
        /// The emulated HSB sensor bridge: 16-byte big-endian header (counter,
        /// offset, frame length, last-datagram flag), one stream, for an
        /// appliance with `[handler]` = handlers/hsb_ready.cu (docs/operators.md).
        Hsb,
    }
}

choice! {
    /// How the sender fills frame payloads (`--pattern`).
    Pattern => frameloop::sender::Pattern {
        /// Each 8-byte word holds its word index, the stream id and the low 16
        /// bits of the frame sequence.
        Counter,
        /// Pseudo-random words seeded by stream and frame sequence (splitmix64).
        Random,
        /// Every frame of every stream carries frame 0 of stream 0's `counter`
        /// payload, written once: a load generator that spends nothing per frame
        /// on content (for throughput runs where no receiver checks the bytes).
        Static,
    }
}

choice! {
    /// Whether to use UDP generic segmentation offload (`--gso`).
    GsoMode => frameloop::sender::GsoMode {
        /// Use GSO when the kernel accepts it, otherwise one datagram per message.
        Auto,
        /// Require GSO; stop with an error if the kernel refuses it.
        On,
        /// Never use GSO.
        Off,
    }
}

choice! {
    /// How the sender waits for a frame's due time (`--pacing`).
    Pacing => frameloop::sender::Pacing {
        /// Sleep until [`SPIN_NS`] before the due time, then spin on the clock:
        /// each frame leaves within a microsecond or so of its time, at the cost
        /// of a core kept busy whenever frames are less than [`SPIN_NS`] apart.
        Spin,
        /// Only sleep (with 1 µs timer slack): frames may leave tens of
        /// microseconds late, but the sender leaves the CPU to others between
        /// sends. For throughput runs on machines with few cores, where a
        /// spinning sender takes a core from the receiver.
        Sleep,
    }
}

choice! {
    /// Which frames the appliance is expected to answer (`--expect-actuation`).
    ExpectActuation => frameloop::sender::ExpectActuation {
        /// Every frame, once per output: frames without a message count as missing.
        Every,
        /// Some frames (outputs sending on detection or on a user flag): nothing
        /// counts as missing.
        Some,
    }
}
