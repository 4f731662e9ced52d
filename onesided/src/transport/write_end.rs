//! When a network write from the caller's own memory completes: the concept the window
//! layer passes down to the network endpoint (its own module, below both).

/// When a network write from the caller's own memory ([`WinCore::put_shared_bytes`])
/// counts as complete for a flush.
///
/// [`WinCore::put_shared_bytes`]: crate::win::core::WinCore::put_shared_bytes
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "ofi"), allow(dead_code))]
pub(crate) enum WriteEnd {
    /// Once placed at the target: a flush then means visible there.
    Delivered,
    /// Once the provider is done with the source — for a write the caller follows with
    /// another write to the same target before any flush, on a provider that places a
    /// peer's writes in issue order: the later write's delivery proves this one's, and no
    /// acknowledgement travels for it. Where the provider does not order writes it is
    /// `Delivered`.
    Followed,
    /// Once the provider is done with the source — for a write whose delivery the caller
    /// learns from the target itself (the target acts on what it wrote and answers), and
    /// whose target memory stays registered until then: no flush needs to tell it, and no
    /// acknowledgement travels for it.
    Answered,
}
