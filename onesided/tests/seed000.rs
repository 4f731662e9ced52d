//! Seed 000's per-handle info: `mpi_win_scope`, `mpi_win_order`, intrinsic accumulates,
//! window duplicates and remote-completing requests.

use std::time::Duration;

use onesided::{testing, Assert, Error, LockType, Op, WinBuffer, WinInfo, WinScope, Window};

/// A thread-scope flush writes the calling thread's staged puts and leaves another thread's
/// staged put where it is; a process-scope flush (through a duplicate) writes it. Rank 0
/// reads rank 1's memory back with gets (which wait only for the reader's own staged puts).
/// Staging is the cross-memory-attach path of one node, so the job stays on one node;
/// across nodes a thread-scope flush completes every thread's network operations (more
/// than it must) until they are counted per thread.
#[test]
fn thread_scope_flush_completes_only_the_callers_operations() {
    testing::job(2)
        .nodes(1)
        .run(|u| {
            let w = u.world();
            let info = WinInfo::new().scope(WinScope::Thread);
            let win = Window::<u64>::builder(w)
                .info(&info)
                .create(WinBuffer::from(vec![0u64; 4]))?;
            assert_eq!(win.get_info().get("mpi_win_scope"), Some("thread"));
            let process = win.dup_with_info(&WinInfo::new().scope(WinScope::Process))?;
            assert_eq!(process.get_info().get("mpi_win_scope"), Some("process"));
            assert_eq!(
                win.hints().scope,
                WinScope::Thread,
                "the parent keeps its own"
            );
            if w.rank() == 0 {
                win.lock_all(Assert::NONE)?;
                // Another thread stages a small put (memory reached by cross-memory attach)
                // and never flushes.
                std::thread::scope(|s| s.spawn(|| win.put(&[11], 1, 1)).join().unwrap())?;
                win.put(&[22], 1, 0)?;
                win.flush(1)?;
                let mut got = [0u64; 2];
                win.get(&mut got, 1, 0)?;
                assert_eq!(
                    got,
                    [22, 0],
                    "thread scope: the other thread's put is not ours"
                );
                win.flush_all()?;
                win.get(&mut got, 1, 0)?;
                assert_eq!(got, [22, 0], "thread-scope flush_all neither");
                process.flush(1)?;
                win.get(&mut got, 1, 0)?;
                assert_eq!(
                    got,
                    [22, 11],
                    "process scope completes every thread's operations"
                );
                // unlock completes everything whatever the scope.
                std::thread::scope(|s| s.spawn(|| win.put(&[33], 1, 2)).join().unwrap())?;
                win.unlock_all()?;
                win.lock_all(Assert::NONE)?;
                win.get(&mut got, 1, 1)?;
                assert_eq!(got, [11, 33]);
                // Let rank 1 go on.
                win.put(&[1], 1, 3)?;
                win.unlock_all()?;
            } else {
                // Outside the library until rank 0 is done: a target waiting inside it would
                // serve rank 0's puts from its request ring at once, and none would stay
                // pending for the test to see.
                let mut go = [0u64];
                while go[0] == 0 {
                    std::thread::sleep(Duration::from_millis(1));
                    win.local_read(3, &mut go)?;
                }
            }
            w.barrier()?;
            drop(process);
            win.free()?;
            Ok(())
        })
        .assert_success();
}

const SIGNALS: u64 = 1_000_000;
const DATA: usize = 0;
const FLAG: usize = 8;

