//! Window attributes (MPI-4.1 §12.2.6): how the memory came to be, the memory model, and how
//! the window records where each rank's memory is.

use std::fmt;

/// How a window's memory came to be (MPI_WIN_CREATE_FLAVOR).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Flavor {
    /// [`Window::allocate`](crate::Window::allocate): memory allocated by onesided.
    Allocate,
    /// [`Window::create`](crate::Window::create): memory provided by the user.
    Create,
    /// [`Window::create_dynamic`](crate::Window::create_dynamic): memory attached and detached at run time.
    Dynamic,
    /// [`Window::allocate_shared`](crate::Window::allocate_shared): memory all ranks can load and store directly.
    Shared,
}

impl Flavor {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Flavor::Allocate => "allocate",
            Flavor::Create => "create",
            Flavor::Dynamic => "dynamic",
            Flavor::Shared => "shared",
        }
    }
}

impl fmt::Display for Flavor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Memory model of a window (MPI_WIN_MODEL).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemoryModel {
    /// Public and private copies are the same memory (every onesided window).
    Unified,
    /// Public and private copies are separate.
    Separate,
}

/// How a window records where every rank's memory is ([`Window::layout`](crate::RawWindow::layout)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WindowLayout {
    /// Same size and displacement unit everywhere: rank r's memory is at a fixed stride in
    /// its node's segment; O(1) metadata per process and window (\[Gerstenberger13\]
    /// §2.2). Across nodes where every rank registers its node's segment under one key,
    /// addressed by offset (providers that let us choose keys: `tcp`, `udp`).
    Symmetric,
    /// One (address, size, disp_unit) record per rank: O(p) metadata per process.
    PerRank,
    /// Dynamic window: per-target region tables, cached on use.
    Dynamic,
}
