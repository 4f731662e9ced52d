//! What the library keeps between calls: the universe (joined in `MPI_Init`), the table of
//! windows behind our `MPI_Win` handles, and the memory `MPI_Alloc_mem` handed out.

use std::os::raw::c_int;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};

use onesided::{AllocMem, RawWindow, Universe};

use crate::abi::{self, MPI_Comm, MPI_Group, MPI_Win};

/// The universe, once `MPI_Init` joined the job.
pub(crate) static UNIVERSE: OnceLock<Universe> = OnceLock::new();

/// One window of the program.
pub(crate) struct Entry {
    pub win: RawWindow,
    /// The host communicator it was created over (aborts go to it).
    pub comm: MPI_Comm,
    /// The group of that communicator, to translate the groups of PSCW calls.
    pub group: MPI_Group,
    /// The window's error handler (an `MPI_Errhandler`).
    pub errhandler: AtomicUsize,
    /// `MPI_Win_set_name`.
    pub name: Mutex<String>,
    /// The values `MPI_Win_get_attr` hands out pointers to (`MPI_WIN_SIZE`, `DISP_UNIT`,
    /// `CREATE_FLAVOR`, `MODEL`): they live as long as the window.
    pub size_attr: abi::MPI_Aint,
    pub disp_unit_attr: c_int,
    pub flavor_attr: c_int,
    pub model_attr: c_int,
    /// This window's handle (set when it enters the table).
    pub handle: AtomicUsize,
    /// When it entered the table (a process-wide sequence): `MPI_Finalize` frees what is
    /// left in creation order, which collective creations share across processes (slots
    /// do not: local duplicates and memory-handle windows take slots too).
    pub created: std::sync::atomic::AtomicU64,
    /// User attributes: keyval and value (a `void *`, kept as an address).
    pub attrs: Mutex<Vec<(c_int, usize)>>,
    /// A window made from a memory handle (`MPIX_Win_from_memhandle`): its operations go
    /// here; `win` is then a handle of the parent window, freed on its own.
    pub mem: Option<onesided::RawMemWindow>,
}

impl Entry {
    pub(crate) fn new(win: RawWindow, comm: MPI_Comm, group: MPI_Group) -> Entry {
        let flavor_attr = match win.flavor() {
            onesided::Flavor::Create => abi::abi().flavors[0],
            onesided::Flavor::Allocate => abi::abi().flavors[1],
            onesided::Flavor::Dynamic => abi::abi().flavors[2],
            _ => abi::abi().flavors[3],
        };
        Entry {
            size_attr: win.size_bytes() as abi::MPI_Aint,
            disp_unit_attr: c_int::try_from(win.disp_unit()).unwrap_or(c_int::MAX),
            flavor_attr,
            model_attr: abi::abi().win_unified,
            win,
            comm,
            group,
            errhandler: AtomicUsize::new(abi::abi().errors_are_fatal),
            name: Mutex::new(String::new()),
            handle: AtomicUsize::new(abi::abi().win_null),
            created: std::sync::atomic::AtomicU64::new(0),
            attrs: Mutex::new(Vec::new()),
            mem: None,
        }
    }

    /// The entry of a window made from a memory handle: `parent` is a handle of the parent
    /// window (freed with this one), `mem` the window of the handle's region.
    pub(crate) fn memhandle(
        parent: RawWindow,
        mem: onesided::RawMemWindow,
        comm: MPI_Comm,
        group: MPI_Group,
    ) -> Entry {
        let mut e = Entry::new(parent, comm, group);
        e.size_attr = mem.size_bytes() as abi::MPI_Aint;
        e.disp_unit_attr = c_int::try_from(mem.disp_unit()).unwrap_or(c_int::MAX);
        e.mem = Some(mem);
        e
    }

    /// This window's handle.
    pub(crate) fn handle(&self) -> MPI_Win {
        // Relaxed: set before the handle is returned to the program.
        self.handle.load(Ordering::Relaxed)
    }

    pub(crate) fn errhandler(&self) -> abi::MPI_Errhandler {
        // Relaxed: set and read by the program's own calls, which order themselves.
        self.errhandler.load(Ordering::Relaxed)
    }
}

/// The windows, by handle index; freed slots are reused. Insert and remove take the write
/// lock and keep [`SLOTS`] in step.
static WINDOWS: RwLock<Vec<Option<Arc<Entry>>>> = RwLock::new(Vec::new());

