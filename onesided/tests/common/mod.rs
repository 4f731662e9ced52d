//! Helpers shared by the multi-rank tests: windows of every memory kind.

#![allow(dead_code)]

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use onesided::{alloc_mem, Assert, Comm, Error, Pod, WinInfo, Window};

/// The memory kinds a window can have; each reaches peers' memory differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `allocate`: node segment, symmetric.
    Allocate,
    /// `allocate_shared`.
    Shared,
    /// `create` over a Vec: cross-memory attach.
    CreateVec,
    /// `create` over alloc_mem: load/store.
    CreateAllocMem,
    /// `create_dynamic` + a Vec: cross-memory attach.
    DynamicVec,
    /// `create_dynamic` + alloc_mem: load/store.
    DynamicAllocMem,
}

impl Kind {
    /// A job of `ranks` ranks for a test of this kind: `allocate_shared` windows exist
    /// within one node only (across nodes creating one is MPI_ERR_RMA_SHARED, which
    /// tests/across_nodes.rs checks), so their jobs stay on one node whatever
    /// `ONESIDED_TEST_NODES` says; every other kind runs as the environment places it.
    pub fn job(self, ranks: usize) -> onesided::testing::Job {
        let job = onesided::testing::job(ranks);
        if self == Kind::Shared {
            job.nodes(1)
        } else {
            job
        }
    }

    /// The kinds a window over `w` can have: every kind on one node, all but
    /// `allocate_shared` across nodes.
    pub fn all_over(w: &Comm) -> Vec<Kind> {
        let one_node = w.node_size() == w.size();
        Kind::ALL
            .into_iter()
            .filter(|&k| one_node || k != Kind::Shared)
            .collect()
    }

    pub const ALL: [Kind; 6] = [
        Kind::Allocate,
        Kind::Shared,
        Kind::CreateVec,
        Kind::CreateAllocMem,
        Kind::DynamicVec,
        Kind::DynamicAllocMem,
    ];
}

/// A window of `len` elements per rank, with the displacement of element 0 at each rank
/// and the displacement step per element (1, or the element size for dynamic windows).
pub struct Fixture<T: Pod> {
    pub win: Window<T>,
    pub base: Vec<usize>,
    pub scale: usize,
}

impl<T: Pod> Fixture<T> {
    pub fn new(w: &Comm, kind: Kind, len: usize) -> onesided::Result<Self> {
        let n = w.size();
        let win = match kind {
            Kind::Allocate => Window::<T>::allocate(w, len)?,
            Kind::Shared => Window::<T>::allocate_shared(w, len)?,
            Kind::CreateVec => Window::create(w, vec![T::zeroed(); len])?,
            Kind::CreateAllocMem => Window::create(w, alloc_mem::<T>(len)?)?,
            Kind::DynamicVec | Kind::DynamicAllocMem => {
                let win = Window::<T>::create_dynamic(w)?;
                let region = if kind == Kind::DynamicVec {
                    win.attach(vec![T::zeroed(); len])?
                } else {
                    win.attach(alloc_mem::<T>(len)?)?
                };
                let addrs = w.allgather(&[region.addr as u64])?;
                return Ok(Fixture {
                    win,
                    base: addrs.iter().map(|&a| a as usize).collect(),
                    scale: std::mem::size_of::<T>(),
                });
            }
        };
        Ok(Fixture {
            win,
            base: vec![0; n],
            scale: 1,
        })
    }

    /// Displacement of element `elem` at `target`.
    pub fn disp(&self, target: usize, elem: usize) -> usize {
        self.base[target] + elem * self.scale
    }

    /// Reads this rank's elements `at..at+out.len()`.
    pub fn read_local(&self, at: usize, out: &mut [T]) -> onesided::Result<()> {
        self.win.local_read(self.disp(self.win.rank(), at), out)
    }

