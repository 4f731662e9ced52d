//! How the ranks of a window across nodes are reached (feature `ofi`): each rank's route
//! (its endpoint, its place in its node's segment, whether it shares this node) and every
//! rank's registered memory as the network names it — one table per rank where keys or
//! bases differ, nothing per rank where every rank registered its node's segment under one
//! key, addressed by offset (`net::across`).

use std::sync::Arc;

use crate::transport::network::Remote;

/// How one rank of a window across nodes is reached: the same for every window over the
/// same ranks, so that windows share one table of these (`win::interned`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RankRoute {
    /// Its endpoint in this process's address vector.
    pub peer: u64,
    /// Its control block's place in its node's segment (`BlockSlots`), which is also its
    /// memory's place among its node's ranks in an `allocate` window.
    pub slot: u32,
    /// On this process's node.
    pub here: bool,
}

/// Every rank's registered memory of one kind (a node segment, or the window memory in
/// it) as the network reaches it.
#[derive(Debug)]
pub(crate) enum Remotes {
    /// One entry per rank: keys or remote bases differ.
    Table(Vec<Remote>),
    /// Every rank registered its node's segment under one key, addressed by offset: rank
    /// `r`'s memory is `base + slot(r) * stride` — nothing per rank in the window.
    Uniform {
        routes: Arc<Vec<RankRoute>>,
        key: u64,
        base: u64,
        stride: u64,
    },
}

impl Remotes {
    /// Rank `rank`'s memory.
    #[inline]
    pub(crate) fn get(&self, rank: usize) -> Option<Remote> {
        match self {
            Remotes::Table(t) => t.get(rank).copied(),
            Remotes::Uniform {
                routes,
                key,
                base,
                stride,
            } => routes.get(rank).map(|r| Remote {
                peer: r.peer,
                addr: base + u64::from(r.slot) * stride,
                key: *key,
            }),
        }
    }

    /// Ranks covered.
    pub(crate) fn len(&self) -> usize {
        match self {
            Remotes::Table(t) => t.len(),
            Remotes::Uniform { routes, .. } => routes.len(),
        }
    }

    /// The same memory `by` bytes further in (every rank's window memory after the control
    /// blocks), rank `r` `offset(r)` further still: `stride` apart between a node's ranks
    /// where that is where `offset` puts them (one key for all: nothing per rank), one
    /// entry per rank otherwise.
    pub(crate) fn shifted(
        &self,
        by: u64,
        stride: Option<u64>,
        offset: impl Fn(usize) -> u64,
    ) -> Remotes {
        match (self, stride) {
            (
                Remotes::Uniform {
                    routes, key, base, ..
                },
                Some(stride),
            ) => Remotes::Uniform {
                routes: Arc::clone(routes),
                key: *key,
                base: base + by,
                stride,
            },
            _ => Remotes::Table(
                (0..self.len())
                    .map(|r| {
                        let a = self.get(r).expect("a rank below len");
                        Remote {
                            addr: a.addr + by + offset(r),
                            ..a
                        }
                    })
                    .collect(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn routes() -> Arc<Vec<RankRoute>> {
        // Ranks 0 and 1 on one node, 2 and 3 on the other (seen from rank 0).
        Arc::new(
            (0..4)
                .map(|r| RankRoute {
                    peer: 100 + r as u64,
                    slot: (r % 2) as u32,
                    here: r < 2,
                })
                .collect(),
        )
    }

    #[test]
    fn one_key_for_all_places_ranks_by_their_slot() {
        let areas = Remotes::Uniform {
            routes: routes(),
            key: 7,
            base: 0,
            stride: 0,
        };
        assert_eq!(areas.len(), 4);
        let a = areas.get(3).unwrap();
        assert_eq!((a.peer, a.addr, a.key), (103, 0, 7));
        assert!(areas.get(4).is_none());
        // The window memory: 4096 bytes in, 256 bytes per rank of a node.
        let data = areas.shifted(4096, Some(256), |r| (r % 2) as u64 * 256);
        assert!(matches!(data, Remotes::Uniform { .. }));
        let d = data.get(3).unwrap();
        assert_eq!((d.peer, d.addr, d.key), (103, 4096 + 256, 7));
    }

    #[test]
    fn places_without_a_stride_get_a_table() {
        let areas = Remotes::Uniform {
            routes: routes(),
            key: 7,
            base: 0,
            stride: 0,
        };
        // Sizes that differ by rank: each rank where `offset` says, under the common key.
        let offsets = [0u64, 8192, 0, 12288];
        let data = areas.shifted(4096, None, |r| offsets[r]);
        let Remotes::Table(t) = &data else {
            panic!("a table: {data:?}");
        };
        let addrs: Vec<u64> = t.iter().map(|a| a.addr).collect();
        assert_eq!(addrs, vec![4096, 4096 + 8192, 4096, 4096 + 12288]);
        assert!(t.iter().all(|a| a.key == 7));
        // A table shifts entry by entry.
        let table = Remotes::Table(vec![Remote {
            peer: 1,
            addr: 64,
            key: 9,
        }]);
        let moved = table.shifted(10, Some(256), |_| 5);
        assert_eq!(moved.get(0).unwrap().addr, 79);
    }
}