/// Slots per chunk of [`SLOTS`].
const CHUNK: usize = 256;
/// Chunks: room for 1 Mi windows alive at once.
const CHUNKS: usize = 4096;

/// The same table for readers that take no lock: chunk `i / CHUNK`, slot `i % CHUNK` holds
/// the `Arc::as_ptr` of the entry in [`WINDOWS`] (null when free). Chunk 0 is
/// [`FIRST_CHUNK`]; the others are allocated under the write lock and never freed.
static SLOTS: [AtomicPtr<[AtomicPtr<Entry>; CHUNK]>; CHUNKS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; CHUNKS];

/// Chunk 0 of [`SLOTS`], a static: the windows of nearly every program, one load from
/// their handle's slot to their entry (an allocated chunk is one dependent load more, on
/// every call of the hot path and of its flush).
static FIRST_CHUNK: [AtomicPtr<Entry>; CHUNK] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; CHUNK];

/// Whether the program may call from several threads at once (`MPI_THREAD_MULTIPLE`
/// granted). Until `MPI_Init` says otherwise, assume so.
static CONCURRENT_CALLS: AtomicBool = AtomicBool::new(true);

/// The thread level the host granted (`MPI_THREAD_SINGLE` 0 … `MPI_THREAD_MULTIPLE` 3).
static THREAD_LEVEL: AtomicI32 = AtomicI32::new(3);

/// Records the thread level the host granted.
pub(crate) fn set_thread_level(provided: c_int) {
    // Relaxed (both): set inside MPI_Init, before the program can make a call on a window.
    THREAD_LEVEL.store(provided, Ordering::Relaxed);
    CONCURRENT_CALLS.store(provided >= 3, Ordering::Relaxed);
}

/// Whether the program may call from several threads at once (`MPI_THREAD_MULTIPLE`).
#[inline(always)]
pub(crate) fn concurrent_calls() -> bool {
    // Relaxed: see `set_thread_level`.
    CONCURRENT_CALLS.load(Ordering::Relaxed)
}

/// The thread level the host granted.
pub(crate) fn thread_level() -> c_int {
    // Relaxed: see `set_thread_level`.
    THREAD_LEVEL.load(Ordering::Relaxed)
}

/// A window of the table, held for the length of one call.
///
/// Without `MPI_THREAD_MULTIPLE` no two calls of the program overlap (MPI-4.1 §11.6), and
/// an entry leaves the table only inside a call (`MPI_Win_free`, `MPI_Finalize`): a call
/// may borrow the entry without touching its count (the lookup costs a load or two, no atomic
/// read-modify-write). With `MPI_THREAD_MULTIPLE` a call holds a counted reference.
pub(crate) enum EntryRef {
    /// The table's entry, valid until the calling thread's current call returns.
    Borrowed(NonNull<Entry>),
    /// A counted reference.
    Shared(Arc<Entry>),
}

impl EntryRef {
    /// A counted reference to the same entry (for what outlives the lookup's scope, and
    /// for error handlers that might free the window).
    pub(crate) fn shared(&self) -> Arc<Entry> {
        match self {
            EntryRef::Borrowed(p) => {
                // SAFETY: a borrowed entry is still in the table (see `EntryRef`), so the
                // table's Arc keeps the count ≥ 1 while we add one and rebuild an Arc.
                unsafe {
                    Arc::increment_strong_count(p.as_ptr());
                    Arc::from_raw(p.as_ptr())
                }
            }
            EntryRef::Shared(a) => Arc::clone(a),
        }
    }
}

impl Clone for EntryRef {
    fn clone(&self) -> Self {
        match self {
            EntryRef::Borrowed(p) => EntryRef::Borrowed(*p),
            EntryRef::Shared(a) => EntryRef::Shared(Arc::clone(a)),
        }
    }
}

impl std::ops::Deref for EntryRef {
    type Target = Entry;
    #[inline(always)]
    fn deref(&self) -> &Entry {
        match self {
            // SAFETY: see `EntryRef::Borrowed`.
            EntryRef::Borrowed(p) => unsafe { p.as_ref() },
            EntryRef::Shared(a) => a,
        }
    }
}

