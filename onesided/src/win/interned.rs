//! Per-rank tables that many windows share: one copy per process of each distinct table.
//!
//! A window over `p` ranks needs a few facts per rank — where its control block lies in its
//! node's segment, whether it shares this node, its endpoint's address — that are the same
//! for every window over the same ranks. Kept per window, they made each window cost
//! `O(p)` bytes in every process (with the per-rank keys and addresses they replaced, about
//! 110 bytes per rank across nodes: 6 KiB more per window at 64 ranks than at 8). Interned, a window holds a reference, and the tables are once-per-process
//! costs of the ranks a process talks to, like the address vector they point into.

use std::any::Any;
use std::sync::{Arc, Mutex, Weak};

/// Every table handed out and still alive somewhere (dead ones are dropped at the next
/// lookup).
static TABLES: Mutex<Vec<Weak<dyn Any + Send + Sync>>> = Mutex::new(Vec::new());

/// The process's shared copy of `table`: an equal table handed out before and still alive,
/// else `table` itself, from now on handed out to equal ones.
pub(crate) fn intern<T: PartialEq + Send + Sync + 'static>(table: Vec<T>) -> Arc<Vec<T>> {
    let mut tables = TABLES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut found = None;
    tables.retain(|weak| {
        let Some(live) = weak.upgrade() else {
            return false;
        };
        if found.is_none() {
            if let Ok(same) = live.downcast::<Vec<T>>() {
                if *same == table {
                    found = Some(same);
                }
            }
        }
        true
    });
    if let Some(same) = found {
        return same;
    }
    let shared = Arc::new(table);
    let erased: Arc<dyn Any + Send + Sync> = shared.clone();
    tables.push(Arc::downgrade(&erased));
    shared
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_tables_share_one_copy_while_alive() {
        let a = intern(vec![7u32, 1, 0, 1]);
        let b = intern(vec![7u32, 1, 0, 1]);
        assert!(Arc::ptr_eq(&a, &b));
        // Another type with the same bytes, or other contents, is another table.
        let c = intern(vec![7u64, 1, 0, 1]);
        assert_eq!(*c, vec![7u64, 1, 0, 1]);
        let d = intern(vec![7u32, 1, 0, 2]);
        assert!(!Arc::ptr_eq(&a, &d));
        // Once every holder dropped it, an equal table is a new copy (nothing leaks).
        let weak = Arc::downgrade(&a);
        drop((a, b));
        assert!(weak.upgrade().is_none());
        let e = intern(vec![7u32, 1, 0, 1]);
        assert_eq!(*e, vec![7u32, 1, 0, 1]);
    }
}
