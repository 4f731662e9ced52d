//! This process's identity in its job (job id and rank), set once when the process joins
//! its job (`universe`), for code that has no communicator at hand: window creation names
//! its segments and identity words with it, `alloc_mem` its heaps.

use std::sync::OnceLock;

/// Identity of this process in its job.
#[derive(Debug, Clone)]
pub(crate) struct JobIdentity {
    /// Random job id.
    pub job: String,
    /// Rank of this process in the job.
    pub rank: usize,
}

static IDENTITY: OnceLock<JobIdentity> = OnceLock::new();

/// This process's job identity, once it joined its job.
pub(crate) fn identity() -> Option<&'static JobIdentity> {
    IDENTITY.get()
}

/// Records this process's identity; the first call wins (a process joins one job).
pub(crate) fn set_identity(job: &str, rank: usize) {
    let _ = IDENTITY.set(JobIdentity {
        job: job.to_owned(),
        rank,
    });
}
