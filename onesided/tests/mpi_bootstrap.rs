//! onesided under a host `mpiexec` (feature `mpi`).
//!
//! Each test re-executes this test binary under `mpiexec -n 3` with a marker variable set;
//! the ranks then run the test body. `ONESIDED_MPIEXEC` names the launcher and its options
//! (default `mpiexec`; for Open MPI as root: `mpiexec.openmpi --allow-run-as-root
//! --oversubscribe`); it must belong to the MPI this binary links.
#![cfg(feature = "mpi")]

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use onesided::mpi::topology::{Color, Communicator};
use onesided::{alloc_mem, Assert, Call, Comm, Error, LockType, Op, ReduceOp, Window};

const CHILD: &str = "ONESIDED_MPI_TEST_CHILD";
const RANKS: usize = 3;

/// Runs the test `test` of this binary as the ranks of an mpiexec job; returns whether the
/// job succeeded, and its stdout and stderr.
fn run_mpiexec(test: &str) -> (bool, String, String) {
    run_mpiexec_with(test, &[])
}

/// [`run_mpiexec`] with `env` set for the job.
fn run_mpiexec_with(test: &str, env: &[(&str, &str)]) -> (bool, String, String) {
    let launcher = std::env::var("ONESIDED_MPIEXEC").unwrap_or_else(|_| "mpiexec".into());
    let mut words = launcher.split_whitespace();
    let mut cmd = Command::new(words.next().expect("launcher"));
    cmd.args(words)
        .args(["-n", &RANKS.to_string()])
        .arg(std::env::current_exe().expect("test binary"))
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .envs(env.iter().copied());
    let (ok, stdout, stderr, _) = common::run_launcher(cmd, test, Duration::from_secs(60));
    (ok, stdout, stderr)
}

/// In the parent: runs `test` under mpiexec and checks that every rank passed. In a rank:
/// returns true, and the caller runs the body.
fn under_mpiexec(test: &str) -> bool {
    under_mpiexec_with(test, &[])
}

/// [`under_mpiexec`] with `env` set for the job.
fn under_mpiexec_with(test: &str, env: &[(&str, &str)]) -> bool {
    if std::env::var_os(CHILD).is_some() {
        return true;
    }
    let (ok, stdout, stderr) = run_mpiexec_with(test, env);
    assert!(ok, "{test} failed under mpiexec:\n{stdout}\n{stderr}");
    // Each rank's harness reports its one test as passed.
    assert_eq!(
        stdout.matches("1 passed").count(),
        RANKS,
        "{test}: not every rank ran the test:\n{stdout}\n{stderr}"
    );
    false
}

