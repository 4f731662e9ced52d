//! What a benchmark needs from an RMA implementation, so that every benchmark loop is
//! written once and monomorphized for onesided and for the host MPI.

use std::fmt;

use onesided::{AccElement, Comm, Pod};

/// Failure of a benchmark step (an RMA call that returned an error, or data that did not
/// arrive as it should).
#[derive(Debug)]
pub struct BenchError(pub String);

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BenchError {}

impl From<onesided::Error> for BenchError {
    fn from(e: onesided::Error) -> Self {
        BenchError(e.to_string())
    }
}

/// Result of a benchmark step.
pub type BResult<T> = Result<T, BenchError>;

/// Element types the benchmarks move: bytes for put/get, 8-byte words for accumulates.
pub trait Elem: AccElement + Pod + Default + PartialEq + fmt::Debug + Send + Sync {
    /// True for `u64`, false for `u8` (the host-MPI side picks its datatype by it).
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    const WIDE: bool;
    /// The value `v` in this type (truncating).
    fn from_u64(v: u64) -> Self;
}

impl Elem for u8 {
    const WIDE: bool = false;
    #[inline(always)]
    fn from_u64(v: u64) -> Self {
        v as u8
    }
}

impl Elem for u64 {
    const WIDE: bool = true;
    #[inline(always)]
    fn from_u64(v: u64) -> Self {
        v
    }
}

/// Window kinds of the benchmarks (`--window`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, clap::ValueEnum)]
pub enum WinKind {
    /// `allocate`: the library allocates the memory.
    Allocate,
    /// `create` over ordinary process memory (a `Vec`).
    Create,
    /// `create` over memory from the library's `alloc_mem`.
    CreateAllocmem,
    /// `create_dynamic` with one `alloc_mem` region attached per process.
    Dynamic,
    /// `allocate_shared`.
    Shared,
}

impl WinKind {
    /// All kinds, in table order.
    pub const ALL: [WinKind; 5] = [
        WinKind::Allocate,
        WinKind::Create,
        WinKind::CreateAllocmem,
        WinKind::Dynamic,
        WinKind::Shared,
    ];

    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            WinKind::Allocate => "allocate",
            WinKind::Create => "create",
            WinKind::CreateAllocmem => "create-allocmem",
            WinKind::Dynamic => "dynamic",
            WinKind::Shared => "shared",
        }
    }
}

/// Synchronization modes of the communication benchmarks (`--sync`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, clap::ValueEnum)]
pub enum SyncMode {
    /// One exclusive lock for the whole run; every operation followed by `flush`.
    Flush,
    /// `lock`/`unlock` around every operation (shared for get, exclusive otherwise).
    Lock,
    /// `lock_all`/`unlock_all` around every operation.
    #[value(name = "lock_all")]
    LockAll,
    /// A `fence` of all processes after every operation.
    Fence,
    /// Origin `start`/`complete`, target `post`/`wait` around every operation.
    Pscw,
}

impl SyncMode {
    /// All modes, in table order.
    pub const ALL: [SyncMode; 5] = [
        SyncMode::Flush,
        SyncMode::Lock,
        SyncMode::LockAll,
        SyncMode::Fence,
        SyncMode::Pscw,
    ];

    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            SyncMode::Flush => "flush",
            SyncMode::Lock => "lock",
            SyncMode::LockAll => "lock_all",
            SyncMode::Fence => "fence",
            SyncMode::Pscw => "pscw",
        }
    }
}

