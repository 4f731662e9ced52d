//! Process start-up: [`init`] connects to the job and returns the [`Universe`].

use std::sync::{Arc, Mutex};

use crate::bootstrap::local::LocalBootstrap;
use crate::bootstrap::{Bootstrap, Comm, ThreadLevel};
use crate::error::{Error, Result};

static UNIVERSE: Mutex<Option<Universe>> = Mutex::new(None);

/// The job as seen by this process: its world communicator and identity.
///
/// Obtained from [`init`]; cheap to clone.
#[derive(Debug, Clone)]
pub struct Universe {
    world: Comm,
    thread_level: ThreadLevel,
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

    /// The thread support provided (MPI_Query_thread). Windows are thread-safe
    /// (`Window: Sync`) whatever the level; it limits the communicator collectives, which
    /// under `mpiexec` are the host MPI's. Under `osrun` it is [`ThreadLevel::Multiple`]
    /// (collectives on one communicator must still not overlap, as in MPI).
    pub fn thread_level(&self) -> ThreadLevel {
        self.thread_level
    }
}

/// Connects this process to its job.
///
/// Under `osrun` (or [`crate::testing`]) this joins the job through the `local` bootstrap.
/// Built with feature `mpi` and started by `mpiexec`/`srun`, it joins through the host MPI
/// (initializing it with MPI_THREAD_SERIALIZED — [`init_thread`] asks for another level —
/// unless the application already did, and finalizing it at exit if it initialized it); use
/// `init_mpi` (feature `mpi`) to pass another communicator. Without it, started by a PMI
/// launcher (`mpiexec.hydra`, `srun --mpi=pmi2`) it joins through the launcher's PMI socket
/// (see [`ENV_BOOTSTRAP`]). Started any other way the process is a job of one. Calling
/// `init` again returns the same universe.
///
/// ```
/// # onesided::testing::run(2, |_| {
/// let universe = onesided::init()?;
/// println!("rank {} of {}", universe.rank(), universe.size());
/// # onesided::init()?.world().barrier()?;
/// # Ok(())
/// # });
/// ```
pub fn init() -> Result<Universe> {
    init_thread(ThreadLevel::Serialized)
}

/// [`init`], asking for thread support `required` (MPI_Init_thread): under `mpiexec` the
/// host MPI is initialized with it (unless the application already initialized MPI); see
/// [`Universe::thread_level`] for what is provided.
///
/// ```
/// # onesided::testing::run(2, |_| {
/// use onesided::ThreadLevel;
/// let universe = onesided::init_thread(ThreadLevel::Multiple)?;
/// assert!(universe.thread_level() >= ThreadLevel::Serialized);
/// # onesided::init()?.world().barrier()?;
/// # Ok(())
/// # });
/// ```
pub fn init_thread(required: ThreadLevel) -> Result<Universe> {
    #[cfg(not(feature = "mpi"))]
    let _ = required;
    universe_once(|| {
        Ok(match LocalBootstrap::from_env()? {
            Some(b) => {
                // Die with the launcher: a rank must never outlive its job.
                let _ = rustix::process::set_parent_process_death_signal(Some(
                    rustix::process::Signal::KILL,
                ));
                Arc::new(b)
            }
            #[cfg(feature = "mpi")]
            None if crate::bootstrap::mpi::launched_by_mpi()
                || ::mpi::environment::is_initialized() =>
            {
                let world = crate::bootstrap::rsmpi::world_initializing_mpi(required)?;
                Arc::new(crate::bootstrap::mpi::MpiBootstrap::over(
                    crate::bootstrap::rsmpi::host(),
                    world,
                )?)
            }
            None => match std::env::var(ENV_BOOTSTRAP).as_deref() {
                Ok("singleton") => Arc::new(LocalBootstrap::singleton()?),
                Ok("pmi") => Arc::new(crate::bootstrap::pmi::join()?),
                Ok("pmix") => Arc::new(crate::bootstrap::pmi::join_pmix()?),
                Ok(other) => {
                    return Err(Error::Bootstrap(format!(
                        "{ENV_BOOTSTRAP}={other:?}: expected pmi, pmix or singleton (osrun's \
                         ranks and a host MPI's are found without it)"
                    )))
                }
                Err(_) if crate::bootstrap::pmi::launched().is_some() => {
                    Arc::new(crate::bootstrap::pmi::join()?)
                }
                Err(_) if crate::bootstrap::pmix::launched() => {
                    Arc::new(crate::bootstrap::pmi::join_pmix()?)
                }
                Err(_) => Arc::new(LocalBootstrap::singleton()?),
            },
        })
    })
}

/// Environment variable that chooses how a process started outside `osrun` joins its job:
/// `pmi` (the launcher's PMI-1 socket, `PMI_FD`: hydra, Slurm's `--mpi=pmi2`; the default
/// when `PMI_FD`, `PMI_RANK` and `PMI_SIZE` are set), `pmix` (a PMIx server through the
/// system's `libpmix.so.2`: Slurm's `--mpi=pmix`, Open MPI's `mpirun`/`prterun`; the default
/// when `PMIX_RANK` and `PMIX_NAMESPACE` are set and `PMI_FD` is not) or `singleton` (a job
/// of one, whatever the environment says).
pub const ENV_BOOTSTRAP: &str = "ONESIDED_BOOTSTRAP";

