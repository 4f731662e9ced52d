//! A map from handles that are addresses (Open MPI's predefined objects) to what they
//! stand for, read on every call that names a datatype or an operation: open addressing
//! with a multiplicative hash, at most a quarter full, so that a lookup is one or two
//! probes (a sorted table's binary search took ~60 instructions per datatype).

use super::Handle;

/// An immutable map from non-zero handles to `V`.
#[derive(Debug)]
pub struct HandleMap<V> {
    /// `(handle, value)`; handle 0 marks an empty slot.
    slots: Box<[(Handle, Option<V>)]>,
    /// `64 - log2(slots.len())`: the hash's top bits index the table.
    shift: u32,
}

impl<V: Copy> HandleMap<V> {
    /// The map of `entries` (handles non-zero; a repeated handle keeps its first value).
    pub fn new(entries: &[(Handle, V)]) -> HandleMap<V> {
        let len = (entries.len() * 4).next_power_of_two().max(16);
        let mut map = HandleMap {
            slots: vec![(0, None); len].into_boxed_slice(),
            shift: 64 - len.trailing_zeros(),
        };
        for &(h, v) in entries {
            debug_assert_ne!(h, 0, "handle 0 marks empty slots");
            let mut i = map.home(h);
            while map.slots[i].0 != 0 && map.slots[i].0 != h {
                i = (i + 1) & (len - 1);
            }
            if map.slots[i].0 == 0 {
                map.slots[i] = (h, Some(v));
            }
        }
        map
    }

    #[inline(always)]
    fn home(&self, h: Handle) -> usize {
        // Fibonacci hashing of the address (objects are aligned: its low bits say little).
        ((h as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> self.shift) as usize
    }

    /// The value of `h`.
    #[inline(always)]
    pub fn get(&self, h: Handle) -> Option<V> {
        let mask = self.slots.len() - 1;
        let mut i = self.home(h);
        loop {
            let (k, v) = self.slots[i];
            if k == h && h != 0 {
                return v;
            }
            if k == 0 {
                return None;
            }
            i = (i + 1) & mask;
        }
    }
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