    /// Writes this rank's elements `at..`.
    pub fn write_local(&self, at: usize, src: &[T]) -> onesided::Result<()> {
        self.win.local_write(self.disp(self.win.rank(), at), src)
    }

    pub fn free(self) -> onesided::Result<()> {
        drop(self.win.free()?);
        Ok(())
    }
}

/// A small deterministic generator (xorshift64*), so every rank can replay every other
/// rank's choices.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Mismatched window collectives on `w` (at least 2 ranks): rank 0 calls `set_info`, then
/// `fence`, while every other rank calls `free`. Each time every rank must get
/// `CollectiveMismatch` naming both calls (before: `free` returned Ok and unmapped while
/// rank 0 waited in `set_info` forever; `fence` against `free` hung both). The communicator
/// stays usable: window collectives are numbered per window.
pub fn window_collectives_mismatch(w: &Comm) -> onesided::Result<()> {
    for first in ["set_info", "fence"] {
        let win = Window::<u64>::allocate(w, 8)?;
        win.fence(Assert::NONE)?;
        let r = if w.rank() == 0 {
            match first {
                "set_info" => {
                    let mut info = WinInfo::new();
                    info.set("no_locks", "true");
                    win.set_info(&info)
                }
                _ => win.fence(Assert::NONE),
            }
        } else {
            win.free().map(drop)
        };
        let (mine, theirs) = if w.rank() == 0 {
            (first, "free")
        } else {
            ("free", first)
        };
        match r {
            Err(Error::CollectiveMismatch { call, other, .. })
                if (call, other) == (mine, theirs) => {}
            other => panic!("rank {}: {first} vs free gave {other:?}", w.rank()),
        }
        w.barrier()?;
    }
    Ok(())
}

/// Drives a future to completion on this thread, without an async runtime (requests need
/// no reactor: polling them drives progress).
pub fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::yield_now();
    }
}

/// Stops process `pid` (a rank on this machine) until it is sent `SIGCONT`, and returns
/// once the system says it is stopped (the stop takes effect at the process's next return
/// from the kernel), and a little more.
pub fn stop(pid: u64) {
    let id = rustix::process::Pid::from_raw(pid as i32).expect("a pid");
    rustix::process::kill_process(id, rustix::process::Signal::STOP).expect("stop");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        if status
            .lines()
            .any(|l| l.starts_with("State:") && l.contains("T (stopped)"))
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "rank {pid} never stopped"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    std::thread::sleep(std::time::Duration::from_millis(50));
}

/// Runs `cmd` (a launcher with its job) to its end with stdout and stderr in files (not
/// pipes: nobody reads a pipe while the caller waits); panics with both when it runs longer
/// than `limit`. Returns whether it succeeded, its stdout and stderr, and how long it took.
pub fn run_launcher(
    mut cmd: std::process::Command,
    what: &str,
    limit: std::time::Duration,
) -> (bool, String, String, std::time::Duration) {
    use std::process::Stdio;
    let out_path = std::env::temp_dir().join(format!("{what}-{}.out", std::process::id()));
    let err_path = out_path.with_extension("err");
    let mut child = cmd
        .stdout(Stdio::from(
            std::fs::File::create(&out_path).expect("stdout file"),
        ))
        .stderr(Stdio::from(
            std::fs::File::create(&err_path).expect("stderr file"),
        ))
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot start the launcher: {e}"));
    let start = std::time::Instant::now();
    let read = || {
        (
            std::fs::read_to_string(&out_path).unwrap_or_default(),
            std::fs::read_to_string(&err_path).unwrap_or_default(),
        )
    };
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let (stdout, stderr) = read();
            panic!("{what}: the job timed out:\n{stdout}\n{stderr}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let took = start.elapsed();
    let (stdout, stderr) = read();
    let _ = std::fs::remove_file(&out_path);
    let _ = std::fs::remove_file(&err_path);
    (status.success(), stdout, stderr, took)
}
