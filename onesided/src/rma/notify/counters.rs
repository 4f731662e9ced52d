//! The notification counters of a window (see the parent module for the semantics):
//! one table per `set_num_notify`, every rank's block in one node segment. Kept apart
//! from the calls so the window's core can hold them without depending on requests.

use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::plane::{CtrlWord, MappedWords};
use crate::shm::segment::Segment;

/// One `set_num_notify`'s counters: every rank's block in one node segment.
pub(crate) struct NotifyTable {
    /// First counter of each rank (null when that rank has none).
    pub(super) blocks: Vec<*const AtomicU64>,
    pub(super) counts: Vec<usize>,
    /// Keeps the mapping of `blocks` alive.
    pub(super) _segment: Option<Segment>,
}

// SAFETY: the pointers point into `_segment`, which the table owns; the words are atomics
// every process of the window updates concurrently by design.
unsafe impl Send for NotifyTable {}
// SAFETY: as for Send.
unsafe impl Sync for NotifyTable {}

impl NotifyTable {
    /// Counter `idx` of `rank`, if it has one.
    pub(super) fn counter(&self, rank: usize, idx: usize) -> Option<&AtomicU64> {
        if idx >= *self.counts.get(rank)? {
            return None;
        }
        // SAFETY: blocks[rank] has counts[rank] > idx AtomicU64s inside the segment this
        // table owns, so the reference lives no longer than the mapping.
        Some(unsafe { &*self.blocks[rank].add(idx) })
    }
}

/// On one node a table's counters are mapped by every process: CPU atomics answer at once.
/// The notification calls use a posted add (an arrival), a load (a count or a wait) and a
/// swap (a reset).
impl MappedWords for NotifyTable {
    /// The counter behind a notification word that the caller checked exists.
    #[inline(always)]
    fn mapped(&self, word: CtrlWord) -> &AtomicU64 {
        match word {
            CtrlWord::Notify { at, idx } => self
                .counter(at, idx)
                .expect("a notification word is checked before it is used"),
            other => unreachable!("a notify table holds notification counters only, not {other:?}"),
        }
    }
}

/// A window's notification counters: the table in force, and every earlier one (kept
/// mapped until the window goes, see the module docs).
#[derive(Default)]
pub(crate) struct Notifications {
    /// The table of the latest `set_num_notify`; null before the first.
    current: AtomicPtr<NotifyTable>,
    /// Owns every table `current` ever pointed to (boxed: a table must not move when the
    /// vector grows, `current` and the references handed out point into it).
    #[allow(clippy::vec_box)]
    tables: Mutex<Vec<Box<NotifyTable>>>,
}

impl std::fmt::Debug for Notifications {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifications").finish_non_exhaustive()
    }
}

impl Notifications {
    pub(super) fn table(&self) -> Option<&NotifyTable> {
        // Acquire: pairs with the Release in `install`, so the table's fields are seen
        // initialised.
        let p = self.current.load(Ordering::Acquire);
        // SAFETY: a non-null `current` points into a Box owned by `tables`, which is never
        // shrunk while `self` lives.
        unsafe { p.as_ref() }
    }

    pub(super) fn install(&self, table: NotifyTable) {
        let mut tables = self
            .tables
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut boxed = Box::new(table);
        let p: *mut NotifyTable = &mut *boxed;
        tables.push(boxed);
        // Release: see `table`.
        self.current.store(p, Ordering::Release);
    }
}