/// Rank 0 writes i into DATA and then raises FLAG to i, `SIGNALS` times, without a flush in
/// between (ordered put + accumulate, or rrput + wait + accumulate); rank 1 reads FLAG and
/// then DATA and must never see data older than the flag.
fn signal_after_data(w: &onesided::Comm, win: &Window<u64>, rrput: bool) -> onesided::Result<()> {
    // Across nodes every signal is a network round trip or more: fewer of them.
    let signals = if w.node_size() == w.size() {
        SIGNALS
    } else {
        SIGNALS / 500
    };
    win.lock_all(Assert::NONE)?;
    if w.rank() == 0 {
        for i in 1..=signals {
            if rrput {
                win.rrput(&[i], 1, DATA)?.wait()?;
            } else {
                win.put(&[i], 1, DATA)?;
            }
            win.accumulate(&[1], 1, FLAG, Op::Sum)?;
        }
    } else {
        let mut seen = 0;
        let mut data = [0u64];
        while seen < signals {
            let flag = win.fetch_and_op(0, 1, FLAG, Op::NoOp)?;
            win.get(&mut data, 1, DATA)?;
            assert!(
                data[0] >= flag,
                "stale data {} behind flag {flag} ({:?}, rrput {rrput})",
                data[0],
                win.flavor()
            );
            seen = flag;
        }
    }
    win.unlock_all()?;
    w.barrier()
}

#[test]
fn ordered_put_then_flag_never_shows_stale_data() {
    testing::job(2)
        .timeout(Duration::from_secs(300))
        .run(|u| {
            let w = u.world();
            let info = WinInfo::new().order(true);
            let windows = [
                Window::<u64>::builder(w).info(&info).allocate(16)?,
                // Small puts are staged here and leave at the next completion point.
                Window::<u64>::builder(w)
                    .info(&info)
                    .create(WinBuffer::from(vec![0u64; 16]))?,
            ];
            for win in windows {
                assert_eq!(win.get_info().get("mpi_win_order"), Some("true"));
                signal_after_data(w, &win, false)?;
                win.free()?;
            }
            Ok(())
        })
        .assert_success();
}

#[test]
fn rrput_then_flag_never_shows_stale_data() {
    testing::job(2)
        .timeout(Duration::from_secs(300))
        .run(|u| {
            let w = u.world();
            let windows = [
                Window::<u64>::allocate(w, 16)?,
                Window::<u64>::create(w, WinBuffer::from(vec![0u64; 16]))?,
            ];
            for win in windows {
                signal_after_data(w, &win, true)?;
                win.free()?;
            }
            Ok(())
        })
        .assert_success();
}

/// With `mpi_win_order` and process scope, a flag raised by one thread lands after a put
/// another thread staged before handing over (the application orders the two threads).
#[test]
fn ordered_flag_of_one_thread_follows_another_threads_put() {
    testing::run(2, |u| {
        let w = u.world();
        let win = Window::<u64>::builder(w)
            .info(&WinInfo::new().order(true))
            .create(WinBuffer::from(vec![0u64; 2]))?;
        if w.rank() == 0 {
            win.lock_all(Assert::NONE)?;
            std::thread::scope(|s| s.spawn(|| win.put(&[5], 1, 0)).join().unwrap())?;
            win.accumulate(&[1], 1, 1, Op::Sum)?;
            // Read back without any flush: the put went out before the flag.
            let mut got = [0u64; 2];
            win.get(&mut got, 1, 0)?;
            assert_eq!(got, [5, 1]);
            win.unlock_all()?;
        }
        w.barrier()?;
        win.free()?;
        Ok(())
    });
}

