//! The host MPI's own RMA (`MPI_Win_*`, `MPI_Put`, …) through the `mpi` crate's raw ffi,
//! for the side-by-side runs (feature `mpi`).
//!
//! Every call goes straight to the C function the application would call; handles and
//! constants come from the ffi bindings so that MPICH (int handles, `MPI_Aint = long`) and
//! Open MPI (pointer handles, `MPI_Aint = isize`) both build.

use std::ffi::c_int;
use std::marker::PhantomData;
use std::ptr;
use std::sync::Arc;

use onesided::bootstrap::mpi::MpiBootstrap;
use onesided::mpi::ffi;
use onesided::mpi::raw::AsRaw;
use onesided::mpi::topology::{Color, Communicator, SimpleCommunicator};
use onesided::Comm;

use crate::backend::{BResult, Backend, BenchError, BenchWin, Elem, WinKind};

fn check(rc: c_int, call: &str) -> BResult<()> {
    if rc == ffi::MPI_SUCCESS as c_int {
        Ok(())
    } else {
        Err(BenchError(format!("{call} failed with MPI error {rc}")))
    }
}

/// Short name of the host MPI library: `mpich`, `openmpi`, or `mpi`.
pub fn library_name() -> String {
    let version = onesided::mpi::environment::library_version().unwrap_or_default();
    if version.contains("Open MPI") {
        "openmpi".into()
    } else if version.contains("MPICH") {
        "mpich".into()
    } else {
        "mpi".into()
    }
}

/// The host MPI library's version number (`4.0.2`, `5.0.11`): the first word of its
/// version string made of digits and dots that has a dot, after the library's name.
pub fn library_version() -> Option<String> {
    let text = onesided::mpi::environment::library_version().ok()?;
    version_number(&text)
}

/// The version number in an `MPI_Get_library_version` text (see [`library_version`]).
fn version_number(text: &str) -> Option<String> {
    text.split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .map(|w| w.trim_matches('.'))
        .find(|w| w.contains('.') && w.split('.').all(|p| !p.is_empty()))
        .map(str::to_owned)
}

/// The host MPI over a communicator.
pub struct MpiBackend {
    comm: SimpleCommunicator,
    harness: Comm,
    name: String,
    /// MPI provided `MPI_THREAD_MULTIPLE`: windows may be shared by threads.
    multiple: bool,
}

// SAFETY: an MpiWin is shared by threads only in the thread-flush benchmark, and only when
// MPI provided MPI_THREAD_MULTIPLE (`Backend::threads_supported`), under which every MPI
// call on the window may be made from any thread at once; the threads write disjoint
// slots of the origin buffers they own.
unsafe impl<T: Elem> Sync for MpiWin<T> {}

impl MpiBackend {
    /// Collective over `comm`: the backend over a duplicate of it. `multiple`: MPI was
    /// initialized with `MPI_THREAD_MULTIPLE`.
    pub fn new(comm: &SimpleCommunicator, multiple: bool) -> BResult<Self> {
        Ok(MpiBackend {
            comm: comm.duplicate(),
            // The harness waits inside MPI, as OSU's processes do: a passive target that
            // needs its CPU (MPICH over UCX) must progress while it sits in a harness barrier.
            harness: Comm::new(Arc::new(MpiBootstrap::new(comm)?.attentive())),
            name: library_name(),
            multiple,
        })
    }
}

/// Where a window's local memory came from, so that it is released the right way after
/// `MPI_Win_free`.
enum Memory<T> {
    /// Allocated by MPI_Win_allocate(_shared): freed with the window.
    Library,
    /// Ordinary process memory.
    Vec(Vec<T>),
    /// MPI_Alloc_mem memory: MPI_Free_mem after the window is gone.
    AllocMem,
}

