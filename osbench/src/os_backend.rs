//! The onesided side of the benchmarks.

use onesided::{alloc_mem, Assert, Comm, Group, LockType, Op, WinBuffer, Window};

use crate::backend::{BResult, Backend, BenchError, BenchWin, Elem, WinKind};

/// onesided over a communicator.
pub struct OsBackend {
    comm: Comm,
}

impl OsBackend {
    /// The backend over `comm`.
    pub fn new(comm: Comm) -> Self {
        OsBackend { comm }
    }
}

/// A onesided window and how element indices become displacements.
pub struct OsWin<T: Elem> {
    win: Window<T>,
    /// Displacement of element 0 at each rank: the attached region's address for dynamic
    /// windows; empty (0 everywhere) for the others, so that `win-create` measures no
    /// table of the harness in a window's memory.
    bases: Vec<usize>,
    /// Displacement units per element: 1, or the element size for dynamic windows (whose
    /// displacements are byte addresses).
    scale: usize,
}

impl<T: Elem> OsWin<T> {
    #[inline(always)]
    fn disp(&self, target: usize, elem: usize) -> usize {
        // Out-of-range ranks index past `bases`: let the window report the error.
        self.bases.get(target).copied().unwrap_or(0) + elem * self.scale
    }
}

impl Backend for OsBackend {
    type Win<T: Elem> = OsWin<T>;

    fn name(&self) -> &str {
        "onesided"
    }

    fn comm(&self) -> &Comm {
        &self.comm
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
        Ok(onesided::alltoallv_two_sided(
            &self.comm, send, sendcounts, sdispls, recv, recvcounts, rdispls,
        )?)
    }

    fn library_barrier(&self) -> BResult<()> {
        // onesided's own barrier: its waits are inside the library (and need no target CPU).
        Ok(self.comm.barrier()?)
    }

    fn prefix(&self, ranks: usize) -> BResult<Option<Self>> {
        let me = self.comm.rank();
        let sub = self.comm.split((me < ranks).then_some(0), me)?;
        Ok(sub.map(OsBackend::new))
    }

    type Mem<T: Elem> = Option<WinBuffer<T>>;

    fn memory<T: Elem>(&self, kind: WinKind, len: usize) -> BResult<Option<WinBuffer<T>>> {
        Ok(match kind {
            WinKind::Allocate | WinKind::Shared => None,
            WinKind::Create => Some(vec![T::default(); len].into()),
            WinKind::CreateAllocmem | WinKind::Dynamic => Some(alloc_mem::<T>(len.max(1))?.into()),
        })
    }

    fn plain_cma_window<T: Elem>(&self, len: usize) -> BResult<Option<OsWin<T>>> {
        let info = onesided::WinInfo::new().target_service(false);
        let win = Window::builder(&self.comm)
            .info(&info)
            .create(WinBuffer::from(vec![T::default(); len]))?;
        Ok(Some(OsWin {
            win,
            bases: Vec::new(),
            scale: 1,
        }))
    }

    fn window_over<T: Elem>(
        &self,
        kind: WinKind,
        len: usize,
        mem: Option<WinBuffer<T>>,
    ) -> BResult<OsWin<T>> {
        let plain = |win| OsWin {
            win,
            bases: Vec::new(),
            scale: 1,
        };
        let missing = || BenchError(format!("{} window without memory", kind.name()));
        Ok(match kind {
            WinKind::Allocate => plain(Window::allocate(&self.comm, len)?),
            WinKind::Shared => plain(Window::allocate_shared(&self.comm, len)?),
            WinKind::Create | WinKind::CreateAllocmem => {
                plain(Window::create(&self.comm, mem.ok_or_else(missing)?)?)
            }
            WinKind::Dynamic => {
                let win = Window::create_dynamic(&self.comm)?;
                let region = win.attach(mem.ok_or_else(missing)?)?;
                let bases = self
                    .comm
                    .allgather(&[region.addr as u64])?
                    .into_iter()
                    .map(|a| a as usize)
                    .collect();
                OsWin {
                    win,
                    bases,
                    scale: std::mem::size_of::<T>(),
                }
            }
        })
    }
}

impl<T: Elem> BenchWin<T> for OsWin<T> {
    type Group = Group;

    fn group(&self, ranks: &[usize]) -> BResult<Group> {
        Ok(Group::new(ranks.iter().copied())?)
    }

    #[inline(always)]
    fn put(&self, src: &[T], target: usize, elem: usize) -> BResult<()> {
        Ok(self.win.put(src, target, self.disp(target, elem))?)
    }

