//! Waits of other libraries that keep onesided progressing: a host MPI's blocking call, as
//! the C ABI interposes it, paces its polls with [`ForeignWait`], which gives this
//! process's progress (the network endpoint, deferred epochs, request rings) a turn
//! between two polls.

use crate::backoff::Backoff;

/// A wait loop of another library (a host MPI's barrier, receive or `MPI_Wait`) that keeps
/// onesided progressing while it polls its own completion: each [`ForeignWait::pause`]
/// reads the network endpoint (windows across nodes: a peer's put or atomic on this
/// process's memory is applied only while someone reads it), runs deferred epochs and
/// serves requests handed to this process, then yields the CPU. A target that waits in
/// such a loop answers its origins as promptly as one waiting inside onesided; the
/// endpoint's progress thread stands aside meanwhile.
///
/// ```
/// let mut wait = onesided::ForeignWait::new();
/// let mut polls = 0;
/// // `polls < 3` stands for the other library's test of its own request.
/// while polls < 3 {
///     polls += 1;
///     wait.pause();
/// }
/// ```
#[derive(Debug, Default)]
pub struct ForeignWait {
    backoff: Backoff,
}

impl ForeignWait {
    /// A wait that has not paused yet.
    pub fn new() -> Self {
        ForeignWait::default()
    }

    /// One pause between two polls of the other library: onesided's progress, then a yield
    /// (with a core of its own and peers to serve, a short spin instead).
    #[inline]
    pub fn pause(&mut self) {
        self.backoff.attentive_pause();
    }
}

/// One turn of onesided's progress, with no pause: what a test call of another library
/// (`MPI_Test`, `MPI_Iprobe`, `MPI_Request_get_status` …) does before it answers, so that
/// a program which polls such a call in a loop of its own serves its peers as one waiting
/// in a blocking call does ([`ForeignWait`]): the network endpoint read, deferred epochs
/// run, request rings served. Without a progress thread (`ONESIDED_PROGRESS=none`) such a
/// loop is the only progress this process makes.
///
/// ```
/// // A test of another library's request, polled by the program.
/// let mut polls = 0;
/// while polls < 3 {
///     onesided::progress_once();
///     polls += 1;
/// }
/// ```
pub fn progress_once() {
    Backoff::new().attend();
}

/// True when this process has opened its network endpoint (a window across nodes exists
/// or existed): only then can a peer on another node need this process's progress. Cheap
/// (one load); always false in a build without the feature `ofi`.
#[inline]
pub fn network_open() -> bool {
    crate::transport::network::is_open()
}