/// The job's segments in /dev/shm.
fn segments_of(job: &str) -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&format!("onesided.{job}.")))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_crashed_rank_leaves_no_segments() {
    const TEST: &str = "a_crashed_rank_leaves_no_segments";
    if std::env::var_os(CHILD).is_none() {
        let (ok, stdout, stderr) = run_mpiexec(TEST);
        assert!(!ok, "the job should fail:\n{stdout}\n{stderr}");
        let job = stdout
            .lines()
            .find_map(|l| l.split_once("JOB=").map(|(_, id)| id))
            .unwrap_or_else(|| panic!("no job id:\n{stdout}\n{stderr}"))
            .trim()
            .to_owned();
        // The node's reaper polls every 0.2 s.
        let start = Instant::now();
        while !segments_of(&job).is_empty() {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "segments left behind: {:?}",
                segments_of(&job)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        return;
    }
    let u = onesided::init().unwrap();
    let w = u.world();
    // alloc_mem segments keep their names while allocated: the ones a crash could leave.
    let mem = alloc_mem::<u64>(1024).unwrap();
    let win = Window::create(w, mem).unwrap();
    assert!(!segments_of(w.job_id()).is_empty());
    if w.rank() == 0 {
        println!("JOB={}", w.job_id());
    }
    use std::io::Write;
    std::io::stdout().flush().unwrap();
    w.barrier().unwrap();
    if w.rank() == 1 {
        std::process::abort();
    }
    // The others wait for the launcher to end the job.
    win.fence(Assert::NONE).unwrap();
    std::thread::sleep(Duration::from_secs(60));
}

/// With `ONESIDED_HANG_REPORT` a wait reports what it waits for once it lasts that long —
/// under mpiexec, the timer alone: rank 0 waits in `start` for rank 1, which posts only
/// after 1.5 s, and rank 2 in a barrier; rank 0 names the call and the peer, rank 2 the
/// barrier, rank 1 (asleep outside the library) nothing, and the job then ends normally.
#[test]
fn a_long_wait_reports_itself_under_mpiexec() {
    const TEST: &str = "a_long_wait_reports_itself_under_mpiexec";
    if std::env::var_os(CHILD).is_none() {
        let (ok, stdout, stderr) = run_mpiexec_with(TEST, &[("ONESIDED_HANG_REPORT", "0.5")]);
        assert!(ok, "{stdout}\n{stderr}");
        let reports: Vec<&str> = stderr
            .lines()
            .filter(|l| l.contains("hang report"))
            .collect();
        assert_eq!(reports.len(), 2, "{stderr}");
        let of = |rank: usize| {
            reports
                .iter()
                .find(|r| r.starts_with(&format!("[onesided rank {rank}] hang report after 0.")))
                .unwrap_or_else(|| panic!("no report of rank {rank}: {stderr}"))
        };
        assert!(
            of(0).contains("MPI_Win_start waits for rank 1: its MPI_Win_post"),
            "{stderr}"
        );
        assert!(of(2).contains("MPI_Barrier"), "{stderr}");
        return;
    }
    let u = onesided::init().unwrap();
    let w = u.world();
    let win = Window::<u64>::allocate(w, 1).unwrap();
    w.barrier().unwrap();
    match w.rank() {
        0 => {
            win.start(&onesided::Group::single(1), Assert::NONE)
                .unwrap();
            win.complete().unwrap();
        }
        1 => {
            std::thread::sleep(Duration::from_millis(1500));
            win.post(&onesided::Group::single(0), Assert::NONE).unwrap();
            win.wait().unwrap();
        }
        _ => {}
    }
    w.barrier().unwrap();
    win.free().unwrap();
}

/// Runs `test` under mpiexec and checks that the job fails within 5 s; returns its stdout
/// and stderr.
fn job_fails_within_5s(test: &str) -> String {
    let start = Instant::now();
    let (ok, stdout, stderr) = run_mpiexec(test);
    let took = start.elapsed();
    let output = format!("{stdout}\n{stderr}");
    assert!(!ok, "the job should fail:\n{output}");
    assert!(took < Duration::from_secs(5), "took {took:?}:\n{output}");
    output
}

/// A rank that fails while its peers wait in a shared-memory fence: under `mpiexec` the
/// job must end within 5 s with a non-zero status (before: the failing rank's exit ran
/// MPI_Finalize, which waited for the peers, which waited for it — forever).
fn failing_rank_ends_the_job(test: &str, fail: fn()) {
    if std::env::var_os(CHILD).is_none() {
        job_fails_within_5s(test);
        return;
    }
    let u = onesided::init().unwrap();
    let w = u.world();
    let win = Window::<u64>::allocate(w, 8).unwrap();
    w.barrier().unwrap();
    if w.rank() == 1 {
        fail();
    }
    // The others wait in a fence rank 1 never reaches, until the launcher ends the job.
    let _ = win.fence(Assert::NONE);
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn a_panicking_rank_ends_the_job() {
    failing_rank_ends_the_job("a_panicking_rank_ends_the_job", || {
        // libtest catches the panic and exits with status 101, as a panicking main would.
        panic!("rank 1 gives up")
    });
}

#[test]
fn a_rank_exiting_non_zero_ends_the_job() {
    failing_rank_ends_the_job("a_rank_exiting_non_zero_ends_the_job", || {
        std::process::exit(3)
    });
}

/// Mismatched collective calls under mpiexec, as in `collectives.rs`: on a window
/// (`set_info` and `fence` against `free`: exact, through the window's tags), then on the
/// communicator (a tagged agreement of MPI collectives: `barrier` against `allgather`).
#[test]
fn mismatched_collectives_fail_at_every_rank() {
    if !under_mpiexec("mismatched_collectives_fail_at_every_rank") {
        return;
    }
    let u = onesided::init().unwrap();
    let w = u.world();
    common::window_collectives_mismatch(w).unwrap();
    let r = if w.rank() == 0 {
        w.barrier().map(drop)
    } else {
        w.allgather(&[1u8]).map(drop)
    };
    assert!(
        matches!(r, Err(Error::CollectiveMismatch { .. })),
        "rank {}: {r:?}",
        w.rank()
    );
}

/// `Comm::barrier` at rank 0 against `fence` elsewhere: the ranks that see the deadlock
/// (after about a second) report it and fail, and the job ends within 10 s.
#[test]
fn collectives_in_different_orders_end_the_job() {
    const TEST: &str = "collectives_in_different_orders_end_the_job";
    if std::env::var_os(CHILD).is_none() {
        let start = Instant::now();
        let (_, stdout, stderr) = run_mpiexec(TEST);
        let took = start.elapsed();
        let output = format!("{stdout}\n{stderr}");
        assert!(took < Duration::from_secs(10), "took {took:?}:\n{output}");
        assert!(output.contains("waits for this process in"), "{output}");
        return;
    }
    let u = onesided::init().unwrap();
    let w = u.world();
    let win = Window::<u64>::allocate(w, 8).unwrap();
    let r = if w.rank() == 0 {
        w.barrier()
    } else {
        win.fence(Assert::NONE)
    };
    match r {
        Err(e @ (Error::CollectiveDeadlock { .. } | Error::PeerExited { .. })) => {
            println!("rank {}: {e}", w.rank())
        }
        other => panic!("rank {}: {other:?}", w.rank()),
    }
    // The communicator and the window are out of step now: end as an application would
    // after such an error, with a failing status (every rank then aborts; a rank that
    // finalized while others abort can hang Open MPI 4.1's mpirun).
    std::mem::forget(win);
    std::process::exit(3);
}

/// A rank that exits with status 0 while its peers wait for it in a collective (a window
/// fence, or a communicator barrier over MPI): its exit handler sees the stranded peers and
/// aborts the job naming itself (or, if it leaves before they wait, they get `PeerExited`
/// naming it and fail), and the job ends within 5 s (before: a hang).
fn rank_exiting_inside_a_collective(test: &str, in_window: bool) {
    if std::env::var_os(CHILD).is_none() {
        let output = job_fails_within_5s(test);
        // Rank 1 names itself as it aborts the job, or the peers name it.
        assert!(output.contains("rank 1 exited"), "{output}");
        return;
    }
    let u = onesided::init().unwrap();
    let w = u.world();
    let win = Window::<u64>::allocate(w, 8).unwrap();
    w.barrier().unwrap();
    if w.rank() == 1 {
        std::process::exit(0);
    }
    let r = if in_window {
        win.fence(Assert::NONE)
    } else {
        w.barrier()
    };
    if let Err(e) = r {
        panic!("rank {}: {e}", w.rank());
    }
}

#[test]
fn a_rank_exiting_inside_a_fence_ends_the_job() {
    rank_exiting_inside_a_collective("a_rank_exiting_inside_a_fence_ends_the_job", true);
}

#[test]
fn a_rank_exiting_inside_a_barrier_ends_the_job() {
    rank_exiting_inside_a_collective("a_rank_exiting_inside_a_barrier_ends_the_job", false);
}

#[test]
fn bootstrap_collectives_through_mpi() {
    if !under_mpiexec("bootstrap_collectives_through_mpi") {
        return;
    }
    let u = onesided::init().unwrap();
    let w = u.world();
    let (me, n) = (w.rank(), w.size());
    assert_eq!(n, RANKS);
    assert_eq!(w.bootstrap().node_size(), RANKS, "one node");
    assert!(
        (0..RANKS).all(|r| matches!(w.node_of(r), Ok(0))),
        "one node"
    );
    // Every rank has the same job id.
    let ids = w
        .bootstrap()
        .allgatherv(Call::Allgather, w.job_id().as_bytes())
        .unwrap();
    assert!(ids.iter().all(|id| id == w.job_id().as_bytes()));
    let parts: Vec<Vec<u8>> = (0..n).map(|j| vec![me as u8; j + me]).collect();
    let refs: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
    let got = w.bootstrap().alltoallv(Call::Alltoall, &refs).unwrap();
    for (src, part) in got.iter().enumerate() {
        assert_eq!(part, &vec![src as u8; me + src]);
    }
    // The two-sided alltoallv moves blocks in place through MPI_Alltoallv: rank s sends
    // s + d + 1 elements to rank d, packed in rank order.
    let count = |s: usize, d: usize| s + d + 1;
    let sendcounts: Vec<usize> = (0..n).map(|d| count(me, d)).collect();
    let recvcounts: Vec<usize> = (0..n).map(|s| count(s, me)).collect();
    let packed = |c: &[usize]| -> Vec<usize> {
        c.iter()
            .scan(0, |at, &k| Some(std::mem::replace(at, *at + k)))
            .collect()
    };
    let (sdispls, rdispls) = (packed(&sendcounts), packed(&recvcounts));
    let send: Vec<u64> = (0..n)
        .flat_map(|d| (0..count(me, d)).map(move |k| (me * 1000 + d * 100 + k) as u64))
        .collect();
    let mut recv = vec![0u64; recvcounts.iter().sum()];
    onesided::alltoallv_two_sided(
        w,
        &send,
        &sendcounts,
        &sdispls,
        &mut recv,
        &recvcounts,
        &rdispls,
    )
    .unwrap();
    for s in 0..n {
        for k in 0..count(s, me) {
            assert_eq!(recv[rdispls[s] + k], (s * 1000 + me * 100 + k) as u64);
        }
    }
    // A receive count that differs from its sender's fails at every rank, before any data
    // moves.
    let mut wrong = recvcounts.clone();
    if me == 0 {
        wrong[1] -= 1;
    }
    let err =
        onesided::alltoallv_two_sided(w, &send, &sendcounts, &sdispls, &mut recv, &wrong, &rdispls);
    assert!(err.is_err(), "rank {me}: {err:?}");
    let mut big = if me == 1 { vec![7u8; 1 << 20] } else { vec![] };
    w.bootstrap().bcast(Call::Bcast, 1, &mut big).unwrap();
    assert_eq!(big, vec![7u8; 1 << 20]);
    let mut sum = [me as u64 + 1];
    w.allreduce(&mut sum, ReduceOp::Sum).unwrap();
    assert_eq!(sum, [6]);
    w.barrier().unwrap();
}

/// A host MPI told that no two of its processes share memory (MPICH's
/// `MPIR_CVAR_NOLOCAL=1`, how a job forces MPICH onto its network path; Open MPI ignores the
/// variable) answers `MPI_COMM_TYPE_SHARED` with singletons: onesided still finds its node
/// itself — one node of every rank, every rank counted on this machine — and shares memory
/// across it (before, every rank was a node of its own: same-machine peers over the
/// network, waits tuned for a core per process).
#[test]
fn a_host_that_shares_no_memory_leaves_the_node_whole() {
    let env = [("MPIR_CVAR_NOLOCAL", "1")];
    if !under_mpiexec_with("a_host_that_shares_no_memory_leaves_the_node_whole", &env) {
        return;
    }
    let u = onesided::init().unwrap();
    let w = u.world();
    let n = w.size();
    assert_eq!(w.node_size(), n, "one node");
    assert!((0..n).all(|r| matches!(w.node_of(r), Ok(0))), "one node");
    assert_eq!(w.bootstrap().processes_on_this_machine(), n);
    let win = Window::<u64>::allocate_shared(w, 4).unwrap();
    let regions: Vec<_> = (0..n)
        .map(|r| win.shared_query(r).unwrap().expect("shared memory"))
        .collect();
    assert!(regions.iter().all(|r| r.len() == 4));
    fence_ring(w, &win);
    drop(win.free().unwrap());
}

/// One fence epoch in which every rank puts its mark into its right neighbour's first four
/// elements; each then finds its left neighbour's.
fn fence_ring(w: &Comm, win: &Window<u64>) {
    let (me, n) = (w.rank(), w.size());
    win.fence(Assert::NONE).unwrap();
    win.put(&[100 + me as u64; 4], (me + 1) % n, 0).unwrap();
    win.fence(Assert::NONE).unwrap();
    let mut mine = [0u64; 4];
    win.local_read(0, &mut mine).unwrap();
    let left = (me + n - 1) % n;
    assert_eq!(mine, [100 + left as u64; 4], "{:?}", win.flavor());
}

#[test]
fn every_window_kind_under_mpiexec() {
    if !under_mpiexec("every_window_kind_under_mpiexec") {
        return;
    }
    let u = onesided::init().unwrap();
    let w = u.world();
    let (me, n) = (w.rank(), w.size());
    let heap = alloc_mem::<u64>(8).unwrap();
    let wins = vec![
        Window::<u64>::allocate(w, 8).unwrap(),
        Window::<u64>::allocate_shared(w, 8).unwrap(),
        Window::create(w, heap).unwrap(),
        // Ordinary memory: reached with cross-memory attach.
        Window::create(w, vec![0u64; 8]).unwrap(),
    ];
    for win in &wins {
        fence_ring(w, win);
        win.lock(LockType::Shared, 0, Assert::NONE).unwrap();
        win.accumulate(&[1u64], 0, 7, Op::Sum).unwrap();
        win.unlock(0).unwrap();
        w.barrier().unwrap();
        if me == 0 {
            let mut total = [0u64];
            win.local_read(7, &mut total).unwrap();
            assert_eq!(total, [n as u64], "{:?}", win.flavor());
        }
        w.barrier().unwrap();
    }
    for win in wins {
        drop(win.free().unwrap());
    }
}

/// `ONESIDED_NODES=2` splits the host job into two virtual nodes (ranks 0 and 1 on one,
/// rank 2 on the other; feature `ofi`): windows of every creation kind reach the other node
/// through the network, and RMA, accumulates, atomics, fence and locks work across it as
/// under `osrun --nodes 2` — the path ranks on separate hosts take.
#[cfg(feature = "ofi")]
#[test]
fn windows_across_virtual_nodes_under_mpiexec() {
    let env = [("ONESIDED_NODES", "2"), ("ONESIDED_NET_ADDR", "127.0.0.1")];
    if !under_mpiexec_with("windows_across_virtual_nodes_under_mpiexec", &env) {
        return;
    }
    let u = onesided::init().unwrap();
    let w = u.world();
    let (me, n) = (w.rank(), w.size());
    let nodes: Vec<usize> = (0..n).map(|r| w.node_of(r).unwrap()).collect();
    assert_eq!(nodes, vec![0, 0, 1], "two virtual nodes");
    assert_eq!(w.node_size(), if me < 2 { 2 } else { 1 });
    let wins = vec![
        Window::<u64>::allocate(w, 8).unwrap(),
        Window::create(w, vec![0u64; 8]).unwrap(),
    ];
    for win in &wins {
        fence_ring(w, win);
        for _ in 0..10 {
            win.lock(LockType::Exclusive, 2, Assert::NONE).unwrap();
            win.accumulate(&[1u64], 2, 7, Op::Sum).unwrap();
            win.fetch_and_op(1u64, 2, 6, Op::Sum).unwrap();
            win.unlock(2).unwrap();
        }
        w.barrier().unwrap();
        if me == 2 {
            let mut totals = [0u64; 2];
            win.local_read(6, &mut totals).unwrap();
            assert_eq!(totals, [10 * n as u64; 2], "{:?}", win.flavor());
        }
        w.barrier().unwrap();
    }
    for win in wins {
        drop(win.free().unwrap());
    }
}

/// `init_thread(Multiple)` initializes the host MPI with MPI_THREAD_MULTIPLE (MPICH and
/// Open MPI both provide it), and 4 threads of each rank then share one window: every
/// fetch_and_op on rank 0's counter is counted.
#[test]
fn threads_share_a_window_under_mpiexec() {
    if !under_mpiexec("threads_share_a_window_under_mpiexec") {
        return;
    }
    const THREADS: u64 = 4;
    const ITERS: u64 = 500;
    let u = onesided::init_thread(onesided::ThreadLevel::Multiple).unwrap();
    assert_eq!(u.thread_level(), onesided::ThreadLevel::Multiple);
    let w = u.world();
    let win = Window::<u64>::allocate(w, 1).unwrap();
    win.lock_all(Assert::NONE).unwrap();
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                for _ in 0..ITERS {
                    win.fetch_and_op(1, 0, 0, Op::Sum).unwrap();
                }
            });
        }
    });
    win.unlock_all().unwrap();
    w.barrier().unwrap();
    if w.rank() == 0 {
        let mut total = [0u64];
        win.local_read(0, &mut total).unwrap();
        assert_eq!(total, [w.size() as u64 * THREADS * ITERS]);
    }
    win.free().unwrap();
}

