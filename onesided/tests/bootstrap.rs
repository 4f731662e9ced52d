//! The `local` bootstrap's collectives across real processes.

use onesided::testing;
use onesided::ReduceOp;

#[test]
fn identity_and_barrier() {
    for n in [1, 2, 5] {
        testing::run(n, move |u| {
            let w = u.world();
            assert_eq!(w.size(), n);
            // One node under osrun, unless the tests run over virtual nodes.
            if std::env::var_os(testing::ENV_TEST_NODES).is_none() {
                assert_eq!((w.node_rank(), w.node_size()), (w.rank(), n));
                assert!((0..n).all(|r| matches!(w.node_of(r), Ok(0))));
            }
            check_node_identity(w)?;
            assert!(matches!(
                w.node_of(n),
                Err(onesided::Error::InvalidRank { .. })
            ));
            let ranks = w.allgather(&[w.rank() as u32])?;
            assert_eq!(ranks, (0..n as u32).collect::<Vec<_>>());
            for _ in 0..100 {
                w.barrier()?;
            }
            Ok(())
        });
    }
}

/// Nodes hold consecutive blocks of ranks as even as can be, and a rank's node rank and
/// node size say where it is in its block.
fn check_node_identity(w: &onesided::Comm) -> onesided::Result<()> {
    let n = w.size();
    let nodes: Vec<usize> = (0..n).map(|r| w.node_of(r)).collect::<Result<_, _>>()?;
    assert!(nodes.windows(2).all(|p| p[0] <= p[1]), "blocks: {nodes:?}");
    let count = nodes.last().map_or(0, |&l| l + 1);
    let sizes: Vec<usize> = (0..count)
        .map(|k| nodes.iter().filter(|&&x| x == k).count())
        .collect();
    let (lo, hi) = (sizes.iter().min(), sizes.iter().max());
    assert!(
        hi.zip(lo).is_some_and(|(h, l)| h - l <= 1),
        "even: {sizes:?}"
    );
    let mine: Vec<usize> = (0..n).filter(|&r| nodes[r] == nodes[w.rank()]).collect();
    let here = mine.iter().position(|&r| r == w.rank());
    assert_eq!((Some(w.node_rank()), w.node_size()), (here, mine.len()));
    Ok(())
}

/// `osrun --nodes 2` (here the test harness's equivalent): 5 ranks over two virtual nodes.
#[test]
fn identity_over_two_virtual_nodes() {
    testing::job(5)
        .nodes(2)
        .run(|u| {
            let w = u.world();
            check_node_identity(w)?;
            assert_eq!((0..5).filter_map(|r| w.node_of(r).ok()).max(), Some(1));
            w.barrier()
        })
        .assert_success();
}

#[test]
fn allgather_alltoall_alltoallv() {
    testing::run(4, |u| {
        let w = u.world();
        let (me, n) = (w.rank(), w.size());
        // allgatherv: rank r contributes r*1000 + 3 values (several slot rounds for some).
        let mine: Vec<u64> = (0..me * 10_000 + 3).map(|i| (me * 7 + i) as u64).collect();
        let all = w.allgatherv(&mine)?;
        for (r, v) in all.iter().enumerate() {
            assert_eq!(v.len(), r * 10_000 + 3);
            assert!(v.iter().enumerate().all(|(i, x)| *x == (r * 7 + i) as u64));
        }
        // alltoall: block j of rank i is [i*10+j; 3].
        let send: Vec<i32> = (0..n).flat_map(|j| [(me * 10 + j) as i32; 3]).collect();
        let recv = w.alltoall(&send)?;
        let want: Vec<i32> = (0..n).flat_map(|i| [(i * 10 + me) as i32; 3]).collect();
        assert_eq!(recv, want);
        // alltoallv with empty, small and large pieces.
        let bufs: Vec<Vec<u16>> = (0..n)
            .map(|j| vec![(me * 100 + j) as u16; (me + j) % 3 * 20_000])
            .collect();
        let refs: Vec<&[u16]> = bufs.iter().map(|b| b.as_slice()).collect();
        let got = w.alltoallv(&refs)?;
        for (i, v) in got.iter().enumerate() {
            assert_eq!(*v, vec![(i * 100 + me) as u16; (i + me) % 3 * 20_000]);
        }
        Ok(())
    });
}