/// The chunk of slot `index`, made when `make` (under the write lock).
#[inline(always)]
fn chunk(index: usize, make: bool) -> Option<&'static [AtomicPtr<Entry>; CHUNK]> {
    if index < CHUNK {
        return Some(&FIRST_CHUNK);
    }
    let cell = SLOTS.get(index / CHUNK)?;
    // Acquire: pairs with the Release store below, so the chunk's slots are initialized.
    let mut p = cell.load(Ordering::Acquire);
    if p.is_null() && make {
        let fresh: Box<[AtomicPtr<Entry>; CHUNK]> =
            Box::new([const { AtomicPtr::new(std::ptr::null_mut()) }; CHUNK]);
        p = Box::into_raw(fresh);
        // Release: publishes the initialized chunk (only writers, under the lock, store).
        cell.store(p, Ordering::Release);
    }
    // SAFETY: chunks are never freed; a non-null pointer is a chunk made above.
    (!p.is_null()).then(|| unsafe { &*p })
}

/// Puts `entry` in the table: its handle.
pub(crate) fn insert(entry: Entry) -> MPI_Win {
    // A new window holds its handler (nothing is owed the host: `from` is None).
    errhandler_moved(None, Some(entry.errhandler()));
    let mut t = WINDOWS.write().unwrap_or_else(PoisonError::into_inner);
    let entry = Arc::new(entry);
    let index = t.iter().position(Option::is_none).unwrap_or(t.len());
    let handle = abi::window_handle(index);
    static CREATED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    // Relaxed (all three): published with the table's lock and the handle's return; the
    // sequence only orders insertions, which the write lock serializes.
    entry.handle.store(handle, Ordering::Relaxed);
    entry
        .created
        .store(CREATED.fetch_add(1, Ordering::Relaxed), Ordering::Relaxed);
    let Some(slots) = chunk(index, true) else {
        panic!("more than {} windows alive at once", CHUNK * CHUNKS);
    };
    // Release: a lock-free reader that sees the pointer sees the entry's fields.
    slots[index % CHUNK].store(Arc::as_ptr(&entry).cast_mut(), Ordering::Release);
    if index == t.len() {
        t.push(Some(entry));
    } else {
        t[index] = Some(entry);
    }
    handle
}

/// The window behind `win`, for one call; `None` for a handle that is not one of ours, or
/// freed.
#[inline(always)]
pub(crate) fn window(win: MPI_Win) -> Option<EntryRef> {
    window_at(abi::window_index(win)?)
}

/// The entry of window table slot `i` (see [`window`]).
#[inline(always)]
pub(crate) fn window_at(i: usize) -> Option<EntryRef> {
    window_at_as(concurrent_calls(), i)
}

/// The entry of slot `slot` of the table's first chunk, borrowed: [`window_at_as`] for a
/// caller whose calls do not overlap (below `MPI_THREAD_MULTIPLE`), in one load.
#[inline(always)]
pub(crate) fn first_window(slot: u8) -> Option<EntryRef> {
    const _: () = assert!(u8::MAX as usize + 1 == CHUNK);
    // Acquire: pairs with the Release store of `insert`.
    NonNull::new(FIRST_CHUNK[slot as usize].load(Ordering::Acquire)).map(EntryRef::Borrowed)
}

/// [`window_at`] for a caller that read [`concurrent_calls`] already (`concurrent`).
#[inline(always)]
pub(crate) fn window_at_as(concurrent: bool, i: usize) -> Option<EntryRef> {
    if !concurrent {
        // Acquire: pairs with the Release store of `insert`.
        let p = chunk(i, false)?[i % CHUNK].load(Ordering::Acquire);
        return NonNull::new(p).map(EntryRef::Borrowed);
    }
    shared_window(i)
}

/// [`window`] under `MPI_THREAD_MULTIPLE`: a counted reference, taken under the table's
/// lock (another thread may free the window while this one's call runs).
#[inline(never)]
fn shared_window(i: usize) -> Option<EntryRef> {
    WINDOWS
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .get(i)?
        .clone()
        .map(EntryRef::Shared)
}

/// Takes `win` out of the table.
pub(crate) fn remove(win: MPI_Win) -> Option<Arc<Entry>> {
    let i = abi::window_index(win)?;
    let mut t = WINDOWS.write().unwrap_or_else(PoisonError::into_inner);
    let e = t.get_mut(i)?.take()?;
    if let Some(slots) = chunk(i, false) {
        // Relaxed: only the program's own (serialized) calls read the slot lock-free.
        slots[i % CHUNK].store(std::ptr::null_mut(), Ordering::Relaxed);
    }
    Some(e)
}