#[test]
fn windows_over_mpi_subcommunicators() {
    if !under_mpiexec("windows_over_mpi_subcommunicators") {
        return;
    }
    let u = onesided::init().unwrap();
    let me = u.rank();
    let mpi_world = onesided::mpi::topology::SimpleCommunicator::world();
    // Ranks {0, 2} via MPI's own split; rank 1 is in no group.
    let color = if me == 1 {
        Color::undefined()
    } else {
        Color::with_value(0)
    };
    let pair = mpi_world.split_by_color(color);
    assert_eq!(pair.is_none(), me == 1);
    if let Some(pair) = pair {
        let comm = Comm::from_mpi(&pair).unwrap();
        assert_eq!((comm.size(), comm.rank()), (2, me / 2));
        // Processes of one job: the communicator joins it (no new roster, reaper or exit
        // handler per communicator).
        assert_eq!(comm.job_id(), u.world().job_id());
        let win = Window::<u32>::allocate(&comm, 2).unwrap();
        win.lock_all(Assert::NONE).unwrap();
        win.put(&[me as u32 + 1], 1 - comm.rank(), 1).unwrap();
        win.unlock_all().unwrap();
        comm.barrier().unwrap();
        let mut got = [0u32; 2];
        win.local_read(0, &mut got).unwrap();
        assert_eq!(got, [0, (2 - me) as u32 + 1]);
        win.free().unwrap();
    }
    // onesided's own split goes through MPI_Comm_split.
    let w = u.world();
    let half = w.split(Some((me % 2) as u32), me).unwrap().unwrap();
    assert_eq!(half.size(), if me % 2 == 0 { 2 } else { 1 });
    let win = Window::<u8>::allocate(&half, 16).unwrap();
    win.fence(Assert::NONE).unwrap();
    win.put(&[me as u8; 8], 0, half.rank() * 8).unwrap();
    win.fence(Assert::NONE).unwrap();
    win.free().unwrap();
    w.barrier().unwrap();
}

