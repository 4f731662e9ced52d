//! Shared-memory primitives: segments and the dissemination barrier.

pub(crate) mod barrier;
pub(crate) mod segment;