/// A host-MPI window.
pub struct MpiWin<T: Elem> {
    win: ffi::MPI_Win,
    comm: ffi::MPI_Comm,
    dtype: ffi::MPI_Datatype,
    sum: ffi::MPI_Op,
    base: *mut T,
    len: usize,
    memory: Memory<T>,
    /// Displacement of element 0 at each rank (the attached address for dynamic windows).
    bases: Vec<ffi::MPI_Aint>,
    /// Displacement units per element (the element size for dynamic windows).
    scale: usize,
    /// Dynamic window: the memory is attached and must be detached before freeing.
    dynamic: bool,
    /// This process's rank in the window's group.
    rank: c_int,
    _elem: PhantomData<T>,
}

impl<T: Elem> MpiWin<T> {
    #[inline(always)]
    fn disp(&self, target: usize, elem: usize) -> ffi::MPI_Aint {
        self.bases.get(target).copied().unwrap_or(0) + (elem * self.scale) as ffi::MPI_Aint
    }
}

fn datatype<T: Elem>() -> ffi::MPI_Datatype {
    // SAFETY: the RSMPI_* handles are initialized constants of the linked MPI library.
    unsafe {
        if T::WIDE {
            ffi::RSMPI_UINT64_T
        } else {
            ffi::RSMPI_UINT8_T
        }
    }
}

impl Backend for MpiBackend {
    type Win<T: Elem> = MpiWin<T>;

    fn name(&self) -> &str {
        &self.name
    }

    fn comm(&self) -> &Comm {
        &self.harness
    }

    fn threads_supported(&self) -> bool {
        self.multiple
    }

    fn alltoallv(
        &self,
        send: &[u64],
        sendcounts: &[usize],
        sdispls: &[usize],
        recv: &mut [u64],
        recvcounts: &[usize],
        rdispls: &[usize],
    ) -> BResult<()> {
        let (sc, sd, rc, rd) = (
            c_ints(sendcounts),
            c_ints(sdispls),
            c_ints(recvcounts),
            c_ints(rdispls),
        );
        // SAFETY: the count and displacement arrays have one entry per rank and describe
        // blocks inside `send` and `recv` (checked by the caller's shape), which outlive this
        // blocking call.
        check(
            unsafe {
                ffi::MPI_Alltoallv(
                    send.as_ptr().cast(),
                    sc.as_ptr(),
                    sd.as_ptr(),
                    ffi::RSMPI_UINT64_T,
                    recv.as_mut_ptr().cast(),
                    rc.as_ptr(),
                    rd.as_ptr(),
                    ffi::RSMPI_UINT64_T,
                    self.comm.as_raw(),
                )
            },
            "MPI_Alltoallv",
        )
    }