/// Every window still in the table, in creation order, taken out.
pub(crate) fn drain() -> Vec<Arc<Entry>> {
    let mut t = WINDOWS.write().unwrap_or_else(PoisonError::into_inner);
    for i in 0..t.len() {
        if let Some(slots) = chunk(i, false) {
            // Relaxed: as in `remove`.
            slots[i % CHUNK].store(std::ptr::null_mut(), Ordering::Relaxed);
        }
    }
    let mut left: Vec<Arc<Entry>> = t.drain(..).flatten().collect();
    // Relaxed: written before the entry entered the table (under its lock).
    left.sort_by_key(|e| e.created.load(Ordering::Relaxed));
    left
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
static ERRHANDLERS: Mutex<Vec<(abi::MPI_Errhandler, crate::host::WinErrhandlerFn)>> =
    Mutex::new(Vec::new());

/// Records handler `f` of handle `eh`.
pub(crate) fn add_errhandler(eh: abi::MPI_Errhandler, f: crate::host::WinErrhandlerFn) {
    let mut t = ERRHANDLERS.lock().unwrap_or_else(PoisonError::into_inner);
    t.retain(|(h, _)| *h != eh);
    t.push((eh, f));
}

/// The user function of handler `eh`.
pub(crate) fn errhandler_fn(eh: abi::MPI_Errhandler) -> Option<crate::host::WinErrhandlerFn> {
    ERRHANDLERS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .find(|(h, _)| *h == eh)
        .map(|&(_, f)| f)
}

/// References to an error handler that the host does not count: the windows' (a window's
/// handler is held here, not by a host object) and the answers of `MPI_Win_get_errhandler`
/// — each a reference the program may free with `MPI_Errhandler_free` (MPI-4.1 §9.3.4),
/// which Open MPI counts down even on its predefined handlers, freeing their static objects
/// when a count it never raised reaches zero.
struct HeldErrhandler {
    handle: abi::MPI_Errhandler,
    /// `MPI_Win_get_errhandler` answers not freed yet.
    answers: usize,
    /// Live windows whose handler it is.
    windows: usize,
    /// The program's own references it freed while windows held it: the host frees them
    /// when the last such window lets it go, so that the host cannot hand the handle out
    /// again while a window still calls it.
    frees_due: usize,
}

static HELD: Mutex<Vec<HeldErrhandler>> = Mutex::new(Vec::new());

/// The record of `eh` in `t`, made when missing.
fn held(t: &mut Vec<HeldErrhandler>, eh: abi::MPI_Errhandler) -> &mut HeldErrhandler {
    let i = match t.iter().position(|h| h.handle == eh) {
        Some(i) => i,
        None => {
            t.push(HeldErrhandler {
                handle: eh,
                answers: 0,
                windows: 0,
                frees_due: 0,
            });
            t.len() - 1
        }
    };
    &mut t[i]
}

/// Drops records that hold nothing.
fn forget_idle(t: &mut Vec<HeldErrhandler>) {
    t.retain(|h| h.answers + h.windows + h.frees_due > 0);
}

/// `MPI_Win_get_errhandler` handed `eh` out: one more reference the program may free.
pub(crate) fn errhandler_answered(eh: abi::MPI_Errhandler) {
    held(&mut HELD.lock().unwrap_or_else(PoisonError::into_inner), eh).answers += 1;
}

/// A window's handler changes from `from` (None: a new window) to `to` (None: the window is
/// freed): how many frees of `from` the host owes now (see [`HeldErrhandler::frees_due`]).
pub(crate) fn errhandler_moved(
    from: Option<abi::MPI_Errhandler>,
    to: Option<abi::MPI_Errhandler>,
) -> usize {
    let mut t = HELD.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(to) = to {
        held(&mut t, to).windows += 1;
    }
    let mut due = 0;
    if let Some(from) = from {
        let h = held(&mut t, from);
        h.windows = h.windows.saturating_sub(1);
        if h.windows == 0 {
            due = std::mem::take(&mut h.frees_due);
        }
    }
    forget_idle(&mut t);
    due
}

/// `MPI_Errhandler_free` of `eh`: true when the reference freed is one the host does not
/// count (an answer of `MPI_Win_get_errhandler`, or the program's own while a window holds
/// the handler: freed at the host later), false when the host frees it now.
pub(crate) fn errhandler_freed_here(eh: abi::MPI_Errhandler) -> bool {
    let mut t = HELD.lock().unwrap_or_else(PoisonError::into_inner);
    let Some(h) = t.iter_mut().find(|h| h.handle == eh) else {
        return false;
    };
    if h.answers > 0 {
        h.answers -= 1;
    } else if h.windows > 0 {
        h.frees_due += 1;
    } else {
        return false;
    }
    forget_idle(&mut t);
    true
}

/// A user keyval: its delete callback and extra state (an address), and how many
/// attributes of live windows use it.
#[derive(Clone, Copy)]
pub(crate) struct Keyval {
    pub delete: Option<crate::host::DeleteAttrFn>,
    pub extra: usize,
    /// Attributes set with this keyval on live windows.
    uses: usize,
    /// `MPI_Win_free_keyval` was called: the host's handle is freed with the last use.
    freed: bool,
}

impl Keyval {
    /// A new keyval's record.
    pub(crate) fn new(delete: Option<crate::host::DeleteAttrFn>, extra: usize) -> Keyval {
        Keyval {
            delete,
            extra,
            uses: 0,
            freed: false,
        }
    }
}

/// User keyvals by handle. A keyval the program frees while attributes still use it stays
/// here, and its host handle stays allocated (so the host cannot hand the number out again),
/// until the last of those attributes is deleted (MPI-4.1 §7.7.2).
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

/// Whether `k` can take new attributes: a live keyval, not freed by the program.
pub(crate) fn keyval_usable(k: c_int) -> bool {
    keyval(k).is_some_and(|v| !v.freed)
}

/// An attribute with keyval `k` was set (not replaced) on a window.
pub(crate) fn keyval_used(k: c_int) {
    let mut t = KEYVALS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, v)) = t.iter_mut().find(|(h, _)| *h == k) {
        v.uses += 1;
    }
}

