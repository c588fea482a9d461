//! How a configured chain becomes the loop's workload: fused into the
//! data-ready handler where it fits, one tiled kernel per frame for large
//! frames where that measured faster, else one kernel per operator; and how
//! its values lie in the parameter banks for that choice.

use super::GpuError;
use super::executor::{chain_fragment, fused_shared_limit};
use super::fused::tiled::{
    FrameSource, LargePath, MEASURED, STREAMED, choose_large, plan_for, tiled_fragment,
};
use super::fused::{FusedChain, NotFused, plan_fusion};
use super::param_banks::ParamLayout;
use super::runtime::GpuRuntime;
use crate::config::FusedChainMode;
use crate::fragment::Fragment;
use crate::ops::OpSpec;

/// The workload of `chain` as the loop runs it: the fused chain inside the
/// handler when it can be fused (`mode`), else one kernel per operator;
/// `unfused` says why it must not be fused whatever its operators.
pub(super) fn plan_chain(
    rt: &GpuRuntime,
    chain: &[OpSpec],
    capacity: usize,
    mode: FusedChainMode,
    unfused: Option<&str>,
    streaming: bool,
) -> Result<(Fragment, Option<FusedChain>, ParamLayout), GpuError> {
    if let Some(what) = unfused {
        if mode == FusedChainMode::On {
            return Err(GpuError::Setup(format!(
                "loop.fused_chain = \"on\" but with {what} the chain runs one kernel per operator; \
                 set it to \"auto\" or \"off\""
            )));
        }
        tracing::info!("one kernel per operator in the graph's IF body: {what}");
        return Ok((chain_fragment(chain, capacity)?, None, ParamLayout::PerOperator));
    }
    let limit = fused_shared_limit(rt)?;
    match plan_fusion(chain, capacity, mode, false, limit) {
        Ok(_) if streaming => {
            tracing::info!(
                "one kernel per operator in the graph's IF body: frames stream into GPU memory while they \
                 arrive (loop.stream_to_gpu), which the chain fused into the data-ready handler cannot follow"
            );
            Ok((chain_fragment(chain, capacity)?, None, ParamLayout::PerOperator))
        }
        Ok(fused) => {
            tracing::info!("the data-ready handler runs the fused chain {}", fused.describe());
            Ok((Fragment::new("main"), Some(fused), ParamLayout::Steps))
        }
        Err(why) if mode == FusedChainMode::On => Err(GpuError::Setup(format!(
            "loop.fused_chain = \"on\" but the chain cannot be fused: {why}; set it to \"auto\""
        ))),
        Err(NotFused::LargeFrames { buffers, shared_limit }) => {
            let why = format!(
                "the chain's two sample buffers ({buffers} B) exceed one block's shared memory ({shared_limit} B)"
            );
            let encoded = FusedChain::encode(chain, capacity).map_err(|e| GpuError::Setup(e.to_string()))?;
            // A streamed frame is read from the staging buffer in device memory.
            let (source, table) = if streaming {
                (FrameSource::DeviceMemory, STREAMED)
            } else {
                (FrameSource::MappedSlot, MEASURED)
            };
            let (mut path, mut measured) = choose_large(capacity, table);
            if let Err(e) = plan_for(&encoded, limit, source) {
                (path, measured) = (LargePath::Graph, e.to_string());
            }
            match path {
                LargePath::Tiled => {
                    tracing::info!(
                        "loop.fused_chain = \"auto\": one tiled kernel per frame runs the chain {} ({why}; {measured})",
                        encoded.describe()
                    );
                    Ok((
                        tiled_fragment(encoded, source).map_err(|e| GpuError::Setup(e.to_string()))?,
                        None,
                        ParamLayout::Steps,
                    ))
                }
                LargePath::Graph => {
                    tracing::info!(
                        "loop.fused_chain = \"auto\": one kernel per operator ({why}; {measured})"
                    );
                    Ok((chain_fragment(chain, capacity)?, None, ParamLayout::PerOperator))
                }
            }
        }
        Err(why) => {
            tracing::info!("one kernel per operator in the graph's IF body: {why}");
            Ok((chain_fragment(chain, capacity)?, None, ParamLayout::PerOperator))
        }
    }
}