    fn alltoallv_persistent(
        &self,
        send: &mut [u64],
        sendcounts: &[usize],
        sdispls: &[usize],
        recv: &mut [u64],
        recvcounts: &[usize],
        rdispls: &[usize],
        run: &mut dyn FnMut(&mut [u64], &mut dyn FnMut() -> BResult<()>) -> BResult<f64>,
    ) -> BResult<Option<f64>> {
        // MPI-4's MPI_Alltoallv_init, looked up at run time: MPICH 4.0 has it; Open MPI 4.1
        // has the same function as MPIX_Alltoallv_init (its pcollreq extension, declared in
        // mpi-ext.h, which the bindings do not cover).
        type Init = unsafe extern "C" fn(
            *const std::ffi::c_void,
            *const c_int,
            *const c_int,
            ffi::MPI_Datatype,
            *mut std::ffi::c_void,
            *const c_int,
            *const c_int,
            ffi::MPI_Datatype,
            ffi::MPI_Comm,
            ffi::MPI_Info,
            *mut ffi::MPI_Request,
        ) -> c_int;
        let Some((sym, name)) = [c"MPI_Alltoallv_init", c"MPIX_Alltoallv_init"]
            .into_iter()
            .map(|name| {
                // SAFETY: dlsym with a NUL-terminated name; RTLD_DEFAULT searches the
                // loaded MPI.
                let sym = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
                (sym, name)
            })
            .find(|(sym, _)| !sym.is_null())
        else {
            return Ok(None);
        };
        let name = name.to_str().unwrap_or("MPI_Alltoallv_init");
        // SAFETY: the symbol is MPI-4's MPI_Alltoallv_init or Open MPI's MPIX_ twin, whose C
        // signature (mpiext_pcollreq_c.h) is the same `Init`.
        let init: Init = unsafe { std::mem::transmute::<*mut libc::c_void, Init>(sym) };
        let (sc, sd, rc, rd) = (
            c_ints(sendcounts),
            c_ints(sdispls),
            c_ints(recvcounts),
            c_ints(rdispls),
        );
        // SAFETY: reads the link-time constant of the MPI library.
        let mut request = unsafe { ffi::RSMPI_REQUEST_NULL };
        let send_ptr = send.as_mut_ptr();
        // SAFETY: as for MPI_Alltoallv; the buffers and count arrays outlive the request,
        // which is freed below before this function returns.
        check(
            unsafe {
                init(
                    send_ptr.cast_const().cast(),
                    sc.as_ptr(),
                    sd.as_ptr(),
                    ffi::RSMPI_UINT64_T,
                    recv.as_mut_ptr().cast(),
                    rc.as_ptr(),
                    rd.as_ptr(),
                    ffi::RSMPI_UINT64_T,
                    self.comm.as_raw(),
                    ffi::RSMPI_INFO_NULL,
                    &mut request,
                )
            },
            name,
        )?;
        let mut start = || -> BResult<()> {
            // SAFETY: an inactive persistent request of this process.
            check(unsafe { ffi::MPI_Start(&mut request) }, "MPI_Start")?;
            // SAFETY: the request just started; the status is ignored.
            check(
                unsafe { ffi::MPI_Wait(&mut request, ffi::RSMPI_STATUS_IGNORE) },
                "MPI_Wait",
            )
        };
        let measured = run(send, &mut start);
        // SAFETY: the inactive persistent request created above.
        unsafe { ffi::MPI_Request_free(&mut request) };
        measured.map(Some)
    }

    fn library_barrier(&self) -> BResult<()> {
        // SAFETY: a live communicator of this backend; every process calls it collectively.
        check(
            unsafe { ffi::MPI_Barrier(self.comm.as_raw()) },
            "MPI_Barrier",
        )
    }

