//! The one error type of onesided.
//!
//! Every call that the MPI standard calls erroneous and that we can detect cheaply returns one
//! of these variants instead of invoking undefined behaviour or hanging.

use std::io;

/// Everything that can go wrong in onesided.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A rank argument is not a member of the window's (or communicator's) group.
    #[error("rank {rank} is not in the group of {size} processes")]
    InvalidRank {
        /// The offending rank.
        rank: usize,
        /// Number of processes in the group.
        size: usize,
    },

    /// An access does not fit the target's window (or attached region).
    #[error(
        "{op} of {len} bytes at displacement {disp} (disp_unit {disp_unit}) does not fit the \
         {size}-byte window of rank {target}"
    )]
    OutOfBounds {
        /// Operation name (`put`, `get`, ...).
        op: &'static str,
        /// Target rank.
        target: usize,
        /// Displacement as given by the caller, in units of the target's `disp_unit`.
        disp: usize,
        /// Displacement unit of the target, in bytes.
        disp_unit: usize,
        /// Length of the access in bytes.
        len: usize,
        /// Size of the target window in bytes.
        size: usize,
    },

    /// An RMA operation was issued to a target outside an access epoch that includes it.
    #[error("{op} to rank {target} outside an access epoch that includes that rank")]
    NoAccessEpoch {
        /// Operation name.
        op: &'static str,
        /// Target rank.
        target: usize,
    },

    /// A synchronization call conflicts with the epochs currently open at this process
    /// (for example `fence` inside a lock epoch, or `start` twice).
    #[error("{call}: {reason}")]
    EpochConflict {
        /// The synchronization call.
        call: &'static str,
        /// What conflicts.
        reason: &'static str,
    },

    /// `unlock`/`flush` of a target that this process has not locked.
    #[error("{call}: rank {target} is not locked by this process")]
    NotLocked {
        /// The call (`unlock`, `flush`, ...).
        call: &'static str,
        /// Target rank.
        target: usize,
    },

    /// `lock` of a target that this process has already locked in this window.
    #[error("lock: rank {target} is already locked by this process")]
    AlreadyLocked {
        /// Target rank.
        target: usize,
    },

    /// Passive-target synchronization on a window created with `no_locks=true`.
    #[error("{call}: the window was created with info no_locks=true")]
    LocksDisabled {
        /// The call.
        call: &'static str,
    },

    /// An assertion given to a synchronization call is false.
    #[error("{call}: assertion {assert} does not hold: {reason}")]
    AssertViolated {
        /// The call.
        call: &'static str,
        /// The assertion name (`NOPRECEDE`, ...).
        assert: &'static str,
        /// Why it does not hold.
        reason: &'static str,
    },

    /// An info value is not valid for its key.
    #[error("info key {key:?}: invalid value {value:?}: {reason}")]
    InvalidInfo {
        /// Info key.
        key: String,
        /// Offending value.
        value: String,
        /// Why the value is invalid.
        reason: String,
    },

    /// Access to dynamic-window memory that is not (or no longer) attached at the target.
    #[error("{op}: {len} bytes at address {addr:#x} are not attached to the dynamic window at rank {target}")]
    NotAttached {
        /// Operation name.
        op: &'static str,
        /// Target rank.
        target: usize,
        /// Target address.
        addr: usize,
        /// Length in bytes.
        len: usize,
    },

    /// `detach` of memory that was never attached.
    #[error("detach: no region is attached at address {addr:#x}")]
    DetachUnknown {
        /// The address given to detach.
        addr: usize,
    },

    /// `attach` of memory that overlaps an already attached region.
    #[error("attach: region {addr:#x}+{len} overlaps an attached region")]
    AttachOverlap {
        /// Address of the new region.
        addr: usize,
        /// Length of the new region.
        len: usize,
    },

    /// The per-process table of attached regions is full.
    #[error("attach: the window already has {capacity} attached regions (info onesided_max_attached_regions, or ONESIDED_MAX_ATTACHED_REGIONS for every window)")]
    TooManyRegions {
        /// Table capacity.
        capacity: usize,
    },

    /// A call that only applies to some window flavors was made on another flavor.
    #[error("{call} is not valid on a window of flavor {flavor}")]
    WrongFlavor {
        /// The call.
        call: &'static str,
        /// The flavor of the window.
        flavor: &'static str,
    },

    /// An accumulate operation is not defined for this element type (e.g. `band` on `f64`),
    /// or not allowed in this call (e.g. `no_op` in `accumulate`).
    #[error("{call}: operation {op} is not valid for element type {ty}")]
    InvalidOp {
        /// The call.
        call: &'static str,
        /// The operation.
        op: &'static str,
        /// The element type.
        ty: &'static str,
    },

    /// An accumulate-type operation on a window that asserts
    /// `mpi_assert_accumulate_intrinsic` would not be done by the origin's CPU atomics
    /// (see [`crate::Window::op_intrinsic`]); nothing was changed.
    #[error("{call} on rank {target}: not intrinsic ({reason}), but the window asserts mpi_assert_accumulate_intrinsic")]
    NotIntrinsic {
        /// The call.
        call: &'static str,
        /// Target rank.
        target: usize,
        /// Why the target's memory needs more than CPU atomics.
        reason: &'static str,
    },

    /// An operation through a window of a memory handle that its owner has released
    /// (or a second release of it).
    #[error("the memory handle of rank {target} was released")]
    MemhandleReleased {
        /// The owner of the handle.
        target: usize,
    },

    /// A notified operation (or a counter query) names a notification counter the
    /// process does not have (see `Window::set_num_notify`).
    #[error("{op}: rank {target} has {count} notification counters, no index {idx}")]
    InvalidNotification {
        /// The call.
        op: &'static str,
        /// The rank whose counter was named.
        target: usize,
        /// The index given.
        idx: usize,
        /// Counters that rank has.
        count: usize,
    },

    /// Origin and target layouts describe different amounts of data.
    #[error("{op}: the origin layout has {origin} bytes but the target layout {target}")]
    LayoutMismatch {
        /// Operation name.
        op: &'static str,
        /// Bytes described by the origin layout.
        origin: usize,
        /// Bytes described by the target layout.
        target: usize,
    },

    /// A request-based operation outside a passive-target epoch.
    #[error("{op}: request-based RMA needs a passive-target (lock/lock_all) epoch that includes rank {target}")]
    RequestOutsidePassiveEpoch {
        /// Operation name.
        op: &'static str,
        /// Target rank.
        target: usize,
    },

    /// An argument is invalid in a way not covered by a more specific variant.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// A count argument is negative or overflows (`MPI_ERR_COUNT`; only a C binding's
    /// signed counts can be negative).
    #[error("invalid count: {0}")]
    InvalidCount(String),

    /// A displacement is negative, or a displacement unit not positive (`MPI_ERR_DISP`).
    #[error("invalid displacement: {0}")]
    InvalidDisplacement(String),

    /// A window size is negative (`MPI_ERR_SIZE`).
    #[error("invalid size: {0}")]
    InvalidSize(String),

    /// The call needs something this build or machine does not provide yet (for example a
    /// window over processes on several nodes before the inter-node transport exists).
    #[error("unsupported: {0}")]
    Unsupported(String),

    /// A libfabric call or a network operation failed (feature `ofi`).
    #[error("{call}: {text} (libfabric error {code})")]
    Network {
        /// The libfabric call, or `operation` for an operation that completed in error.
        call: &'static str,
        /// The libfabric error number (positive; 0 where libfabric gave none).
        code: i32,
        /// `fi_strerror`'s text.
        text: String,
    },

    /// A collective call failed at another process; this process returns without effect.
    #[error("{call}: failed at another process of the group")]
    PeerFailed {
        /// The collective call.
        call: &'static str,
    },

    /// A datatype (of a binding's run-time types) that is not valid for the call.
    #[error("invalid datatype: {0}")]
    InvalidDatatype(String),

    /// `allocate_shared` over processes that share no memory (they are on several nodes).
    #[error("{call}: the processes are on several nodes and share no memory")]
    NotShareable {
        /// The call.
        call: &'static str,
    },

    /// An operating-system call failed.
    #[error("{call}: {source}")]
    Os {
        /// The system call or action.
        call: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// The bootstrap (process-management) layer failed or is misconfigured.
    #[error("bootstrap: {0}")]
    Bootstrap(String),

    /// /dev/shm cannot hold a shared-memory segment of this size: its space is reserved
    /// when the segment is created, so a window that does not fit fails here instead of
    /// killing the process with SIGBUS at its first touch.
    #[error(
        "/dev/shm has {available} bytes free but a shared-memory segment of {requested} bytes \
         is needed (make /dev/shm larger, e.g. `docker run --shm-size`, or use less memory)"
    )]
    SharedMemoryFull {
        /// Bytes the segment needs.
        requested: usize,
        /// Bytes /dev/shm had free when the reservation failed.
        available: u64,
    },

    /// Processes made different collective calls (or a different number of them) on one
    /// communicator or window; every process of the collective gets this error.
    #[error(
        "collective mismatch: this process called `{call}` (collective #{seq} of its \
         communicator or window) but rank {rank} called `{other}` (#{other_seq}); collective \
         calls must be made in the same order at every process"
    )]
    CollectiveMismatch {
        /// This process's call.
        call: &'static str,
        /// Its sequence number.
        seq: u64,
        /// A process that made another call.
        rank: usize,
        /// That process's call.
        other: &'static str,
        /// Its sequence number.
        other_seq: u64,
    },

    /// Two processes wait for each other in collectives of different communicators or
    /// windows: neither can ever complete.
    #[error(
        "{call}: rank {rank} waits for this process in `{other}` on another communicator or \
         window, and this process waits for rank {rank} here: collective calls are made in \
         different orders"
    )]
    CollectiveDeadlock {
        /// This process's call.
        call: &'static str,
        /// The process it waits for.
        rank: usize,
        /// The collective that process is blocked in.
        other: &'static str,
    },

    /// A member of the window exited while this process waited in a synchronization that
    /// did not complete within a second of it (an origin's completion, a post, a lock it
    /// held, a notification): the wait could never end.
    #[error("rank {rank} exited while this process waited on a synchronization of the window")]
    PeerGone {
        /// The rank (in the window) that exited.
        rank: usize,
    },

    /// A process that a collective waits for has exited without entering it.
    #[error("{call}: rank {rank} exited without entering this collective call")]
    PeerExited {
        /// The collective call.
        call: &'static str,
        /// The rank (in the communicator or window) that exited.
        rank: usize,
    },

    /// The launcher aborted the job (another rank failed).
    #[error("the job was aborted by the launcher because another rank failed")]
    JobAborted,

    /// Launching ranks failed.
    #[error("launch: {0}")]
    Launch(String),
}

