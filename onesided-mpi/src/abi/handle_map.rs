//! A map from handles that are addresses (Open MPI's predefined objects) to what they
//! stand for, read on every call that names a datatype or an operation: open addressing
//! with a multiplicative hash, at most a quarter full, so that a lookup is one or two
//! probes (a sorted table's binary search took ~60 instructions per datatype); a fixed
//! power-of-two table, so that the hot path's probe needs no bounds check.

use super::Handle;

/// Slots of every map: a power of two, so that a probe's index is masked into range (no
/// bounds check on the hot path), and at least twice the entries any map holds.
const SLOTS: usize = 256;

/// An immutable map from non-zero handles to `V`, its slots inline (a lookup reads the
/// slot where the map is: no pointer to follow first).
#[derive(Debug)]
pub struct HandleMap<V> {
    /// `(handle, value)`; an empty slot is `(0, None)`, which a lookup of handle 0 finds.
    slots: [(Handle, Option<V>); SLOTS],
}

impl<V: Copy> HandleMap<V> {
    /// The map with no entry.
    pub const EMPTY: HandleMap<V> = HandleMap {
        slots: [(0, None); SLOTS],
    };

    /// The map of `entries` (handles non-zero, at most half of `SLOTS`; a repeated
    /// handle keeps its first value).
    pub fn new(entries: &[(Handle, V)]) -> HandleMap<V> {
        assert!(
            entries.len() * 2 <= SLOTS,
            "a handle map holds at most {SLOTS}/2 entries"
        );
        let mut map = HandleMap::EMPTY;
        for &(h, v) in entries {
            debug_assert_ne!(h, 0, "handle 0 marks empty slots");
            let mut i = home(h);
            while map.slots[i].0 != 0 && map.slots[i].0 != h {
                i = (i + 1) % SLOTS;
            }
            if map.slots[i].0 == 0 {
                map.slots[i] = (h, Some(v));
            }
        }
        map
    }

    /// The value of `h`: its home slot, then the next ones up to an empty slot (at most a
    /// quarter of the slots are taken in the maps this library builds: one or two probes).
    #[inline(always)]
    pub fn get(&self, h: Handle) -> Option<V> {
        let mut i = home(h);
        loop {
            let (k, v) = self.slots[i % SLOTS];
            // An empty slot holds (0, None): handle 0 ends here as "absent" too.
            if k == h {
                return v;
            }
            if k == 0 {
                return None;
            }
            i += 1;
        }
    }
}

/// Fibonacci hashing of an address (objects are aligned: their low bits say little); the
/// top bits index the slots.
#[inline(always)]
fn home(h: Handle) -> usize {
    ((h as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - SLOTS.trailing_zeros())) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_is_found_and_nothing_else() {
        // Addresses 512 bytes apart, as Open MPI's predefined datatypes are.
        let entries: Vec<(Handle, usize)> =
            (0..70).map(|i| (0x7f00_1234_0000 + i * 512, i)).collect();
        let map = HandleMap::new(&entries);
        for &(h, v) in &entries {
            assert_eq!(map.get(h), Some(v));
        }
        for h in [
            0,
            1,
            0x7f00_1234_0000 + 70 * 512,
            0x7f00_1234_0000 + 8,
            usize::MAX,
        ] {
            assert_eq!(map.get(h), None, "{h:#x}");
        }
    }

    #[test]
    fn a_repeated_handle_keeps_its_first_value() {
        let map = HandleMap::new(&[(8, 'a'), (16, 'b'), (8, 'c')]);
        assert_eq!((map.get(8), map.get(16)), (Some('a'), Some('b')));
    }
}