/// An RMA implementation over a group of processes.
pub trait Backend: Sized {
    /// Its windows.
    type Win<T: Elem>: BenchWin<T> + Sync;
    /// Implementation name in tables and JSON (`onesided`, `mpich`, `openmpi`).
    fn name(&self) -> &str;
    /// Out-of-band collectives of the harness (never inside a timed loop).
    fn comm(&self) -> &Comm;
    /// Collective: the backend over the first `ranks` processes; `None` for the others.
    fn prefix(&self, ranks: usize) -> BResult<Option<Self>>;
    /// Memory the application provides for a `kind` window of `len` elements (a `Vec`, the
    /// library's `alloc_mem`; nothing for the kinds where the library allocates), so that
    /// creation can be timed without the allocator.
    type Mem<T: Elem>;
    /// Allocates the application memory of a `kind` window (not collective).
    fn memory<T: Elem>(&self, kind: WinKind, len: usize) -> BResult<Self::Mem<T>>;
    /// Collective: a `kind` window of `len` elements of `T` per process over `mem`.
    fn window_over<T: Elem>(
        &self,
        kind: WinKind,
        len: usize,
        mem: Self::Mem<T>,
    ) -> BResult<Self::Win<T>>;
    /// Collective: a window of `len` elements of `T` per process.
    fn window<T: Elem>(&self, kind: WinKind, len: usize) -> BResult<Self::Win<T>> {
        let mem = self.memory(kind, len)?;
        self.window_over(kind, len, mem)
    }
    /// Collective: a `create` window over ordinary memory whose operations are always the
    /// origin's own cross-memory-attach calls (onesided's `onesided_target_service=false`),
    /// the reference of `progress`; `None` where the implementation has no such mode.
    fn plain_cma_window<T: Elem>(&self, _len: usize) -> BResult<Option<Self::Win<T>>> {
        Ok(None)
    }
    /// Whether windows may be used by several threads at once (MPI: initialized with
    /// `MPI_THREAD_MULTIPLE`).
    fn threads_supported(&self) -> bool {
        true
    }
    /// Collective: a barrier during which the process is inside the library the whole
    /// time (`MPI_Barrier`), so that an implementation that needs the target's CPU to serve
    /// RMA gets it — what OSU's target does in its next synchronization call. The harness
    /// barrier of [`Backend::comm`] may back off outside the library instead.
    fn library_barrier(&self) -> BResult<()>;
    /// Collective: the implementation's two-sided alltoallv of u64 elements (onesided's
    /// bootstrap exchange; the host's `MPI_Alltoallv`), in `MPI_Alltoallv` argument order.
    #[allow(clippy::too_many_arguments)]
    fn alltoallv(
        &self,
        send: &[u64],
        sendcounts: &[usize],
        sdispls: &[usize],
        recv: &mut [u64],
        recvcounts: &[usize],
        rdispls: &[usize],
    ) -> BResult<()>;
    /// Collective: a persistent two-sided alltoallv (`MPI_Alltoallv_init`) over these
    /// buffers, when the implementation has one: `run` gets the send buffer (to fill before
    /// the first start) and one start+wait to time, and returns what it measured. `None`
    /// when there is no such call.
    #[allow(clippy::too_many_arguments, clippy::type_complexity)]
    fn alltoallv_persistent(
        &self,
        _send: &mut [u64],
        _sendcounts: &[usize],
        _sdispls: &[usize],
        _recv: &mut [u64],
        _recvcounts: &[usize],
        _rdispls: &[usize],
        _run: &mut dyn FnMut(&mut [u64], &mut dyn FnMut() -> BResult<()>) -> BResult<f64>,
    ) -> BResult<Option<f64>> {
        Ok(None)
    }
    /// Why `bench` cannot run on `kind` windows of this implementation (a known defect
    /// that would crash the job), if it cannot.
    fn known_defect(&self, _bench: &str, _kind: WinKind) -> Option<&'static str> {
        None
    }

    /// Whether this implementation has synchronization mode `sync` (the raw network
    /// baseline has only `flush`); the transfer benchmarks skip the others.
    fn supports_sync(&self, _sync: SyncMode) -> bool {
        true
    }
}

