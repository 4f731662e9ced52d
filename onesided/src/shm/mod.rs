//! Shared-memory primitives: segments, job liveness and the dissemination barrier.

pub(crate) mod barrier;
pub(crate) mod fork;
pub mod heap;
pub(crate) mod liveness;
pub(crate) mod segment;