    fn known_defect(&self, bench: &str, kind: WinKind) -> Option<&'static str> {
        // Open MPI 4.1's osc/rdma (its component for MPI_Win_allocate on one node) crashes
        // the target in btl/vader when it handles an MPI_Compare_and_swap (seen here with
        // 4.1.4; also osu_cas_latency, open-mpi/ompi#11349).
        // `mpiexec --mca osc sm,pt2pt` (which reaches us as OMPI_MCA_osc) avoids osc/rdma.
        let rdma_possible = std::env::var("OMPI_MCA_osc").map_or(true, |c| c.contains("rdma"));
        (self.name == "openmpi"
            && rdma_possible
            && bench == "cas-latency"
            && kind == WinKind::Allocate)
            .then_some(
                "Open MPI 4.1 osc/rdma segfaults in MPI_Compare_and_swap (open-mpi/ompi#11349)",
            )
    }

    fn prefix(&self, ranks: usize) -> BResult<Option<Self>> {
        let me = self.comm.rank();
        let color = if (me as usize) < ranks {
            Color::with_value(0)
        } else {
            Color::undefined()
        };
        match self.comm.split_by_color(color) {
            None => Ok(None),
            Some(sub) => Ok(Some(MpiBackend {
                harness: Comm::from_mpi(&sub)?,
                comm: sub,
                name: self.name.clone(),
                multiple: self.multiple,
            })),
        }
    }

    type Mem<T: Elem> = UserMemory<T>;

    fn memory<T: Elem>(&self, kind: WinKind, len: usize) -> BResult<UserMemory<T>> {
        let bytes = (len * std::mem::size_of::<T>()) as ffi::MPI_Aint;
        Ok(match kind {
            WinKind::Allocate | WinKind::Shared => UserMemory {
                memory: Memory::Library,
                base: ptr::null_mut(),
            },
            WinKind::Create => {
                let mut v = vec![T::default(); len];
                UserMemory {
                    base: v.as_mut_ptr(),
                    memory: Memory::Vec(v),
                }
            }
            WinKind::CreateAllocmem | WinKind::Dynamic => {
                let mut base: *mut T = ptr::null_mut();
                // SAFETY: MPI_Alloc_mem writes the address of `bytes` bytes to `base`,
                // which are then zeroed (Pod elements) before anyone reads them.
                unsafe {
                    check(
                        ffi::MPI_Alloc_mem(
                            bytes,
                            ffi::RSMPI_INFO_NULL,
                            (&mut base as *mut *mut T).cast(),
                        ),
                        "MPI_Alloc_mem",
                    )?;
                    ptr::write_bytes(base, 0, len);
                }
                UserMemory {
                    memory: Memory::AllocMem,
                    base,
                }
            }
        })
    }

    fn window_over<T: Elem>(
        &self,
        kind: WinKind,
        len: usize,
        mem: UserMemory<T>,
    ) -> BResult<MpiWin<T>> {
        let elem = std::mem::size_of::<T>();
        let bytes = (len * elem) as ffi::MPI_Aint;
        // MPICH 4.0.2 misplaces a rank's memory in MPI_Win_allocate(_shared) when an
        // earlier rank's size is not a multiple of 16 bytes: the base it returns and the
        // address its RMA reaches differ by 8 bytes (seen with 4104-byte windows). Padding
        // every library-allocated window to whole cache lines avoids it.
        let library_bytes = ((len * elem).next_multiple_of(64)) as ffi::MPI_Aint;
        let comm = self.comm.as_raw();
        let UserMemory { memory, mut base } = mem;
        // SAFETY: plain MPI calls with valid arguments: out-pointers point at locals of the
        // right types, sizes match the buffers, and the memory handed to MPI_Win_create /
        // MPI_Win_attach stays alive (owned by the returned MpiWin) until MPI_Win_free.
        unsafe {
            let info = ffi::RSMPI_INFO_NULL;
            let mut win: ffi::MPI_Win = ffi::RSMPI_WIN_NULL;
            let mut bases = vec![0 as ffi::MPI_Aint; self.comm.size() as usize];
            let mut scale = 1;
            match kind {
                WinKind::Allocate => check(
                    ffi::MPI_Win_allocate(
                        library_bytes,
                        elem as c_int,
                        info,
                        comm,
                        (&mut base as *mut *mut T).cast(),
                        &mut win,
                    ),
                    "MPI_Win_allocate",
                )?,
                WinKind::Shared => check(
                    ffi::MPI_Win_allocate_shared(
                        library_bytes,
                        elem as c_int,
                        info,
                        comm,
                        (&mut base as *mut *mut T).cast(),
                        &mut win,
                    ),
                    "MPI_Win_allocate_shared",
                )?,
                WinKind::Create | WinKind::CreateAllocmem => check(
                    ffi::MPI_Win_create(base.cast(), bytes, elem as c_int, info, comm, &mut win),
                    "MPI_Win_create",
                )?,
                WinKind::Dynamic => {
                    check(
                        ffi::MPI_Win_create_dynamic(info, comm, &mut win),
                        "MPI_Win_create_dynamic",
                    )?;
                    check(
                        ffi::MPI_Win_attach(win, base.cast(), bytes),
                        "MPI_Win_attach",
                    )?;
                    let mut addr: ffi::MPI_Aint = 0;
                    check(
                        ffi::MPI_Get_address(base.cast_const().cast(), &mut addr),
                        "MPI_Get_address",
                    )?;
                    bases = self
                        .harness
                        .allgather(&[addr as i64])?
                        .into_iter()
                        .map(|a| a as ffi::MPI_Aint)
                        .collect();
                    scale = elem;
                }
            }
            if matches!(kind, WinKind::Allocate | WinKind::Shared) {
                // MPI leaves the memory of MPI_Win_allocate(_shared) uninitialised; the
                // benchmarks count on zeroed windows (flags start at 0), like every other
                // kind. Zeroed before the barrier that ends creation, so no peer's RMA
                // can come before it.
                ptr::write_bytes(base, 0, len);
                check(ffi::MPI_Barrier(comm), "MPI_Barrier")?;
            }
            Ok(MpiWin {
                win,
                comm,
                dtype: datatype::<T>(),
                sum: ffi::RSMPI_SUM,
                base,
                len,
                memory,
                bases,
                scale,
                dynamic: kind == WinKind::Dynamic,
                rank: self.comm.rank(),
                _elem: PhantomData,
            })
        }
    }
}

