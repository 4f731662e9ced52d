//! Whether any process of a job is still alive, without trusting pids.
//!
//! Every job has a liveness file `/dev/shm/onesided.<job>.live` on which each of its
//! processes — the launcher and every rank — holds a shared `flock` for as long as it lives.
//! The kernel drops the lock when a process dies, however it dies (`kill -9` included), so
//! an exclusive lock that can be taken means that nobody of the job is left. The next
//! launcher start sweeps such jobs' segments ([`sweep_dead_jobs`]): what a killed `osrun`
//! could not remove (for example the segments of `alloc_mem`, which outlive windows) does
//! not stay in /dev/shm until the next reboot.
//!
//! The sweep also removes such a job's hub directory in the temporary directory (the
//! launcher's bootstrap socket, [`hub_dir`]), which a launcher killed by a signal leaves.
//!
//! The file is created under a temporary name outside the `onesided.` prefix, locked, then
//! renamed into place, so that no sweeper ever sees it unlocked while its job starts. Jobs
//! without a liveness file (under `mpiexec`, whose per-node reaper cleans up) are never
//! touched.

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::sync::Mutex;

use rustix::fs::FlockOperation;

use crate::error::{Error, Result};
use crate::shm::segment::{random_u64, sweep_job, NAME_PREFIX, SHM_DIR};

/// Suffix of the liveness file after `onesided.<job>`.
const SUFFIX: &str = "live";

/// The liveness files this process holds open (and so locked) until it exits.
static HELD: Mutex<Vec<File>> = Mutex::new(Vec::new());

fn live_path(job: &str) -> String {
    format!("{SHM_DIR}/{NAME_PREFIX}{job}.{SUFFIX}")
}

fn lock(file: &File, op: FlockOperation) -> rustix::io::Result<()> {
    rustix::fs::flock(file, op)
}

/// The launcher's hold on its job's liveness file: the lock and the file go with it (the
/// launcher then sweeps the job's segments itself).
#[derive(Debug)]
pub(crate) struct LiveGuard {
    path: String,
    _file: File,
}

impl Drop for LiveGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Creates job `job`'s liveness file with this process's shared lock on it (the launcher,
/// before any segment of the job exists). The lock is held while the guard lives.
pub(crate) fn create(job: &str) -> Result<LiveGuard> {
    let tmp = format!("{SHM_DIR}/.onesided-new.{:016x}", random_u64());
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| Error::os("create the job's liveness file", e))?;
    let placed = lock(&file, FlockOperation::LockShared)
        .map_err(|e| Error::os("flock", e))
        .and_then(|()| std::fs::rename(&tmp, live_path(job)).map_err(|e| Error::os("rename", e)));
    if let Err(e) = placed {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(LiveGuard {
        path: live_path(job),
        _file: file,
    })
}

/// Takes this process's shared lock on job `job`'s liveness file, if the job has one (a
/// rank started by `osrun`). Held until the process exits.
pub(crate) fn join(job: &str) -> Result<()> {
    let file = match OpenOptions::new().read(true).open(live_path(job)) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::os("open the job's liveness file", e)),
    };
    lock(&file, FlockOperation::LockShared).map_err(|e| Error::os("flock", e))?;
    hold(file);
    Ok(())
}

fn hold(file: File) {
    HELD.lock().unwrap_or_else(|p| p.into_inner()).push(file);
}

/// True when job `job` has a liveness file and no process holds it.
fn is_dead(job: &str) -> bool {
    let Ok(file) = File::open(live_path(job)) else {
        return false;
    };
    // Closing `file` drops the exclusive lock again, should the sweep race a late joiner.
    lock(&file, FlockOperation::NonBlockingLockExclusive).is_ok()
}

/// The directory of job `job`'s hub socket under `dir` (`bootstrap::hub`).
pub(crate) fn hub_dir(dir: &std::path::Path, job: &str) -> std::path::PathBuf {
    dir.join(format!("onesided-hub-{job}"))
}

/// Removes every segment of every job on this node whose processes are all gone, and its
/// hub directory in the temporary directory; returns how many segments were removed.
pub fn sweep_dead_jobs() -> usize {
    let Ok(dir) = std::fs::read_dir(SHM_DIR) else {
        return 0;
    };
    let jobs: BTreeSet<String> = dir
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let rest = name.strip_prefix(NAME_PREFIX)?;
            Some(rest.split('.').next()?.to_owned())
        })
        .collect();
    jobs.iter()
        .filter(|job| is_dead(job))
        .map(|job| {
            // Before the segments: the liveness file goes with them, and a job without one
            // is never taken for dead again.
            let _ = std::fs::remove_dir_all(hub_dir(&std::env::temp_dir(), job));
            sweep_job(job)
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shm::segment::{job_segments, random_job_id};

    #[test]
    fn a_held_job_is_alive_and_an_unheld_one_is_swept() {
        let job = random_job_id();
        let guard = create(&job).unwrap();
        assert!(!is_dead(&job), "this process holds the lock");
        // Another open file description of the same file stands for a second process.
        let dead = random_job_id();
        std::fs::write(live_path(&dead), b"").unwrap();
        let seg = crate::shm::segment::Segment::create(&dead, "0", 10).unwrap();
        std::mem::forget(seg); // a crashed owner
        let (dead_hub, live_hub) = (
            hub_dir(&std::env::temp_dir(), &dead),
            hub_dir(&std::env::temp_dir(), &job),
        );
        std::fs::create_dir(&dead_hub).unwrap();
        std::fs::create_dir(&live_hub).unwrap();
        assert!(is_dead(&dead));
        assert!(sweep_dead_jobs() >= 2);
        assert!(job_segments(&dead).is_empty());
        assert!(!dead_hub.exists(), "a dead job's hub directory is swept");
        assert!(live_hub.exists(), "a live job's hub directory stays");
        std::fs::remove_dir(&live_hub).unwrap();
        assert_eq!(job_segments(&job).len(), 1, "the live job keeps its file");
        drop(guard);
        assert!(
            job_segments(&job).is_empty(),
            "the launcher's file went with its guard"
        );
        // A job without a liveness file is never taken for dead.
        assert!(!is_dead(&random_job_id()));
    }
}