/// A duplicate shares memory, attached regions and synchronization state, and has its own
/// info.
#[test]
fn duplicates_share_memory_and_synchronization() {
    testing::run(2, |u| {
        let w = u.world();
        let peer = 1 - w.rank();
        let win = Window::<u64>::allocate(w, 4)?;
        let dup = win.dup_with_info(&WinInfo::new().order(true))?;
        assert!(dup.is_duplicate() && !win.is_duplicate());
        assert_eq!(dup.get_info().get("mpi_win_order"), Some("true"));
        assert_eq!(win.get_info().get("mpi_win_order"), Some("false"));
        assert_eq!(dup.layout(), win.layout());
        assert!(matches!(
            win.dup_with_info(&WinInfo::new().with("mpi_win_scope", "galaxy")),
            Err(Error::InvalidInfo { .. })
        ));
        win.fence(Assert::NOPRECEDE)?;
        dup.put(&[100 + w.rank() as u64], peer, 0)?;
        // The fence epoch is one epoch whichever handle closes it.
        dup.fence(Assert::NONE)?;
        let mut got = [0u64];
        win.local_read(0, &mut got)?;
        assert_eq!(got[0], 100 + peer as u64);
        win.fence(Assert::NOSUCCEED)?;

        win.lock(LockType::Exclusive, peer, Assert::NONE)?;
        assert!(
            matches!(
                dup.lock(LockType::Exclusive, peer, Assert::NONE),
                Err(Error::AlreadyLocked { .. })
            ),
            "locking a duplicate of a locked window is an error"
        );
        dup.put(&[7], peer, 1)?;
        dup.unlock(peer)?; // closes the parent's epoch
        assert!(matches!(win.unlock(peer), Err(Error::NotLocked { .. })));
        w.barrier()?;
        win.local_read(1, &mut got)?;
        assert_eq!(got[0], 7);
        w.barrier()?;
        dup.free()?;
        win.free()?;

        // Dynamic windows: attached through a duplicate, the region belongs to the window.
        let dynamic = Window::<u64>::create_dynamic(w)?;
        let d = dynamic.dup_with_info(&WinInfo::new())?;
        let region = d.attach(onesided::alloc_mem::<u64>(8)?)?;
        assert_eq!(dynamic.attached_regions(), vec![region]);
        let back = dynamic.detach(region.addr)?;
        assert_eq!(back.len(), 8);
        drop(d);
        dynamic.free()?;
        Ok(())
    });
}

/// `op_intrinsic` answers from the kind of memory, and a window asserting intrinsic
/// accumulates refuses the ones that would need more than CPU atomics.
#[test]
fn intrinsic_query_and_assert() {
    testing::run(2, |u| {
        let w = u.world();
        let peer = 1 - w.rank();
        let shm = Window::<u64>::allocate(w, 2)?;
        assert!(shm.op_intrinsic("sum,replace,cas,no_op", 1 << 20)?);
        assert!(matches!(
            shm.op_intrinsic("sum,frobnicate", 1),
            Err(Error::InvalidArgument(_))
        ));
        let floats = Window::<f64>::allocate(w, 2)?;
        assert!(floats.op_intrinsic("sum,max", 4)?);
        assert!(matches!(
            floats.op_intrinsic("band", 1),
            Err(Error::InvalidOp { .. })
        ));
        let vec = Window::<u64>::create(w, WinBuffer::from(vec![0u64; 2]))?;
        if w.node_size() != w.size() {
            // Across nodes every accumulate CPU atomics cannot do is a network atomic, native
            // in the provider here (tcp;ofi_rxm has them all): intrinsic, also on ordinary
            // memory, and a window that asserts it may issue them.
            assert!(vec.op_intrinsic("sum,replace,cas", 1)?);
            let promised = vec.dup_with_info(&WinInfo::new().accumulate_intrinsic(true))?;
            vec.lock_all(Assert::NONE)?;
            promised.accumulate(&[1], peer, 0, Op::Sum)?;
            assert_eq!(promised.fetch_and_op(1, peer, 0, Op::Sum)?, 1);
            assert_eq!(promised.compare_and_swap(7, 2, peer, 0)?, 2);
            vec.unlock_all()?;
            w.barrier()?;
            let mut got = [0u64; 2];
            vec.local_read(0, &mut got)?;
            assert_eq!(got, [7, 0]);
            drop(promised);
            for win in [shm, vec] {
                win.free()?;
            }
            floats.free()?;
            return Ok(());
        }
        assert!(
            !vec.op_intrinsic("sum", 1)?,
            "cross-memory attach is a system call"
        );

        let promised = vec.dup_with_info(&WinInfo::new().accumulate_intrinsic(true))?;
        let fast = shm.dup_with_info(&WinInfo::new().accumulate_intrinsic(true))?;
        for win in [&shm, &vec] {
            win.lock_all(Assert::NONE)?;
        }
        let not_intrinsic = |r: onesided::Result<()>| matches!(r, Err(Error::NotIntrinsic { .. }));
        assert!(not_intrinsic(promised.accumulate(&[1], peer, 0, Op::Sum)));
        assert!(not_intrinsic(
            promised.fetch_and_op(1, peer, 0, Op::Sum).map(drop)
        ));
        assert!(not_intrinsic(
            promised.compare_and_swap(1, 0, peer, 0).map(drop)
        ));
        fast.accumulate(&[1], peer, 0, Op::Sum)?;
        assert_eq!(fast.fetch_and_op(1, peer, 1, Op::Sum)?, 0);
        vec.accumulate(&[1], peer, 0, Op::Sum)?; // no promise: done under a lock stripe
        for win in [&shm, &vec] {
            win.unlock_all()?;
        }
        w.barrier()?;
        let mut got = [0u64; 2];
        vec.local_read(0, &mut got)?;
        assert_eq!(got, [1, 0], "refused operations changed nothing");
        shm.local_read(0, &mut got)?;
        assert_eq!(got, [1, 1]);
        drop((promised, fast));
        for win in [shm, vec] {
            win.free()?;
        }
        floats.free()?;
        Ok(())
    });
}

