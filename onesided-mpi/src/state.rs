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
    /// The values `MPI_Win_get_attr` hands out pointers to (`MPI_WIN_SIZE`, `DISP_UNIT`,
    /// `CREATE_FLAVOR`, `MODEL`): they live as long as the window.
    pub size_attr: abi::MPI_Aint,
    pub disp_unit_attr: c_int,
    pub flavor_attr: c_int,
    pub model_attr: c_int,
    /// This window's handle (set when it enters the table).
    pub handle: AtomicI32,
    /// User attributes: keyval and value (a `void *`, kept as an address).
    pub attrs: Mutex<Vec<(c_int, usize)>>,
}

impl Entry {
    pub(crate) fn new(win: RawWindow, comm: MPI_Comm, group: MPI_Group) -> Entry {
        let flavor_attr = match win.flavor() {
            onesided::Flavor::Create => abi::MPI_WIN_FLAVOR_CREATE,
            onesided::Flavor::Allocate => abi::MPI_WIN_FLAVOR_ALLOCATE,
            onesided::Flavor::Dynamic => abi::MPI_WIN_FLAVOR_DYNAMIC,
            _ => abi::MPI_WIN_FLAVOR_SHARED,
        };
        Entry {
            size_attr: win.size_bytes() as abi::MPI_Aint,
            disp_unit_attr: c_int::try_from(win.disp_unit()).unwrap_or(c_int::MAX),
            flavor_attr,
            model_attr: abi::MPI_WIN_UNIFIED,
            win,
            comm,
            group,
            errhandler: AtomicI32::new(ERRORS_ARE_FATAL),
            name: Mutex::new(String::new()),
            handle: AtomicI32::new(abi::MPI_WIN_NULL),
            attrs: Mutex::new(Vec::new()),
        }
    }

    /// This window's handle.
    pub(crate) fn handle(&self) -> MPI_Win {
        // Relaxed: set before the handle is returned to the program.
        self.handle.load(Ordering::Relaxed)
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
    let entry = Arc::new(entry);
    let entry_ref = Arc::clone(&entry);
    let entry = Some(entry);
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
    let handle = abi::window_handle(index);
    // Relaxed: published with the table's lock and the handle's return.
    entry_ref.handle.store(handle, Ordering::Relaxed);
    handle
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

/// User window error handlers (`MPI_Win_create_errhandler`), by handle: kept for the life
/// of the process, so that a handler the program freed stays callable where it is set.
static ERRHANDLERS: Mutex<Vec<(c_int, crate::host::WinErrhandlerFn)>> = Mutex::new(Vec::new());

/// Records handler `f` of handle `eh`.
pub(crate) fn add_errhandler(eh: c_int, f: crate::host::WinErrhandlerFn) {
    let mut t = ERRHANDLERS.lock().unwrap_or_else(PoisonError::into_inner);
    t.retain(|(h, _)| *h != eh);
    t.push((eh, f));
}

/// The user function of handler `eh`.
pub(crate) fn errhandler_fn(eh: c_int) -> Option<crate::host::WinErrhandlerFn> {
    ERRHANDLERS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .find(|(h, _)| *h == eh)
        .map(|&(_, f)| f)
}

/// A user keyval: its copy and delete callbacks and extra state (an address).
#[derive(Clone, Copy)]
pub(crate) struct Keyval {
    pub delete: Option<crate::host::DeleteAttrFn>,
    pub extra: usize,
}

/// User keyvals by handle (kept after `MPI_Win_free_keyval`: attributes set with a freed
/// keyval still have their delete callback run).
static KEYVALS: Mutex<Vec<(c_int, Keyval)>> = Mutex::new(Vec::new());

pub(crate) fn add_keyval(k: c_int, v: Keyval) {
    let mut t = KEYVALS.lock().unwrap_or_else(PoisonError::into_inner);
    t.retain(|(h, _)| *h != k);
    t.push((k, v));
}

pub(crate) fn keyval(k: c_int) -> Option<Keyval> {
    KEYVALS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .find(|(h, _)| *h == k)
        .map(|&(_, v)| v)
}