/// Without a progress thread (`ONESIDED_PROGRESS=none`), ranks whose nonblocking fences
/// still have to complete puts and signals to the other node enter a bootstrap collective
/// that moves its data through the host MPI (a large `bcast`, a `split`). The waits of the
/// collective's entry drive the pending fences, and a fence's flush needs its targets'
/// progress — which a target that had left the entry for the host MPI's blocking transfer
/// used not to make: the job hung (3 of 4 runs of `osbench alltoallv` at 4 ranks). Now
/// every rank enters such a transfer only once all have left the waits that drive pending
/// epochs, making progress on the network meanwhile.
#[cfg(feature = "ofi")]
#[test]
fn pending_fences_across_nodes_do_not_block_bootstrap_transfers() {
    let env = [
        ("ONESIDED_NODES", "2"),
        ("ONESIDED_NET_ADDR", "127.0.0.1"),
        ("ONESIDED_PROGRESS", "none"),
    ];
    if !under_mpiexec_with(
        "pending_fences_across_nodes_do_not_block_bootstrap_transfers",
        &env,
    ) {
        return;
    }
    let u = onesided::init().unwrap();
    let w = u.world();
    let (me, n) = (w.rank(), w.size());
    let win = Window::<u64>::allocate(w, n).unwrap();
    win.fence(Assert::NONE).unwrap();
    for round in 1..=200u64 {
        // Every rank puts to both others: at least one of them is on the other node.
        for t in (0..n).filter(|&t| t != me) {
            win.put(&[round], t, me).unwrap();
        }
        let fence = win.ifence(Assert::NONE).unwrap();
        let root = round as usize % n;
        if round % 20 == 0 {
            drop(w.split(Some(0), me).unwrap());
        } else {
            // 64 KiB: past what travels with the entry of the collective.
            let mut block = vec![if me == root { round } else { 0 }; 8192];
            w.bcast(root, &mut block).unwrap();
            assert!(block.iter().all(|&v| v == round));
        }
        fence.wait().unwrap();
        let mut got = vec![0u64; n];
        win.local_read(0, &mut got).unwrap();
        for (s, &v) in got.iter().enumerate() {
            assert_eq!(
                v,
                if s == me { 0 } else { round },
                "round {round}, from {s}"
            );
        }
        // The next round's puts come after this read.
        w.barrier().unwrap();
    }
    win.free().unwrap();
}
