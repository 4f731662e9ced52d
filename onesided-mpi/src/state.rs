//! What the library keeps between calls: the universe (joined in `MPI_Init`), the table of
//! windows behind our `MPI_Win` handles, and the memory `MPI_Alloc_mem` handed out.

use std::os::raw::c_int;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};

use onesided::{AllocMem, RawWindow, Universe};

use crate::abi::{self, MPI_Comm, MPI_Group, MPI_Win};

/// The universe, once `MPI_Init` joined the job.
pub(crate) static UNIVERSE: OnceLock<Universe> = OnceLock::new();

/// `MPI_ERRORS_ARE_FATAL`.
pub(crate) const ERRORS_ARE_FATAL: c_int = 0x5400_0000;
/// `MPI_ERRORS_RETURN`.
pub(crate) const ERRORS_RETURN: c_int = 0x5400_0001;

/// One window of the program.
pub(crate) struct Entry {
    pub win: RawWindow,
    /// The host communicator it was created over (aborts go to it).
    pub comm: MPI_Comm,
    /// The group of that communicator, to translate the groups of PSCW calls.
    pub group: MPI_Group,
    /// The window's error handler (an `MPI_Errhandler`).
    pub errhandler: AtomicI32,
    /// `MPI_Win_set_name`.
    pub name: Mutex<String>,
}

impl Entry {
    pub(crate) fn new(win: RawWindow, comm: MPI_Comm, group: MPI_Group) -> Entry {
        Entry {
            win,
            comm,
            group,
            errhandler: AtomicI32::new(ERRORS_ARE_FATAL),
            name: Mutex::new(String::new()),
        }
    }

    pub(crate) fn errhandler(&self) -> c_int {
        // Relaxed: set and read by the program's own calls, which order themselves.
        self.errhandler.load(Ordering::Relaxed)
    }
}

/// The windows, by handle index; freed slots are reused.
static WINDOWS: RwLock<Vec<Option<Arc<Entry>>>> = RwLock::new(Vec::new());

/// Puts `entry` in the table: its handle.
pub(crate) fn insert(entry: Entry) -> MPI_Win {
    let mut t = WINDOWS.write().unwrap_or_else(PoisonError::into_inner);
    let entry = Some(Arc::new(entry));
    let index = match t.iter().position(Option::is_none) {
        Some(i) => {
            t[i] = entry;
            i
        }
        None => {
            t.push(entry);
            t.len() - 1
        }
    };
    abi::window_handle(index)
}

/// The window behind `win`; `None` for a handle that is not one of ours, or freed.
pub(crate) fn window(win: MPI_Win) -> Option<Arc<Entry>> {
    let i = abi::window_index(win)?;
    WINDOWS
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .get(i)?
        .clone()
}

/// Takes `win` out of the table.
pub(crate) fn remove(win: MPI_Win) -> Option<Arc<Entry>> {
    let i = abi::window_index(win)?;
    WINDOWS
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .get_mut(i)?
        .take()
}

/// Every window still in the table, in creation-slot order, taken out.
pub(crate) fn drain() -> Vec<Arc<Entry>> {
    WINDOWS
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .drain(..)
        .flatten()
        .collect()
}

/// Memory from `MPI_Alloc_mem`, by base address.
static ALLOCATIONS: Mutex<Vec<(usize, AllocMem<u8>)>> = Mutex::new(Vec::new());

/// Keeps `mem` until `MPI_Free_mem` of its base.
pub(crate) fn keep_allocation(mut mem: AllocMem<u8>) -> *mut u8 {
    let base = mem.as_mut_ptr();
    ALLOCATIONS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push((base as usize, mem));
    base
}

/// Releases the allocation at `base`; false when there is none.
pub(crate) fn release_allocation(base: usize) -> bool {
    let mut a = ALLOCATIONS.lock().unwrap_or_else(PoisonError::into_inner);
    match a.iter().position(|(b, _)| *b == base) {
        Some(i) => {
            drop(a.swap_remove(i));
            true
        }
        None => false,
    }
}