/// Application memory of a window before it is created (see [`Backend::memory`]).
pub struct UserMemory<T> {
    memory: Memory<T>,
    base: *mut T,
}

/// A host-MPI group (freed on drop).
pub struct MpiGroup(ffi::MPI_Group);

impl Drop for MpiGroup {
    fn drop(&mut self) {
        // SAFETY: a group this process created with MPI_Group_incl and still owns.
        unsafe { ffi::MPI_Group_free(&mut self.0) };
    }
}

/// Counts or displacements as the C ints of `MPI_Alltoallv`.
fn c_ints(v: &[usize]) -> Vec<c_int> {
    v.iter().map(|&x| x as c_int).collect()
}

fn count(len: usize) -> c_int {
    len as c_int
}

impl<T: Elem> BenchWin<T> for MpiWin<T> {
    type Group = MpiGroup;

    fn group(&self, ranks: &[usize]) -> BResult<MpiGroup> {
        let ranks: Vec<c_int> = ranks.iter().map(|&r| r as c_int).collect();
        // SAFETY: out-pointers to locals; `ranks` holds `ranks.len()` ints.
        unsafe {
            let mut all: ffi::MPI_Group = ffi::RSMPI_GROUP_NULL;
            check(ffi::MPI_Comm_group(self.comm, &mut all), "MPI_Comm_group")?;
            let mut sub: ffi::MPI_Group = ffi::RSMPI_GROUP_NULL;
            let rc = ffi::MPI_Group_incl(all, ranks.len() as c_int, ranks.as_ptr(), &mut sub);
            ffi::MPI_Group_free(&mut all);
            check(rc, "MPI_Group_incl")?;
            Ok(MpiGroup(sub))
        }
    }

    #[inline(always)]
    fn put(&self, src: &[T], target: usize, elem: usize) -> BResult<()> {
        let n = count(src.len());
        // SAFETY: `src` is valid for n elements of dtype; MPI_Put completes locally no
        // later than the synchronization the benchmark calls before `src` is touched again
        // (the borrow lives in the caller across that synchronization).
        check(
            unsafe {
                ffi::MPI_Put(
                    src.as_ptr().cast(),
                    n,
                    self.dtype,
                    target as c_int,
                    self.disp(target, elem),
                    n,
                    self.dtype,
                    self.win,
                )
            },
            "MPI_Put",
        )
    }

    #[inline(always)]
    fn get(&self, dst: &mut [T], target: usize, elem: usize) -> BResult<()> {
        let n = count(dst.len());
        // SAFETY: as for put; the benchmark reads `dst` only after synchronizing.
        check(
            unsafe {
                ffi::MPI_Get(
                    dst.as_mut_ptr().cast(),
                    n,
                    self.dtype,
                    target as c_int,
                    self.disp(target, elem),
                    n,
                    self.dtype,
                    self.win,
                )
            },
            "MPI_Get",
        )
    }