/// Memory handles: each rank registers an `alloc_mem` region (mapped by peers) and a `Vec`
/// region (cross-memory attach) with a dynamic window, sends the handle bytes with an
/// allgather, and the other rank puts, gets and accumulates through windows built from
/// them. After release, operations are errors; so is a second release.
#[test]
fn memory_handles_expose_regions_until_released() {
    testing::run(2, |u| {
        let w = u.world();
        let me = w.rank();
        let peer = 1 - me;
        let win = Window::<u64>::create_dynamic(w)?;
        let shm = win.memhandle_create(onesided::alloc_mem::<u64>(8)?)?;
        let vec = win.memhandle_create(WinBuffer::from(vec![0u64; 8]))?;
        const { assert!(onesided::MemHandle::SIZE <= onesided::MAX_MEMORY_HANDLE_SIZE) };
        let mut mine = shm.as_bytes().to_vec();
        mine.extend_from_slice(vec.as_bytes());
        let all = w.allgather(&mine)?;
        let size = onesided::MemHandle::SIZE;
        let theirs: Vec<onesided::MemHandle> = (0..2)
            .map(|k| onesided::MemHandle::from_bytes(&all[peer * 2 * size + k * size..][..size]))
            .collect::<onesided::Result<_>>()?;
        assert!(theirs
            .iter()
            .all(|h| h.owner() == peer && h.size_bytes() == 64));
        assert!(onesided::MemHandle::from_bytes(&[0u8; 56]).is_err());
        // A handle of another window is refused.
        let other = Window::<u64>::create_dynamic(w)?;
        assert!(matches!(
            other.window_from_memhandle(&theirs[0]),
            Err(Error::InvalidArgument(_))
        ));
        let remote: Vec<_> = theirs
            .iter()
            .map(|h| win.window_from_memhandle(h))
            .collect::<onesided::Result<_>>()?;
        win.lock_all(Assert::NONE)?;
        for (k, r) in remote.iter().enumerate() {
            assert_eq!((r.target(), r.len()), (peer, 8));
            r.put(&[10 + me as u64, 20 + k as u64], 0)?;
            r.accumulate(&[5, 5], 2, Op::Sum)?;
            r.accumulate(&[1], 2, Op::Sum)?;
            r.flush()?;
            let mut got = [0u64; 4];
            r.get(&mut got, 0)?;
            assert_eq!(got, [10 + me as u64, 20 + k as u64, 6, 5]);
            assert!(matches!(r.put(&[1], 8), Err(Error::OutOfBounds { .. })));
        }
        win.unlock_all()?;
        assert!(
            matches!(remote[0].put(&[1], 0), Err(Error::NoAccessEpoch { .. })),
            "outside the parent's epochs"
        );
        w.barrier()?;
        // The owner releases; the peer's windows then fail instead of writing.
        assert!(matches!(
            win.memhandle_release(&theirs[0]),
            Err(Error::InvalidArgument(_))
        ));
        let back = win.memhandle_release(&shm)?;
        let WinBuffer::AllocMem(mem) = back else {
            panic!("the alloc_mem region comes back as it went in")
        };
        assert_eq!(mem[..4], [10 + peer as u64, 20, 6, 5]);
        assert!(matches!(
            win.memhandle_release(&shm),
            Err(Error::MemhandleReleased { .. })
        ));
        w.barrier()?;
        win.lock_all(Assert::NONE)?;
        assert!(matches!(
            remote[0].put(&[1], 0),
            Err(Error::MemhandleReleased { .. })
        ));
        remote[1].put(&[99], 7)?; // the other handle is still live
        win.unlock_all()?;
        w.barrier()?;
        drop(remote);
        let back = win.memhandle_release(&vec)?.into_vec().expect("a Vec");
        assert_eq!(back[..3], [10 + peer as u64, 21, 6]);
        assert_eq!(back[7], 99);
        other.free()?;
        win.free()?;
        Ok(())
    });
}