    fn put_shared(&self, src: &std::sync::Arc<[T]>, target: usize, elem: usize) -> BResult<()> {
        Ok(self.win.put_shared(src, target, self.disp(target, elem))?)
    }

    #[inline(always)]
    fn get(&self, dst: &mut [T], target: usize, elem: usize) -> BResult<()> {
        Ok(self.win.get(dst, target, self.disp(target, elem))?)
    }

    #[inline(always)]
    fn acc_sum(&self, src: &[T], target: usize, elem: usize) -> BResult<()> {
        Ok(self
            .win
            .accumulate(src, target, self.disp(target, elem), Op::Sum)?)
    }

    #[inline(always)]
    fn get_acc_sum(&self, src: &[T], result: &mut [T], target: usize, elem: usize) -> BResult<()> {
        Ok(self
            .win
            .get_accumulate(src, result, target, self.disp(target, elem), Op::Sum)?)
    }

    #[inline(always)]
    fn fetch_add(&self, value: &T, result: &mut T, target: usize, elem: usize) -> BResult<()> {
        *result = self
            .win
            .fetch_and_op(*value, target, self.disp(target, elem), Op::Sum)?;
        Ok(())
    }

    #[inline(always)]
    fn cas(&self, new: &T, compare: &T, result: &mut T, target: usize, elem: usize) -> BResult<()> {
        *result = self
            .win
            .compare_and_swap(*new, *compare, target, self.disp(target, elem))?;
        Ok(())
    }

    fn fence(&self) -> BResult<()> {
        Ok(self.win.fence(Assert::NONE)?)
    }

    fn post(&self, group: &Group) -> BResult<()> {
        Ok(self.win.post(group, Assert::NONE)?)
    }

    fn start(&self, group: &Group) -> BResult<()> {
        Ok(self.win.start(group, Assert::NONE)?)
    }

    fn complete(&self) -> BResult<()> {
        Ok(self.win.complete()?)
    }

    fn wait(&self) -> BResult<()> {
        Ok(self.win.wait()?)
    }

    fn lock(&self, exclusive: bool, target: usize) -> BResult<()> {
        let kind = if exclusive {
            LockType::Exclusive
        } else {
            LockType::Shared
        };
        Ok(self.win.lock(kind, target, Assert::NONE)?)
    }

    fn unlock(&self, target: usize) -> BResult<()> {
        Ok(self.win.unlock(target)?)
    }

    fn lock_all(&self) -> BResult<()> {
        Ok(self.win.lock_all(Assert::NONE)?)
    }

    fn unlock_all(&self) -> BResult<()> {
        Ok(self.win.unlock_all()?)
    }

    #[inline(always)]
    fn flush(&self, target: usize) -> BResult<()> {
        Ok(self.win.flush(target)?)
    }

    fn sync(&self) -> BResult<()> {
        Ok(self.win.sync()?)
    }

    fn read_local(&self, elem: usize, dst: &mut [T]) -> BResult<()> {
        Ok(self.win.local_read(self.disp(self.win.rank(), elem), dst)?)
    }

    fn write_local(&self, elem: usize, src: &[T]) -> BResult<()> {
        Ok(self
            .win
            .local_write(self.disp(self.win.rank(), elem), src)?)
    }

    fn set_thread_scope(&self, on: bool) -> BResult<bool> {
        let scope = if on {
            onesided::WinScope::Thread
        } else {
            onesided::WinScope::Process
        };
        self.win.set_info(&onesided::WinInfo::new().scope(scope))?;
        Ok(self.win.hints().scope == scope)
    }

    fn set_num_notify(&self, n: usize) -> BResult<bool> {
        self.win.set_num_notify(n)?;
        Ok(true)
    }

    #[inline(always)]
    fn put_notify(&self, src: &[T], target: usize, elem: usize, idx: usize) -> BResult<()> {
        Ok(self
            .win
            .put_notify(src, target, self.disp(target, elem), idx)?)
    }

    fn wait_notify(&self, idx: usize, value: u64) -> BResult<()> {
        Ok(self.win.wait_notify(idx, value)?.wait()?)
    }

    fn set_order(&self, on: bool) -> BResult<bool> {
        self.win.set_info(&onesided::WinInfo::new().order(on))?;
        Ok(self.win.hints().order == on)
    }

    fn free(self) -> BResult<()> {
        // Returns (and here drops) the window memory, attached regions included.
        drop(self.win.free()?);
        Ok(())
    }
}