    #[inline(always)]
    fn acc_sum(&self, src: &[T], target: usize, elem: usize) -> BResult<()> {
        let n = count(src.len());
        // SAFETY: as for put.
        check(
            unsafe {
                ffi::MPI_Accumulate(
                    src.as_ptr().cast(),
                    n,
                    self.dtype,
                    target as c_int,
                    self.disp(target, elem),
                    n,
                    self.dtype,
                    self.sum,
                    self.win,
                )
            },
            "MPI_Accumulate",
        )
    }

    #[inline(always)]
    fn get_acc_sum(&self, src: &[T], result: &mut [T], target: usize, elem: usize) -> BResult<()> {
        let n = count(src.len());
        // SAFETY: as for put and get; `result` holds as many elements as `src`.
        check(
            unsafe {
                ffi::MPI_Get_accumulate(
                    src.as_ptr().cast(),
                    n,
                    self.dtype,
                    result.as_mut_ptr().cast(),
                    count(result.len()),
                    self.dtype,
                    target as c_int,
                    self.disp(target, elem),
                    n,
                    self.dtype,
                    self.sum,
                    self.win,
                )
            },
            "MPI_Get_accumulate",
        )
    }

    #[inline(always)]
    fn fetch_add(&self, value: &T, result: &mut T, target: usize, elem: usize) -> BResult<()> {
        // SAFETY: `value` and `result` are one element of dtype each; the trait's contract
        // (as MPI's) keeps both alive and untouched until the synchronization that
        // completes the operation, through which MPI may still write `result`.
        check(
            unsafe {
                ffi::MPI_Fetch_and_op(
                    (value as *const T).cast(),
                    (result as *mut T).cast(),
                    self.dtype,
                    target as c_int,
                    self.disp(target, elem),
                    self.sum,
                    self.win,
                )
            },
            "MPI_Fetch_and_op",
        )
    }

    #[inline(always)]
    fn cas(&self, new: &T, compare: &T, result: &mut T, target: usize, elem: usize) -> BResult<()> {
        // SAFETY: as for fetch_add.
        check(
            unsafe {
                ffi::MPI_Compare_and_swap(
                    (new as *const T).cast(),
                    (compare as *const T).cast(),
                    (result as *mut T).cast(),
                    self.dtype,
                    target as c_int,
                    self.disp(target, elem),
                    self.win,
                )
            },
            "MPI_Compare_and_swap",
        )
    }

    fn fence(&self) -> BResult<()> {
        // SAFETY: a live window.
        check(unsafe { ffi::MPI_Win_fence(0, self.win) }, "MPI_Win_fence")
    }

    fn post(&self, group: &MpiGroup) -> BResult<()> {
        // SAFETY: a live window and group.
        check(
            unsafe { ffi::MPI_Win_post(group.0, 0, self.win) },
            "MPI_Win_post",
        )
    }

    fn start(&self, group: &MpiGroup) -> BResult<()> {
        // SAFETY: a live window and group.
        check(
            unsafe { ffi::MPI_Win_start(group.0, 0, self.win) },
            "MPI_Win_start",
        )
    }

    fn complete(&self) -> BResult<()> {
        // SAFETY: a live window.
        check(
            unsafe { ffi::MPI_Win_complete(self.win) },
            "MPI_Win_complete",
        )
    }

    fn wait(&self) -> BResult<()> {
        // SAFETY: a live window.
        check(unsafe { ffi::MPI_Win_wait(self.win) }, "MPI_Win_wait")
    }

    fn lock(&self, exclusive: bool, target: usize) -> BResult<()> {
        let kind = if exclusive {
            ffi::MPI_LOCK_EXCLUSIVE
        } else {
            ffi::MPI_LOCK_SHARED
        };
        // SAFETY: a live window.
        check(
            unsafe { ffi::MPI_Win_lock(kind as c_int, target as c_int, 0, self.win) },
            "MPI_Win_lock",
        )
    }

