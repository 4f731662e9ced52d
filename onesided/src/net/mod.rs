//! The network layer: the protocols of windows whose ranks span nodes, written against the
//! transport's network interface (`transport::network`: its terms and the endpoint's
//! operations, whichever network serves them) and built on the window layer below.
//!
//! - [`plane`]: the control plane over the network — every control word of a window
//!   across nodes, changed with network atomics (or CPU atomics for this node's words
//!   where the provider's atomics mix with them);
//! - [`across`]: creation of `allocate`, `create` and dynamic windows over ranks of
//!   several nodes (the node segments, the registrations, the plane);
//! - [`atomics`]: accumulates and atomics through the network's own atomics, and the
//!   element-wise fallback where it has none.
//!
//! The window layer does not name this one: it holds a window's plane as a
//! `win::net_control::NetControl` and creates windows across nodes through the functions
//! [`register`] hands it (`win::create::AcrossNodes`) when the process joins its job
//! (`universe`, the one registration point). The communication and synchronization layers
//! above (`rma`, `sync`) call [`atomics`] directly.

pub(crate) mod across;
pub(crate) mod atomics;
pub(crate) mod plane;

/// Registers the network layer's window creation with the window layer (idempotent).
pub(crate) fn register() {
    crate::win::create::register_across_nodes(crate::win::create::AcrossNodes {
        allocate: across::allocate,
        create: across::create,
        create_dynamic: across::create_dynamic,
    });
}
