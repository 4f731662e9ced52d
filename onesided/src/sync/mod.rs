//! Synchronization (MPI-4.1 §12.5): fence, post/start/complete/wait, lock/lock_all, flush.
//!
//! Each call is a request state machine (`progress::SyncOp`) driven by the window's progress
//! engine; the blocking calls of this module start a request and wait for it.

pub(crate) mod collective;
mod fence;
mod flush;
pub(crate) mod lock;
mod pscw;

use std::fmt;
use std::ops::{BitOr, BitOrAssign};

use crate::error::{Error, Result};

/// Assertions passed to synchronization calls (MPI_MODE_*). Combine with `|`.
///
/// ```
/// use onesided::Assert;
/// let a = Assert::NOPRECEDE | Assert::NOSTORE;
/// assert!(a.contains(Assert::NOPRECEDE) && !a.contains(Assert::NOSUCCEED));
/// ```
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Assert(u32);

impl Assert {
    /// No assertion.
    pub const NONE: Assert = Assert(0);
    /// `post`/`start`/`lock`/`lock_all`: the matching calls need no synchronization (for
    /// PSCW both sides must pass it; for locks the caller guarantees no conflicting lock).
    pub const NOCHECK: Assert = Assert(1);
    /// `fence`/`post`: the local window was not updated by local stores since the last
    /// synchronization.
    pub const NOSTORE: Assert = Assert(2);
    /// `fence`/`post`: the local window will not be updated by put or accumulate until the
    /// next synchronization.
    pub const NOPUT: Assert = Assert(4);
    /// `fence`: the fence completes no RMA operations issued by this process (collective:
    /// all processes or none).
    pub const NOPRECEDE: Assert = Assert(8);
    /// `fence`: no RMA operations follow this fence until the next one (collective).
    pub const NOSUCCEED: Assert = Assert(16);

    /// True when every assertion in `other` is set.
    pub fn contains(self, other: Assert) -> bool {
        self.0 & other.0 == other.0
    }

    /// Raw bits.
    pub fn bits(self) -> u32 {
        self.0
    }

    /// Error when an assertion not in `allowed` is set.
    pub(crate) fn only(self, call: &'static str, allowed: Assert) -> Result<()> {
        if self.0 & !allowed.0 == 0 {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!(
                "{call}: assertion {:?} is not valid here (allowed: {allowed:?})",
                Assert(self.0 & !allowed.0)
            )))
        }
    }
}

impl BitOr for Assert {
    type Output = Assert;
    fn bitor(self, rhs: Assert) -> Assert {
        Assert(self.0 | rhs.0)
    }
}

impl BitOrAssign for Assert {
    fn bitor_assign(&mut self, rhs: Assert) {
        self.0 |= rhs.0;
    }
}

impl fmt::Debug for Assert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == 0 {
            return f.write_str("NONE");
        }
        let names = [
            (Assert::NOCHECK, "NOCHECK"),
            (Assert::NOSTORE, "NOSTORE"),
            (Assert::NOPUT, "NOPUT"),
            (Assert::NOPRECEDE, "NOPRECEDE"),
            (Assert::NOSUCCEED, "NOSUCCEED"),
        ];
        let set: Vec<&str> = names
            .iter()
            .filter(|(a, _)| self.contains(*a))
            .map(|(_, n)| *n)
            .collect();
        f.write_str(&set.join("|"))
    }
}

/// The kind of a passive-target lock (defined with the window's epoch record, which keeps
/// the locks a process holds).
pub use crate::win::epoch::LockType;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assert_validation() {
        let fence_ok = Assert::NOSTORE | Assert::NOPUT | Assert::NOPRECEDE | Assert::NOSUCCEED;
        assert!((Assert::NOPRECEDE | Assert::NOSTORE)
            .only("fence", fence_ok)
            .is_ok());
        let e = Assert::NOCHECK.only("fence", fence_ok).unwrap_err();
        assert!(e.to_string().contains("NOCHECK"), "{e}");
        assert_eq!(format!("{:?}", Assert::NONE), "NONE");
        assert_eq!(
            format!("{:?}", Assert::NOPUT | Assert::NOCHECK),
            "NOCHECK|NOPUT"
        );
    }
}