    fn unlock(&self, target: usize) -> BResult<()> {
        // SAFETY: a live window.
        check(
            unsafe { ffi::MPI_Win_unlock(target as c_int, self.win) },
            "MPI_Win_unlock",
        )
    }

    fn lock_all(&self) -> BResult<()> {
        // SAFETY: a live window.
        check(
            unsafe { ffi::MPI_Win_lock_all(0, self.win) },
            "MPI_Win_lock_all",
        )
    }

    fn unlock_all(&self) -> BResult<()> {
        // SAFETY: a live window.
        check(
            unsafe { ffi::MPI_Win_unlock_all(self.win) },
            "MPI_Win_unlock_all",
        )
    }

    #[inline(always)]
    fn flush(&self, target: usize) -> BResult<()> {
        // SAFETY: a live window.
        check(
            unsafe { ffi::MPI_Win_flush(target as c_int, self.win) },
            "MPI_Win_flush",
        )
    }

    fn sync(&self) -> BResult<()> {
        // SAFETY: a live window.
        check(unsafe { ffi::MPI_Win_sync(self.win) }, "MPI_Win_sync")
    }

    fn read_local(&self, elem: usize, dst: &mut [T]) -> BResult<()> {
        if elem + dst.len() > self.len {
            return Err(BenchError("read_local out of range".into()));
        }
        // Read through MPI (a get from this process inside a lock of its own rank): what
        // the window holds in every memory model, whatever path MPI used to update it.
        let me = self.rank as usize;
        self.lock(false, me)?;
        let got = self.get(dst, me, elem);
        self.unlock(me)?;
        got
    }

    fn write_local(&self, elem: usize, src: &[T]) -> BResult<()> {
        if elem + src.len() > self.len {
            return Err(BenchError("write_local out of range".into()));
        }
        let me = self.rank as usize;
        self.lock(true, me)?;
        let put = self.put(src, me, elem);
        self.unlock(me)?;
        put
    }

    fn set_thread_scope(&self, on: bool) -> BResult<bool> {
        // No host MPI knows mpi_win_scope (MPI ignores unknown info keys), so its flushes
        // stay process-wide: only the process scope is in force.
        Ok(!on)
    }

    fn set_order(&self, on: bool) -> BResult<bool> {
        // mpi_win_order is seed 000's proposal: no host MPI orders puts (MPI ignores
        // unknown info keys), so only the unordered setting is in force.
        Ok(!on)
    }

    fn free(mut self) -> BResult<()> {
        // SAFETY: the window is live and every process calls free collectively; the memory
        // it exposed is released only after MPI_Win_free returned.
        unsafe {
            if self.dynamic {
                check(
                    ffi::MPI_Win_detach(self.win, self.base.cast()),
                    "MPI_Win_detach",
                )?;
            }
            check(ffi::MPI_Win_free(&mut self.win), "MPI_Win_free")?;
            match std::mem::replace(&mut self.memory, Memory::Library) {
                Memory::AllocMem => check(ffi::MPI_Free_mem(self.base.cast()), "MPI_Free_mem")?,
                Memory::Vec(v) => drop(v),
                Memory::Library => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::version_number;

    #[test]
    fn version_numbers_come_from_each_library_text() {
        let mpich = "MPICH Version:      4.0.2\nMPICH Release date: Thu May 26 15:51:45 CDT 2022";
        assert_eq!(version_number(mpich).as_deref(), Some("4.0.2"));
        let ompi = "Open MPI v5.0.11, package: Open MPI root@host Distribution, ident: 5.0.11";
        assert_eq!(version_number(ompi).as_deref(), Some("5.0.11"));
        assert_eq!(version_number("MPI 3 library").as_deref(), None);
    }
}
