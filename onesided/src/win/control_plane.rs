//! Which control plane a window's protocols run on: the mapped control blocks when every
//! rank is on this node (`win::control`), the network when the window spans nodes
//! (the network layer's `net::plane`, in a build with a network), which the window holds as
//! a [`NetControl`]. Every protocol asks [`WinCore::plane`] — never the mapped blocks
//! directly — so it runs unchanged on either; the shared-memory-only refinements (parked
//! lock memberships) ask [`WindowPlane::is_mapped`] first.

use std::sync::atomic::Ordering;

use crate::error::Result;
use crate::plane::{Answer, ControlPlane, CtrlWord, PendingOp};
use crate::win::control::Control;
use crate::win::core::WinCore;
use crate::win::net_control::NetControl;

/// A window's control plane (see the module docs). Without the feature `ofi` it has one
/// variant, and every operation compiles to the mapped plane's CPU atomic.
#[derive(Debug, Clone, Copy)]
pub(crate) enum WindowPlane<'a> {
    /// Every rank on this node: CPU atomics on the mapped blocks.
    Mapped(&'a Control),
    /// Ranks on several nodes: network atomics for every word, this node's included.
    Net(&'a dyn NetControl),
}

impl WindowPlane<'_> {
    /// True on the mapped blocks (shared-memory refinements apply).
    #[inline(always)]
    pub(crate) fn is_mapped(self) -> bool {
        matches!(self, WindowPlane::Mapped(_))
    }
}

/// Forwards `$call` to the plane in force.
macro_rules! each {
    ($plane:expr, $p:ident => $call:expr) => {
        match $plane {
            WindowPlane::Mapped($p) => $call,
            WindowPlane::Net($p) => $call,
        }
    };
}

impl ControlPlane for WindowPlane<'_> {
    #[inline(always)]
    fn fetch_add(&self, word: CtrlWord, value: u64, order: Ordering) -> Answer {
        each!(self, p => p.fetch_add(word, value, order))
    }

    #[inline(always)]
    fn load(&self, word: CtrlWord, order: Ordering) -> Answer {
        each!(self, p => p.load(word, order))
    }

    #[inline(always)]
    fn swap(&self, word: CtrlWord, value: u64, order: Ordering) -> Answer {
        each!(self, p => p.swap(word, value, order))
    }

    #[inline(always)]
    fn compare_swap(&self, word: CtrlWord, expected: u64, new: u64, order: Ordering) -> Answer {
        each!(self, p => p.compare_swap(word, expected, new, order))
    }

    #[inline(always)]
    fn post_add(&self, word: CtrlWord, value: u64, order: Ordering) {
        each!(self, p => p.post_add(word, value, order))
    }

    #[inline(always)]
    fn post_store(&self, word: CtrlWord, value: u64, order: Ordering) {
        each!(self, p => p.post_store(word, value, order))
    }

    #[inline(always)]
    fn post_add_unawaited(&self, word: CtrlWord, value: u64, order: Ordering) {
        each!(self, p => p.post_add_unawaited(word, value, order))
    }

    #[inline(always)]
    fn post_store_unawaited(&self, word: CtrlWord, value: u64, order: Ordering) {
        each!(self, p => p.post_store_unawaited(word, value, order))
    }

    #[inline(always)]
    fn order_posted(&self) -> Result<()> {
        each!(self, p => p.order_posted())
    }

    fn poll(&self, op: &PendingOp) -> Result<Option<u64>> {
        each!(self, p => p.poll(op))
    }

    fn abandon(&self, op: PendingOp) {
        each!(self, p => p.abandon(op))
    }
}

impl WinCore {
    /// The control plane of this window's protocols.
    #[inline(always)]
    pub(crate) fn plane(&self) -> WindowPlane<'_> {
        if let Some(net) = &self.net {
            return WindowPlane::Net(&***net);
        }
        WindowPlane::Mapped(&self.ctrl)
    }
}
