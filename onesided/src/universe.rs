//! Process start-up: [`init`] connects to the job and returns the [`Universe`].

use std::sync::{Arc, Mutex, OnceLock};

use crate::bootstrap::local::LocalBootstrap;
use crate::bootstrap::{Bootstrap, Comm};
use crate::error::Result;

/// Identity of this process in its job, for code that has no communicator at hand.
#[derive(Debug, Clone)]
pub(crate) struct JobIdentity {
    /// Random job id.
    pub job: String,
    /// Rank of this process in the job.
    pub rank: usize,
}

static IDENTITY: OnceLock<JobIdentity> = OnceLock::new();
static UNIVERSE: Mutex<Option<Universe>> = Mutex::new(None);

/// This process's job identity, once [`init`] has run.
pub(crate) fn identity() -> Option<&'static JobIdentity> {
    IDENTITY.get()
}

/// The job as seen by this process: its world communicator and identity.
///
/// Obtained from [`init`]; cheap to clone.
#[derive(Debug, Clone)]
pub struct Universe {
    world: Comm,
}

impl Universe {
    /// The communicator of all processes of the job.
    pub fn world(&self) -> &Comm {
        &self.world
    }

    /// Rank of this process in the job.
    pub fn rank(&self) -> usize {
        self.world.rank()
    }

    /// Number of processes in the job.
    pub fn size(&self) -> usize {
        self.world.size()
    }
}

/// Connects this process to its job.
///
/// Under `osrun` (or [`crate::testing`]) this joins the job through the `local` bootstrap;
/// started any other way the process is a job of one. Calling `init` again returns the same
/// universe.
///
/// ```no_run
/// let universe = onesided::init()?;
/// println!("rank {} of {}", universe.rank(), universe.size());
/// # Ok::<(), onesided::Error>(())
/// ```
pub fn init() -> Result<Universe> {
    let mut slot = UNIVERSE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(u) = slot.as_ref() {
        return Ok(u.clone());
    }
    let boot: Arc<dyn Bootstrap> = match LocalBootstrap::from_env()? {
        Some(b) => {
            // Die with the launcher: a rank must never outlive its job.
            let _ = rustix::process::set_parent_process_death_signal(Some(
                rustix::process::Signal::KILL,
            ));
            Arc::new(b)
        }
        None => Arc::new(LocalBootstrap::singleton()?),
    };
    // Cross-memory attach (process_vm_readv/writev) needs ptrace permission between the
    // ranks; under Yama ptrace_scope=1 that requires opting in. Without Yama this fails
    // harmlessly (EINVAL).
    let _ = rustix::process::set_ptracer(rustix::process::PTracer::Any);
    let _ = IDENTITY.set(JobIdentity {
        job: boot.job_id().to_owned(),
        rank: boot.rank(),
    });
    let universe = Universe {
        world: Comm::new(boot),
    };
    *slot = Some(universe.clone());
    Ok(universe)
}