/// Result type of onesided.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// Wraps an OS error with the name of the failing call.
    pub(crate) fn os(call: &'static str, source: impl Into<io::Error>) -> Self {
        Error::Os {
            call,
            source: source.into(),
        }
    }
}

impl From<rustix::io::Errno> for Error {
    fn from(e: rustix::io::Errno) -> Self {
        Error::os("system call", io::Error::from(e))
    }
}

/// The MPI error class of an [`Error`] (MPI-4.1 §9.4, Table 9.1): what `MPI_Error_class`
/// returns for the code a C binding hands out. The numbers are the binding's (they differ
/// between the MPICH ABI and the MPI-5 standard ABI); this names the class.
///
/// ```
/// use onesided::{Error, ErrorClass};
/// let e = Error::NotLocked { call: "unlock", target: 1 };
/// assert_eq!(e.mpi_class(), ErrorClass::RmaSync);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorClass {
    /// `MPI_ERR_RANK`: a rank outside the group.
    Rank,
    /// `MPI_ERR_ARG`: an argument not covered by a more specific class.
    Arg,
    /// `MPI_ERR_COUNT`: an invalid count argument.
    Count,
    /// `MPI_ERR_DISP`: an invalid displacement or displacement unit.
    Disp,
    /// `MPI_ERR_SIZE`: an invalid window size.
    Size,
    /// `MPI_ERR_TYPE`: a datatype (or layout) that does not fit the operation.
    Type,
    /// `MPI_ERR_OP`: an operation not valid here.
    Op,
    /// `MPI_ERR_WIN`: an invalid window (or memory handle).
    Win,
    /// `MPI_ERR_ASSERT`: an invalid assertion argument.
    Assert,
    /// `MPI_ERR_INFO_VALUE`: an info value not valid for its key.
    InfoValue,
    /// `MPI_ERR_NO_MEM`: memory (or shared memory) exhausted.
    NoMem,
    /// `MPI_ERR_RMA_SYNC`: a call outside or in conflict with the epochs it needs.
    RmaSync,
    /// `MPI_ERR_RMA_RANGE`: an access outside the target's window.
    RmaRange,
    /// `MPI_ERR_RMA_ATTACH`: memory that cannot be attached to (or detached from) a dynamic
    /// window.
    RmaAttach,
    /// `MPI_ERR_RMA_SHARED`: shared memory that cannot be provided.
    RmaShared,
    /// `MPI_ERR_RMA_FLAVOR`: a call not valid for the window's flavor.
    RmaFlavor,
    /// `MPI_ERR_UNSUPPORTED_OPERATION`: a valid request this implementation cannot serve.
    UnsupportedOperation,
    /// `MPI_ERR_PROC_ABORTED`: a process the call needs has ended.
    ProcAborted,
    /// `MPI_ERR_OTHER`: everything else (system and network failures, the bootstrap).
    Other,
}

