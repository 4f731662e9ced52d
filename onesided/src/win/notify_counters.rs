//! The notification counters of a window (see `rma::notify` for the semantics):
//! one table per `set_num_notify`, every rank's block in one node segment. Kept apart
//! from the calls so the window's core can hold them without depending on requests.

use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::error::Result;
use crate::plane::{Answer, ControlPlane, CtrlWord, MappedWords, PendingOp};
use crate::shm::segment::Segment;

/// One `set_num_notify`'s counters: every rank's block in one node segment (on a window
/// across nodes, one segment per node, laid out alike: a rank's counters are those in its
/// own node's).
pub(crate) struct NotifyTable {
    /// First counter of each rank (null when that rank has none).
    pub(crate) blocks: Vec<*const AtomicU64>,
    pub(crate) counts: Vec<usize>,
    /// Keeps the mapping of `blocks` alive.
    pub(crate) _segment: Option<Segment>,
    /// A window across nodes: how arrivals reach counters on other nodes.
    pub(crate) net: Option<crate::transport::network::Only<NetCounters>>,
}

/// The notification counters of the other nodes, as the network reaches them: arrivals
/// there are network atomics (the target's provider applies them with CPU atomics, so they
/// mix with its node's arrivals; `transport::ofi`).
pub(crate) struct NetCounters {
    pub(crate) nic: std::sync::Arc<dyn crate::transport::network::Fabric>,
    /// Each rank's node segment of counters: its endpoint, remote base and key.
    pub(crate) areas: Vec<crate::transport::network::Remote>,
    /// Each rank's node, and this process's.
    pub(crate) nodes: Vec<usize>,
    pub(crate) node: usize,
    /// This process's registration of its node's segment (dropped before the segment).
    pub(crate) _registration: crate::transport::network::Registration,
}

// SAFETY: the pointers point into `_segment`, which the table owns; the words are atomics
// every process of the window updates concurrently by design.
unsafe impl Send for NotifyTable {}
// SAFETY: as for Send.
unsafe impl Sync for NotifyTable {}

impl NotifyTable {
    /// Counter `idx` of `rank`, if it has one.
    pub(crate) fn counter(&self, rank: usize, idx: usize) -> Option<&AtomicU64> {
        if idx >= *self.counts.get(rank)? {
            return None;
        }
        // SAFETY: blocks[rank] has counts[rank] > idx AtomicU64s inside the segment this
        // table owns, so the reference lives no longer than the mapping.
        Some(unsafe { &*self.blocks[rank].add(idx) })
    }
}

/// The counters of this node: mapped by its processes, CPU atomics answer at once.
struct ThisNode<'a>(&'a NotifyTable);

impl MappedWords for ThisNode<'_> {
    /// The counter behind a notification word that the caller checked exists.
    #[inline(always)]
    fn mapped(&self, word: CtrlWord) -> &AtomicU64 {
        match word {
            CtrlWord::Notify { at, idx } => self
                .0
                .counter(at, idx)
                .expect("a notification word is checked before it is used"),
            other => unreachable!("a notify table holds notification counters only, not {other:?}"),
        }
    }
}

impl NotifyTable {
    /// Where counter `word` of a rank on another node is, when it is there.
    #[inline]
    fn elsewhere(
        &self,
        word: CtrlWord,
    ) -> Option<(&NetCounters, crate::transport::network::Remote)> {
        let net = self.net.as_ref()?;
        let CtrlWord::Notify { at, idx } = word else {
            return None;
        };
        if net.nodes[at] == net.node {
            return None;
        }
        // Every node lays its segment out alike: the offset in ours is the offset in theirs.
        let base = self._segment.as_ref()?.as_ptr() as usize;
        let offset = self.blocks[at] as usize - base + 8 * idx;
        let area = net.areas[at];
        Some((
            net,
            crate::transport::network::Remote {
                addr: area.addr + offset as u64,
                ..area
            },
        ))
    }
}

/// The notification calls use a posted add (an arrival), a load (a count or a wait) and a
/// swap (a reset). Counts, waits and resets are of the caller's own counters, on its node;
/// an arrival at a rank on another node is a network atomic, posted.
impl ControlPlane for NotifyTable {
    #[inline(always)]
    fn fetch_add(&self, word: CtrlWord, value: u64, order: Ordering) -> Answer {
        ThisNode(self).fetch_add(word, value, order)
    }

    #[inline(always)]
    fn load(&self, word: CtrlWord, order: Ordering) -> Answer {
        ThisNode(self).load(word, order)
    }

    #[inline(always)]
    fn swap(&self, word: CtrlWord, value: u64, order: Ordering) -> Answer {
        ThisNode(self).swap(word, value, order)
    }

    #[inline(always)]
    fn compare_swap(&self, word: CtrlWord, expected: u64, new: u64, order: Ordering) -> Answer {
        ThisNode(self).compare_swap(word, expected, new, order)
    }

    #[inline(always)]
    fn post_add(&self, word: CtrlWord, value: u64, order: Ordering) {
        if let Some((net, at)) = self.elsewhere(word) {
            // A failed post is reported by the next order_posted (the endpoint's flush
            // counts it failed) and by the endpoint's later operations.
            let _ = net
                .nic
                .post_word(crate::transport::network::NetOp::Sum, value, at);
            return;
        }
        ThisNode(self).post_add(word, value, order)
    }

    #[inline(always)]
    fn post_store(&self, word: CtrlWord, value: u64, order: Ordering) {
        if let Some((net, at)) = self.elsewhere(word) {
            let _ = net
                .nic
                .post_word(crate::transport::network::NetOp::Write, value, at);
            return;
        }
        ThisNode(self).post_store(word, value, order)
    }

    fn order_posted(&self) -> Result<()> {
        if let Some(net) = &self.net {
            return net.nic.flush(&mut || Ok(()));
        }
        Ok(())
    }

    fn poll(&self, _op: &PendingOp) -> Result<Option<u64>> {
        unreachable!("the counters a process reads are on its node and answer at once")
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
    pub(crate) fn table(&self) -> Option<&NotifyTable> {
        // Acquire: pairs with the Release in `install`, so the table's fields are seen
        // initialised.
        let p = self.current.load(Ordering::Acquire);
        // SAFETY: a non-null `current` points into a Box owned by `tables`, which is never
        // shrunk while `self` lives.
        unsafe { p.as_ref() }
    }

    pub(crate) fn install(&self, table: NotifyTable) {
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