#[test]
fn bcast_and_allreduce() {
    testing::run(3, |u| {
        let w = u.world();
        let me = w.rank();
        for root in 0..3 {
            let mut fixed = [me as f64; 4];
            w.bcast(root, &mut fixed)?;
            assert_eq!(fixed, [root as f64; 4]);
            let mut v: Vec<u8> = if me == root {
                vec![root as u8; 100_000]
            } else {
                vec![]
            };
            w.bcast_vec(root, &mut v)?;
            assert_eq!(v, vec![root as u8; 100_000]);
        }
        let mut s = [me as i64 - 1, 10];
        w.allreduce(&mut s, ReduceOp::Sum)?;
        assert_eq!(s, [0, 30]);
        let mut mn = [me as u32 + 5, 100 - me as u32];
        w.allreduce(&mut mn, ReduceOp::Min)?;
        assert_eq!(mn, [5, 98]);
        let mut mx = [me as f64 * 0.5, -(me as f64)];
        w.allreduce(&mut mx, ReduceOp::Max)?;
        assert_eq!(mx, [1.0, 0.0]);
        let mut f = [0.25f32 * me as f32];
        w.allreduce(&mut f, ReduceOp::Sum)?;
        assert_eq!(f, [0.75]);
        assert!(w.agree(true)?);
        assert!(!w.agree(me != 1)?);
        Ok(())
    });
}

#[test]
fn mismatched_collectives_are_errors() {
    testing::run(2, |u| {
        let w = u.world();
        let mine = vec![1u8; w.rank() + 1];
        assert!(
            w.allgather(&mine).is_err(),
            "allgather with different lengths"
        );
        assert!(w.bcast(5, &mut [0u8]).is_err(), "invalid root");
        assert!(
            w.alltoall(&[1u8, 2, 3]).is_err(),
            "3 elements into 2 blocks"
        );
        Ok(())
    });
}

/// `osrun --nodes K` (here `Job::nodes`): consecutive blocks of ranks on K virtual nodes,
/// in every communicator split from the world too; a communicator within one virtual node
/// makes windows as on one machine.
#[test]
fn virtual_nodes_split_the_ranks() {
    testing::job(5)
        .nodes(2)
        .run(|u| {
            let w = u.world();
            let nodes: Vec<usize> = (0..5).map(|r| w.node_of(r)).collect::<Result<_, _>>()?;
            assert_eq!(nodes, [0, 0, 0, 1, 1]);
            let mine = nodes[w.rank()];
            assert_eq!(w.node_size(), if mine == 0 { 3 } else { 2 });
            assert_eq!(w.node_rank(), w.rank() - if mine == 0 { 0 } else { 3 });
            // Ranks 1..5: nodes [0, 0, 1, 1] in the new numbering.
            let sub = w.split(if w.rank() > 0 { Some(0) } else { None }, w.rank())?;
            if let Some(sub) = &sub {
                let sub_nodes: Vec<usize> =
                    (0..4).map(|r| sub.node_of(r)).collect::<Result<_, _>>()?;
                assert_eq!(sub_nodes, [0, 0, 1, 1]);
            }
            // One virtual node's ranks: an ordinary shared-memory window.
            let local = w.split(Some(mine as u32), w.rank())?.expect("a member");
            assert_eq!(local.node_size(), local.size());
            let win = onesided::Window::<u64>::allocate(&local, 1)?;
            win.fence(onesided::Assert::NONE)?;
            win.put(&[w.rank() as u64], (local.rank() + 1) % local.size(), 0)?;
            win.fence(onesided::Assert::NONE)?;
            win.free()?;
            Ok(())
        })
        .assert_success();
}

/// `run_until` reruns the same job of the test until its report is taken, and the jobs
/// after it still reach their own bodies.
#[test]
fn a_rerun_job_is_the_same_job_and_later_jobs_keep_their_bodies() {
    // Unique to the parent process: the ranks read it from the job's environment.
    let counter = std::env::var("RERUN_COUNTER").map_or_else(
        |_| std::env::temp_dir().join(format!("onesided-rerun-{}", std::process::id())),
        std::path::PathBuf::from,
    );
    let path = counter.clone();
    let report = onesided::testing::job(2)
        .env("RERUN_COUNTER", &counter)
        .run_until(
            5,
            |r| r.stdout_of(0).contains("attempt 3"),
            move |u| {
                if u.world().rank() == 0 {
                    let n = std::fs::read_to_string(&path).map_or(0, |s| s.trim().parse().unwrap());
                    std::fs::write(&path, (n + 1).to_string()).expect("write the counter");
                    println!("attempt {}", n + 1);
                }
                u.world().barrier()
            },
        );
    let later = onesided::testing::job(2).run(|u| {
        println!("the later job on rank {}", u.world().rank());
        Ok(())
    });
    if report.job_id.is_empty() {
        return;
    }
    let _ = std::fs::remove_file(&counter);
    report.assert_success();
    assert!(
        report.stdout_of(0).contains("attempt 3"),
        "{}",
        report.outputs_for_humans()
    );
    later.assert_success();
    assert!(later.stdout_of(1).contains("the later job on rank 1"));
}