/// A released memory handle stays released: the owner releases a region and attaches the
/// very same memory again with a plain `attach` (what an allocator handing the address
/// back amounts to). The peer's old handle must not build a window over the new region, a
/// window built from it before the release must not write into it, and a second release of
/// the old handle must fail and leave the new region attached. Before, all three succeeded
/// (the handle named only the address).
#[test]
fn a_released_memory_handle_stays_released_when_its_bytes_are_attached_again() {
    testing::run(2, |u| {
        let w = u.world();
        let peer = 1 - w.rank();
        let size = onesided::MemHandle::SIZE;
        let win = Window::<u64>::create_dynamic(w)?;
        for memory in [
            WinBuffer::from(onesided::alloc_mem::<u64>(4)?),
            WinBuffer::from(vec![0u64; 4]),
        ] {
            let mine = win.memhandle_create(memory)?;
            let all = w.allgather(mine.as_bytes())?;
            let theirs = onesided::MemHandle::from_bytes(&all[peer * size..][..size])?;
            let early = win.window_from_memhandle(&theirs)?;
            w.barrier()?;
            let again = win.attach(win.memhandle_release(&mine)?)?;
            w.barrier()?;
            assert!(
                matches!(
                    win.window_from_memhandle(&theirs),
                    Err(Error::MemhandleReleased { .. })
                ),
                "a released handle built a window over a later attach"
            );
            win.lock_all(Assert::NONE)?;
            assert!(
                matches!(early.put(&[7], 0), Err(Error::MemhandleReleased { .. })),
                "a window of a released handle wrote into a later attach"
            );
            win.unlock_all()?;
            w.barrier()?;
            assert!(matches!(
                win.memhandle_release(&mine),
                Err(Error::MemhandleReleased { .. })
            ));
            assert_eq!(win.attached_regions(), [again], "the later attach stays");
            let mut got = [1u64];
            win.local_read(again.addr, &mut got)?;
            assert_eq!(got, [0], "nothing landed in the later attach");
            win.detach(again.addr)?;
            w.barrier()?;
        }
        win.free()?;
        Ok(())
    });
}