impl Error {
    /// The MPI error class of this error (what a C binding reports through the window's
    /// error handler).
    pub fn mpi_class(&self) -> ErrorClass {
        use ErrorClass as C;
        match self {
            Error::InvalidRank { .. } => C::Rank,
            Error::OutOfBounds { .. } | Error::NotAttached { .. } => C::RmaRange,
            Error::NoAccessEpoch { .. }
            | Error::EpochConflict { .. }
            | Error::NotLocked { .. }
            | Error::AlreadyLocked { .. }
            | Error::LocksDisabled { .. }
            | Error::AssertViolated { .. }
            | Error::RequestOutsidePassiveEpoch { .. } => C::RmaSync,
            Error::InvalidInfo { .. } => C::InfoValue,
            Error::DetachUnknown { .. }
            | Error::AttachOverlap { .. }
            | Error::TooManyRegions { .. } => C::RmaAttach,
            Error::WrongFlavor { .. } => C::RmaFlavor,
            Error::NotShareable { .. } => C::RmaShared,
            Error::InvalidOp { .. } | Error::NotIntrinsic { .. } => C::Op,
            Error::MemhandleReleased { .. } => C::Win,
            Error::InvalidNotification { .. }
            | Error::InvalidArgument(_)
            | Error::CollectiveMismatch { .. } => C::Arg,
            Error::LayoutMismatch { .. } | Error::InvalidDatatype(_) => C::Type,
            Error::InvalidCount(_) => C::Count,
            Error::InvalidDisplacement(_) => C::Disp,
            Error::InvalidSize(_) => C::Size,
            Error::Unsupported(_) => C::UnsupportedOperation,
            Error::SharedMemoryFull { .. } => C::NoMem,
            Error::Os { source, .. } if source.raw_os_error() == Some(libc_enomem()) => C::NoMem,
            Error::PeerGone { .. } | Error::PeerExited { .. } | Error::JobAborted => C::ProcAborted,
            Error::Network { .. }
            | Error::PeerFailed { .. }
            | Error::Os { .. }
            | Error::Bootstrap(_)
            | Error::CollectiveDeadlock { .. }
            | Error::Launch(_) => C::Other,
        }
    }
}