/// An attribute with keyval `k` was deleted (its callback has run): the handle to free at
/// the host now, when it was the last use of a keyval the program freed.
#[must_use]
pub(crate) fn keyval_released(k: c_int) -> Option<c_int> {
    let mut t = KEYVALS.lock().unwrap_or_else(PoisonError::into_inner);
    let i = t.iter().position(|(h, _)| *h == k)?;
    let v = &mut t[i].1;
    v.uses = v.uses.saturating_sub(1);
    if v.freed && v.uses == 0 {
        t.swap_remove(i);
        Some(k)
    } else {
        None
    }
}

/// `MPI_Win_free_keyval` of `k`: true when nothing uses it (free it at the host now), false
/// when attributes still do (the last one's deletion frees it).
pub(crate) fn keyval_freed(k: c_int) -> bool {
    let mut t = KEYVALS.lock().unwrap_or_else(PoisonError::into_inner);
    match t.iter().position(|(h, _)| *h == k) {
        Some(i) if t[i].1.uses > 0 => {
            t[i].1.freed = true;
            false
        }
        Some(i) => {
            t.swap_remove(i);
            true
        }
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Handles no test elsewhere uses (the table is the process's).
    const A: abi::MPI_Errhandler = 0x5eed_0001;
    const B: abi::MPI_Errhandler = 0x5eed_0002;
    const C: abi::MPI_Errhandler = 0x5eed_0003;

    #[test]
    fn answers_of_get_errhandler_are_freed_here_once_each() {
        assert!(!errhandler_freed_here(A), "nothing held: the host's");
        errhandler_answered(A);
        errhandler_answered(A);
        assert!(errhandler_freed_here(A));
        assert!(errhandler_freed_here(A));
        assert!(
            !errhandler_freed_here(A),
            "a third free is the program's own: the host's"
        );
    }

    #[test]
    fn a_handler_freed_while_a_window_holds_it_is_freed_at_the_host_when_let_go() {
        assert_eq!(
            errhandler_moved(None, Some(B)),
            0,
            "a new window owes nothing"
        );
        assert_eq!(errhandler_moved(None, Some(B)), 0);
        assert!(errhandler_freed_here(B), "two windows hold it: deferred");
        assert_eq!(
            errhandler_moved(Some(B), None),
            0,
            "one window still holds it"
        );
        assert_eq!(
            errhandler_moved(Some(B), Some(C)),
            1,
            "the last lets it go: one free due"
        );
        assert!(!errhandler_freed_here(B), "nothing held any more");
        assert_eq!(errhandler_moved(Some(C), None), 0);
    }
}
