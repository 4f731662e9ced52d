//! Persistent collectives built on RMA windows.

pub(crate) mod alltoallv;