/// The RMA calls the benchmarks time. `elem` is an element index into the target's window
/// memory; each implementation turns it into its displacement (dynamic windows add the
/// target's region address).
pub trait BenchWin<T: Elem> {
    /// Group handle for post/start.
    type Group;
    /// A group of ranks for post/start.
    fn group(&self, ranks: &[usize]) -> BResult<Self::Group>;
    /// MPI_Put. As in MPI, `src` must stay alive and unchanged until the put completes
    /// (flush, unlock, complete or fence): an implementation may read it that late.
    fn put(&self, src: &[T], target: usize, elem: usize) -> BResult<()>;
    /// A put from a buffer the implementation may hold until the put completes
    /// (`--shared-buffers`): onesided's `Window::put_shared`; for the others, whose puts
    /// read the caller's buffer that late anyway, [`BenchWin::put`].
    fn put_shared(&self, src: &std::sync::Arc<[T]>, target: usize, elem: usize) -> BResult<()> {
        self.put(src, target, elem)
    }
    /// MPI_Get.
    fn get(&self, dst: &mut [T], target: usize, elem: usize) -> BResult<()>;
    /// MPI_Accumulate with MPI_SUM (`src` as for [`BenchWin::put`]).
    fn acc_sum(&self, src: &[T], target: usize, elem: usize) -> BResult<()>;
    /// MPI_Get_accumulate with MPI_SUM.
    fn get_acc_sum(&self, src: &[T], result: &mut [T], target: usize, elem: usize) -> BResult<()>;
    /// MPI_Fetch_and_op with MPI_SUM. As in MPI, `value` must not change and `result` is
    /// defined only after the next synchronization that completes the operation.
    fn fetch_add(&self, value: &T, result: &mut T, target: usize, elem: usize) -> BResult<()>;
    /// MPI_Compare_and_swap; buffers as for [`BenchWin::fetch_add`].
    fn cas(&self, new: &T, compare: &T, result: &mut T, target: usize, elem: usize) -> BResult<()>;
    /// MPI_Win_fence without assertions.
    fn fence(&self) -> BResult<()>;
    /// MPI_Win_post.
    fn post(&self, group: &Self::Group) -> BResult<()>;
    /// MPI_Win_start.
    fn start(&self, group: &Self::Group) -> BResult<()>;
    /// MPI_Win_complete.
    fn complete(&self) -> BResult<()>;
    /// MPI_Win_wait.
    fn wait(&self) -> BResult<()>;
    /// MPI_Win_lock.
    fn lock(&self, exclusive: bool, target: usize) -> BResult<()>;
    /// MPI_Win_unlock.
    fn unlock(&self, target: usize) -> BResult<()>;
    /// MPI_Win_lock_all.
    fn lock_all(&self) -> BResult<()>;
    /// MPI_Win_unlock_all.
    fn unlock_all(&self) -> BResult<()>;
    /// MPI_Win_flush.
    fn flush(&self, target: usize) -> BResult<()>;
    /// MPI_Win_sync.
    fn sync(&self) -> BResult<()>;
    /// Copies this process's window memory from element `elem` into `dst` (outside epochs
    /// that write it; the unified model makes stores visible after the harness barrier).
    fn read_local(&self, elem: usize, dst: &mut [T]) -> BResult<()>;
    /// Writes this process's window memory from element `elem`.
    fn write_local(&self, elem: usize, src: &[T]) -> BResult<()>;
    /// Collective: frees the window.
    /// Sets `mpi_win_scope` to `thread` (or back to `process`); collective. True when the
    /// implementation reports the value in force.
    fn set_thread_scope(&self, on: bool) -> BResult<bool>;
    /// Sets `mpi_win_order` (seed 000 §2.2: operations to one target complete there in
    /// issue order); collective. True when the implementation reports the value in force.
    fn set_order(&self, on: bool) -> BResult<bool>;
    /// Collective: `n` notification counters per process (notified RMA, seed 000 §5.1 and
    /// MPI 5's proposal). False when the implementation has no notified RMA.
    fn set_num_notify(&self, _n: usize) -> BResult<bool> {
        Ok(false)
    }
    /// Put, then count it at counter `idx` of the target.
    fn put_notify(&self, _src: &[T], _target: usize, _elem: usize, _idx: usize) -> BResult<()> {
        Err(BenchError("no notified RMA".into()))
    }
    /// Waits until this process's counter `idx` reached `value`.
    fn wait_notify(&self, _idx: usize, _value: u64) -> BResult<()> {
        Err(BenchError("no notified RMA".into()))
    }
    fn free(self) -> BResult<()>;
}