/// Rounds of "data, then flag" without a flush in between: rank 0 runs `origin(round)`
/// (which puts `round` as the data and then as the flag at rank 1) inside a lock_all epoch,
/// then flushes; rank 1 waits for the flag at local displacement `at.0` and counts the
/// rounds whose data at `at.1` was not there yet. Fails unless none was stale.
fn flag_after_data_rounds(
    w: &onesided::Comm,
    win: &Window<u64>,
    rounds: u64,
    at: (usize, usize),
    origin: impl Fn(u64) -> onesided::Result<()>,
) -> onesided::Result<()> {
    let mut stale = 0;
    if w.rank() == 0 {
        win.lock_all(Assert::NONE)?;
    }
    for round in 1..=rounds {
        if w.rank() == 0 {
            origin(round)?;
            win.flush_all()?;
        } else {
            let since = std::time::Instant::now();
            let mut seen = [0u64];
            while seen[0] != round {
                assert!(since.elapsed().as_secs() < 20, "the flag never came");
                std::thread::yield_now();
                win.local_read(at.0, &mut seen)?;
            }
            let mut got = [0u64];
            win.local_read(at.1, &mut got)?;
            if got[0] != round {
                stale += 1;
            }
        }
        w.barrier()?;
    }
    if w.rank() == 0 {
        win.unlock_all()?;
    }
    assert_eq!(
        stale, 0,
        "the flag landed before the data in {stale} of {rounds}"
    );
    Ok(())
}

/// `mpi_win_order` across threads on memory reached by cross-memory attach: thread A puts
/// the data, then hands over to thread B (a join: A's put happens-before B's), which puts
/// 1023 small fillers and then the flag — the flag fills B's staging lane, which goes out
/// at once. The target waits for the flag without any flush of the origin and must then
/// see the data. Before, A's data still sat in A's lane when B's lane (with the flag) was
/// written: stale in every round.
#[test]
fn ordered_flag_put_of_one_thread_lands_after_another_threads_staged_put() {
    const ROUNDS: u64 = 50;
    const FILLERS: usize = 1023;
    testing::job(2)
        .timeout(std::time::Duration::from_secs(60))
        .run(|u| {
            let w = u.world();
            let win = Window::<u64>::builder(w)
                .info(&WinInfo::new().order(true))
                .create(WinBuffer::from(vec![0u64; 2 + FILLERS]))?;
            flag_after_data_rounds(w, &win, ROUNDS, (1, 0), |round| {
                std::thread::scope(|s| s.spawn(|| win.put(&[round], 1, 0)).join().unwrap())?;
                std::thread::scope(|s| {
                    s.spawn(|| -> onesided::Result<()> {
                        for k in 0..FILLERS {
                            win.put(&[round], 1, 2 + k)?;
                        }
                        win.put(&[round], 1, 1)
                    })
                    .join()
                    .unwrap()
                })
            })?;
            win.free()?;
            Ok(())
        })
        .assert_success();
}

/// The same across routes of one target: rank 1 attaches a `Vec` region (cross-memory
/// attach: small puts are staged) and an `alloc_mem` region (mapped: puts are plain
/// stores) to a dynamic window. Through a handle with `mpi_win_order`, thread A puts the
/// data into the first, then thread B puts the flag into the second; the target waits for
/// the flag without any flush and must then see the data.
#[test]
fn ordered_flag_store_lands_after_another_threads_staged_put_to_the_same_target() {
    const ROUNDS: u64 = 50;
    testing::job(2)
        .timeout(std::time::Duration::from_secs(60))
        .run(|u| {
            let w = u.world();
            let win = Window::<u64>::builder(w)
                .info(&WinInfo::new().order(true))
                .create_dynamic()?;
            let data = win.attach(WinBuffer::from(vec![0u64; 1]))?;
            let flag = win.attach(onesided::alloc_mem::<u64>(1)?)?;
            let addrs = w.allgather(&[data.addr as u64, flag.addr as u64])?;
            let (data_at, flag_at) = (addrs[2] as usize, addrs[3] as usize);
            let here = (flag.addr, data.addr);
            flag_after_data_rounds(w, &win, ROUNDS, here, |round| {
                std::thread::scope(|s| s.spawn(|| win.put(&[round], 1, data_at)).join().unwrap())?;
                std::thread::scope(|s| s.spawn(|| win.put(&[round], 1, flag_at)).join().unwrap())
            })?;
            win.free()?;
            Ok(())
        })
        .assert_success();
}