/// ENOMEM of this platform.
fn libc_enomem() -> i32 {
    rustix::io::Errno::NOMEM.raw_os_error()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_follow_the_standard() {
        let cases = [
            (Error::InvalidRank { rank: 3, size: 2 }, ErrorClass::Rank),
            (
                Error::OutOfBounds {
                    op: "put",
                    target: 0,
                    disp: 9,
                    disp_unit: 8,
                    len: 8,
                    size: 64,
                },
                ErrorClass::RmaRange,
            ),
            (
                Error::NoAccessEpoch {
                    op: "get",
                    target: 1,
                },
                ErrorClass::RmaSync,
            ),
            (Error::AlreadyLocked { target: 0 }, ErrorClass::RmaSync),
            (Error::DetachUnknown { addr: 16 }, ErrorClass::RmaAttach),
            (
                Error::NotShareable {
                    call: "allocate_shared",
                },
                ErrorClass::RmaShared,
            ),
            (
                Error::Unsupported("x".into()),
                ErrorClass::UnsupportedOperation,
            ),
            (Error::PeerGone { rank: 1 }, ErrorClass::ProcAborted),
            (Error::InvalidCount("-1".into()), ErrorClass::Count),
            (Error::InvalidDisplacement("-1".into()), ErrorClass::Disp),
            (Error::InvalidSize("-1".into()), ErrorClass::Size),
            (
                Error::os("mmap", io::Error::from_raw_os_error(libc_enomem())),
                ErrorClass::NoMem,
            ),
            (
                Error::os("open", io::Error::from_raw_os_error(2)),
                ErrorClass::Other,
            ),
        ];
        for (error, class) in cases {
            assert_eq!(error.mpi_class(), class, "{error}");
        }
    }
}