/// Connects this process to its job through the host MPI (feature `mpi`): the job is the
/// processes of `comm` (usually the world), which the application has initialized MPI for.
/// Collective over `comm`. Calling it (or [`init`]) again returns the first universe.
///
/// ```
/// # use mpi::traits::*;
/// let (mpi_universe, _) = mpi::initialize_with_threading(mpi::Threading::Serialized).unwrap();
/// let universe = onesided::init_mpi(&mpi_universe.world())?;
/// assert_eq!(universe.size(), mpi_universe.world().size() as usize);
/// # Ok::<(), onesided::Error>(())
/// ```
#[cfg(feature = "mpi")]
pub fn init_mpi<C: ::mpi::topology::Communicator>(comm: &C) -> Result<Universe> {
    universe_once(|| Ok(Arc::new(crate::bootstrap::mpi::MpiBootstrap::new(comm)?)))
}

/// Connects this process to its job through `bootstrap` (a [`MpiBootstrap`] over a host
/// MPI reached at run time, for one: what the MPI C ABI library does). Collective over the
/// bootstrap's processes. Calling it (or [`init`]) again returns the first universe.
///
/// [`MpiBootstrap`]: crate::bootstrap::mpi::MpiBootstrap
pub fn init_with(bootstrap: Arc<dyn Bootstrap>) -> Result<Universe> {
    universe_once(|| Ok(bootstrap))
}

/// The process's universe: the existing one, or one connected through the bootstrap
/// `make` returns.
fn universe_once(make: impl FnOnce() -> Result<Arc<dyn Bootstrap>>) -> Result<Universe> {
    // (The thread level is read after `make`: it may have initialized MPI.)
    let mut slot = UNIVERSE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(u) = slot.as_ref() {
        return Ok(u.clone());
    }
    let universe = connect(make()?);
    *slot = Some(universe.clone());
    Ok(universe)
}

/// Environment variable that gives the number of cores this node's ranks share, when the
/// process's CPU affinity overstates it: a node whose cores other jobs use too (no cpuset
/// per job). Waits decide from it whether each rank has a core of its own (then they keep
/// polling, as an MPI library's progress loop does) or not (then they yield and sleep).
/// Unset: the cores this process may run on.
pub const ENV_CORES: &str = "ONESIDED_CORES";

/// The cores this node's ranks share: [`ENV_CORES`], else the process's CPU affinity.
fn node_cores() -> usize {
    let affinity = std::thread::available_parallelism().map_or(1, |n| n.get());
    let value = std::env::var(ENV_CORES).ok();
    cores_from(value.as_deref(), affinity).unwrap_or_else(|| {
        crate::diag::say(format_args!(
            "{} {ENV_CORES}={:?} ignored: expected a positive number of cores",
            crate::diag::prefix(),
            value.unwrap_or_default()
        ));
        affinity
    })
}

/// The cores [`ENV_CORES`]'s `value` gives (`affinity` when unset); `None` when it is not
/// a positive number.
fn cores_from(value: Option<&str>, affinity: usize) -> Option<usize> {
    match value {
        None => Some(affinity),
        Some(v) => v.trim().parse::<usize>().ok().filter(|&n| n > 0),
    }
}

/// Per-process set-up shared by every bootstrap.
fn connect(boot: Arc<dyn Bootstrap>) -> Universe {
    let cores = node_cores();
    let here = boot.processes_on_this_machine();
    crate::backoff::set_oversubscribed(here > cores);
    crate::backoff::set_spare_cores(2 * here <= cores);
    // Cross-memory attach (process_vm_readv/writev) needs ptrace permission between the
    // ranks; under Yama ptrace_scope=1 that requires opting in. Without Yama this fails
    // harmlessly (EINVAL).
    let _ = rustix::process::set_ptracer(rustix::process::PTracer::Any);
    crate::progress::thread::start_if_enabled();
    crate::diag::set_rank(boot.rank());
    let job = Arc::clone(&boot);
    crate::diag::set_job_probe(move || job.aborted().then(|| job.report_requested()));
    crate::diag::install_logger();
    crate::transport::network::set_job_of_process(boot.job_id(), boot.rank());
    crate::bootstrap::identity::set_identity(boot.job_id(), boot.rank());
    crate::net::register();
    Universe {
        thread_level: boot.thread_level(),
        world: Comm::new(boot),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cores_variable_overrides_the_affinity_when_it_is_a_positive_number() {
        assert_eq!(cores_from(None, 8), Some(8));
        assert_eq!(cores_from(Some("2"), 8), Some(2));
        assert_eq!(cores_from(Some(" 16 "), 8), Some(16));
        assert_eq!(cores_from(Some("0"), 8), None);
        assert_eq!(cores_from(Some("two"), 8), None);
        assert_eq!(cores_from(Some(""), 8), None);
    }
}
