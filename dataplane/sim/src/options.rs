//! Policy names as written on the command line: the engine's own parsers
//! (`engine::names`), shared with the dataplane's RPCs.

pub use engine::names::*;
