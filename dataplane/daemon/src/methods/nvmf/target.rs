//! What every nvmf method looks up and checks first: the one target, an
//! NVM subsystem or discovery by NQN, SPDK's `tgt_name`, and how a
//! feature this target lacks is refused.

use std::sync::Arc;

use nvmf_tgt::{Subsystem, Target, DISCOVERY_NQN};

use crate::app::NvmfState;
use crate::rpc::error::{ErrorKind, RpcError};

/// The NQN a listener call names: the discovery subsystem also goes by
/// `discovery`, as on SPDK's command line.
pub(crate) fn resolve_nqn(nqn: &str) -> &str {
    if nqn == "discovery" {
        DISCOVERY_NQN
    } else {
        nqn
    }
}

/// SPDK's default namespace limit of a subsystem (`max_namespaces` 0).
pub(crate) const DEFAULT_MAX_NAMESPACES: u32 = 32;
/// The controller ids this target hands out (SPDK's default range).
pub(crate) const MIN_CNTLID: u16 = 1;
pub(crate) const MAX_CNTLID: u16 = 0xffef;

/// The refusal of a parameter naming a feature this target lacks.
pub(crate) fn unsupported(what: &str) -> RpcError {
    RpcError::invalid_params(format!("{what} is not supported by rackcache-dataplane"))
}

/// There is one target; SPDK's `tgt_name` selects among several.
pub(crate) fn check_tgt_name(tgt_name: &Option<String>) -> Result<(), RpcError> {
    match tgt_name {
        None => Ok(()),
        Some(n) => Err(RpcError::new(
            ErrorKind::InvalidParams,
            format!("NVMf target '{n}' not found (this daemon has one, unnamed target)"),
        )),
    }
}

pub(crate) fn target(nvmf: &NvmfState) -> Result<&Target, RpcError> {
    nvmf.target.as_ref().ok_or_else(|| {
        RpcError::invalid_params("no NVMe-oF transport: create it first with nvmf_create_transport")
    })
}

/// The NVM subsystem `nqn` (not discovery), with SPDK's message if absent.
pub(crate) fn subsystem(nvmf: &NvmfState, nqn: &str) -> Result<Arc<Subsystem>, RpcError> {
    nvmf.target
        .as_ref()
        .and_then(|t| t.subsystem(nqn))
        .filter(|s| !s.is_discovery)
        .ok_or_else(|| {
            RpcError::new(
                ErrorKind::InvalidParams,
                format!("Subsystem with NQN '{nqn}' not found"),
            )
        })
}

/// A subsystem that takes listeners: an NVM subsystem or discovery.
pub(crate) fn listenable(nvmf: &NvmfState, nqn: &str) -> Result<Arc<Subsystem>, RpcError> {
    if nqn == DISCOVERY_NQN {
        return target(nvmf)?
            .subsystem(DISCOVERY_NQN)
            .ok_or_else(|| RpcError::new(ErrorKind::Internal, "no discovery subsystem"));
    }
    subsystem(nvmf, nqn)
}
