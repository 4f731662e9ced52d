//! Process groups for general active-target synchronization (PSCW).

use crate::error::{Error, Result};

/// A set of ranks of a window's communicator, as passed to `post` and `start`.
///
/// ```
/// let neighbours = onesided::Group::new([3, 1])?;
/// assert!(neighbours.contains(1));
/// assert_eq!(neighbours.ranks(), &[1, 3]);
/// # Ok::<(), onesided::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Group {
    ranks: Vec<usize>,
}

impl Group {
    /// The ranks, in the group's order, without a copy.
    pub(crate) fn into_ranks(self) -> Vec<usize> {
        self.ranks
    }

    /// A group of the given ranks (any order); duplicates are an error.
    pub fn new(ranks: impl IntoIterator<Item = usize>) -> Result<Group> {
        let mut ranks: Vec<usize> = ranks.into_iter().collect();
        ranks.sort_unstable();
        if let Some(w) = ranks.windows(2).find(|w| w[0] == w[1]) {
            return Err(Error::InvalidArgument(format!(
                "group: rank {} appears twice",
                w[0]
            )));
        }
        Ok(Group { ranks })
    }

    /// The empty group.
    pub fn empty() -> Group {
        Group::default()
    }

    /// A group of one rank.
    pub fn single(rank: usize) -> Group {
        Group { ranks: vec![rank] }
    }

    /// Ranks in increasing order.
    pub fn ranks(&self) -> &[usize] {
        &self.ranks
    }

    /// Number of ranks.
    pub fn len(&self) -> usize {
        self.ranks.len()
    }

    /// True for the empty group.
    pub fn is_empty(&self) -> bool {
        self.ranks.is_empty()
    }

    /// True when `rank` is a member.
    #[inline]
    pub fn contains(&self, rank: usize) -> bool {
        match self.ranks.as_slice() {
            [only] => *only == rank,
            ranks => ranks.binary_search(&rank).is_ok(),
        }
    }

    /// Error unless every member is below `size`.
    pub(crate) fn check_within(&self, size: usize) -> Result<()> {
        match self.ranks.last() {
            Some(&r) if r >= size => Err(Error::InvalidRank { rank: r, size }),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorted_unique_membership() {
        let g = Group::new([5, 2, 9]).unwrap();
        assert_eq!(g.ranks(), &[2, 5, 9]);
        assert!(g.contains(5) && !g.contains(4));
        assert!(Group::new([1, 1]).is_err());
        assert!(g.check_within(10).is_ok());
        assert!(matches!(
            g.check_within(9),
            Err(Error::InvalidRank { rank: 9, size: 9 })
        ));
        assert!(Group::empty().check_within(0).is_ok());
    }
}
