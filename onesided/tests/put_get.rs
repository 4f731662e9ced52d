//! Every window kind × every synchronization mode × put and get, with data validation.
//!
//! Each rank `o` writes a block of `K` values into every target `t` (itself included), at
//! block `o` of the target's window; every value encodes (round, origin, target, index), so
//! a misplaced, lost or torn write is detected. After the epoch closes, each target checks
//! its own memory, and each origin reads the blocks back with `get`.

mod common;

use common::{Fixture, Kind};
use onesided::{testing, Assert, Group, LockType};

const K: usize = 33;
const RANKS: usize = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Fence,
    Pscw,
    LockShared,
    LockExclusive,
    LockAllFlush,
    LockFlushLocal,
}

fn value(round: u64, origin: usize, target: usize, i: usize) -> u64 {
    (round << 48) | ((origin as u64) << 32) | ((target as u64) << 16) | i as u64
}

/// Each origin writes its block (block `origin`) into every target of `targets`.
fn put_blocks(f: &Fixture<u64>, round: u64, targets: &[usize]) -> onesided::Result<()> {
    let me = f.win.rank();
    for &t in targets {
        let block: Vec<u64> = (0..K).map(|i| value(round, me, t, i)).collect();
        f.win.put(&block, t, f.disp(t, me * K))?;
    }
    Ok(())
}

fn get_and_check(f: &Fixture<u64>, round: u64, targets: &[usize]) -> onesided::Result<()> {
    let me = f.win.rank();
    for &t in targets {
        let mut got = vec![0u64; K];
        f.win.get(&mut got, t, f.disp(t, me * K))?;
        let want: Vec<u64> = (0..K).map(|i| value(round, me, t, i)).collect();
        assert_eq!(got, want, "get from {t}");
    }
    Ok(())
}

fn check_local(f: &Fixture<u64>, round: u64, origins: &[usize]) -> onesided::Result<()> {
    let me = f.win.rank();
    for &o in origins {
        let mut got = vec![0u64; K];
        f.read_local(o * K, &mut got)?;
        let want: Vec<u64> = (0..K).map(|i| value(round, o, me, i)).collect();
        assert_eq!(got, want, "block of origin {o} in my memory");
    }
    Ok(())
}

fn run_case(kind: Kind, mode: Mode) {
    kind.job(RANKS)
        .run(move |u| {
            let w = u.world();
            let f = Fixture::<u64>::new(w, kind, w.size() * K)?;
            let all: Vec<usize> = (0..w.size()).collect();
            let everyone = Group::new(all.clone())?;
            for round in 1..=3u64 {
                match mode {
                    Mode::Fence => {
                        f.win.fence(Assert::NOPRECEDE)?;
                        put_blocks(&f, round, &all)?;
                        f.win.fence(Assert::NONE)?;
                        check_local(&f, round, &all)?;
                        get_and_check(&f, round, &all)?;
                        f.win.fence(Assert::NOSUCCEED)?;
                    }
                    Mode::Pscw => {
                        f.win.post(&everyone, Assert::NONE)?;
                        f.win.start(&everyone, Assert::NONE)?;
                        put_blocks(&f, round, &all)?;
                        f.win.complete()?;
                        f.win.wait()?;
                        check_local(&f, round, &all)?;
                        f.win.post(&everyone, Assert::NOSTORE)?;
                        f.win.start(&everyone, Assert::NONE)?;
                        get_and_check(&f, round, &all)?;
                        f.win.complete()?;
                        while !f.win.test()? {
                            std::thread::yield_now();
                        }
                    }
                    Mode::LockShared | Mode::LockExclusive => {
                        let kind = if mode == Mode::LockShared {
                            LockType::Shared
                        } else {
                            LockType::Exclusive
                        };
                        for &t in &all {
                            f.win.lock(kind, t, Assert::NONE)?;
                            put_blocks(&f, round, &[t])?;
                            f.win.unlock(t)?;
                        }
                        w.barrier()?;
                        check_local(&f, round, &all)?;
                        for &t in &all {
                            f.win.lock(kind, t, Assert::NONE)?;
                            get_and_check(&f, round, &[t])?;
                            f.win.unlock(t)?;
                        }
                        w.barrier()?;
                    }
                    Mode::LockAllFlush => {
                        f.win.lock_all(Assert::NONE)?;
                        for &t in &all {
                            put_blocks(&f, round, &[t])?;
                            f.win.flush(t)?;
                            get_and_check(&f, round, &[t])?;
                            f.win.flush_local(t)?;
                        }
                        f.win.flush_all()?;
                        f.win.flush_local_all()?;
                        w.barrier()?;
                        check_local(&f, round, &all)?;
                        f.win.unlock_all()?;
                        w.barrier()?;
                    }
                    Mode::LockFlushLocal => {
                        // Several targets locked at once, completed with flush_all.
                        for &t in &all {
                            f.win.lock(LockType::Exclusive, t, Assert::NONE)?;
                        }
                        put_blocks(&f, round, &all)?;
                        f.win.flush_local_all()?;
                        f.win.flush_all()?;
                        f.win.sync()?;
                        get_and_check(&f, round, &all)?;
                        for &t in all.iter().rev() {
                            f.win.unlock(t)?;
                        }
                        w.barrier()?;
                        check_local(&f, round, &all)?;
                        w.barrier()?;
                    }
                }
            }
            let me = w.rank();
            let returned = f.win.free()?;
            match kind {
                Kind::CreateVec | Kind::DynamicVec => {
                    // The memory we gave the window holds what the peers wrote.
                    let v = returned
                        .into_iter()
                        .next()
                        .and_then(|b| b.into_vec())
                        .expect("our vec back");
                    for o in 0..w.size() {
                        assert_eq!(v[o * K + 5], value(3, o, me, 5));
                    }
                }
                Kind::CreateAllocMem | Kind::DynamicAllocMem => assert_eq!(returned.len(), 1),
                Kind::Allocate | Kind::Shared => assert!(returned.is_empty()),
            }
            Ok(())
        })
        .assert_success();
}

macro_rules! matrix {
    ($($module:ident => $kind:ident),* $(,)?) => {$(
        mod $module {
            use super::*;
            #[test] fn fence() { run_case(Kind::$kind, Mode::Fence) }
            #[test] fn pscw() { run_case(Kind::$kind, Mode::Pscw) }
            #[test] fn lock_shared() { run_case(Kind::$kind, Mode::LockShared) }
            #[test] fn lock_exclusive() { run_case(Kind::$kind, Mode::LockExclusive) }
            #[test] fn lock_all_flush() { run_case(Kind::$kind, Mode::LockAllFlush) }
            #[test] fn lock_many_flush_all() { run_case(Kind::$kind, Mode::LockFlushLocal) }
        }
    )*};
}

matrix! {
    allocate => Allocate,
    allocate_shared => Shared,
    create_vec => CreateVec,
    create_alloc_mem => CreateAllocMem,
    dynamic_vec => DynamicVec,
    dynamic_alloc_mem => DynamicAllocMem,
}

/// Small puts to ordinary (cross-memory-attach) memory are staged and leave in vectored
/// calls: thousands of them, element by element, cross the stage's size limit, interleave
/// with gets and accumulates to the same target, and must all arrive by the completion
/// point of every synchronization mode.
#[test]
fn many_small_puts_to_ordinary_memory() {
    const N: usize = 3000;
    testing::run(3, |u| {
        let w = u.world();
        let (me, n) = (w.rank(), w.size());
        let win = onesided::Window::create(w, vec![0u64; N * n + 8])?;
        let all: Vec<usize> = (0..n).filter(|&r| r != me).collect();
        let others = Group::new(all.iter().copied())?;
        for round in 1..=4u64 {
            let slot = |r: usize, i: usize| r * N + i;
            let val = |i: usize| (round << 40) | ((me as u64) << 20) | i as u64;
            let put_all = || -> onesided::Result<()> {
                for &t in &all {
                    for i in 0..N {
                        win.put(&[val(i)], t, slot(me, i))?;
                        if i == N / 2 {
                            // Reads and atomics in between see the earlier puts first.
                            let mut back = [0u64];
                            win.get(&mut back, t, slot(me, 0))?;
                            assert_eq!(back, [val(0)]);
                            win.accumulate(&[1u64], t, N * n + me, onesided::Op::Sum)?;
                        }
                    }
                }
                Ok(())
            };
            match round {
                1 => {
                    win.fence(Assert::NONE)?;
                    put_all()?;
                    win.fence(Assert::NONE)?;
                }
                2 => {
                    win.post(&others, Assert::NONE)?;
                    win.start(&others, Assert::NONE)?;
                    put_all()?;
                    win.complete()?;
                    win.wait()?;
                }
                3 => {
                    win.lock_all(Assert::NONE)?;
                    put_all()?;
                    win.flush_all()?;
                    win.unlock_all()?;
                }
                _ => {
                    for &t in &all {
                        win.lock(LockType::Shared, t, Assert::NONE)?;
                    }
                    put_all()?;
                    for &t in &all {
                        win.unlock(t)?;
                    }
                }
            }
            w.barrier()?;
            let mut mine = vec![0u64; N * n + 8];
            win.local_read(0, &mut mine)?;
            for &o in &all {
                for i in 0..N {
                    let want = (round << 40) | ((o as u64) << 20) | i as u64;
                    assert_eq!(mine[o * N + i], want, "round {round}, origin {o}, slot {i}");
                }
                assert_eq!(mine[N * n + o], round, "accumulates of origin {o}");
            }
            w.barrier()?;
        }
        win.free()?;
        Ok(())
    });
}

/// A `flush` after a `flush_local` completes the puts at the target: the `flush_local`
/// once let the next `flush` of its target take the inlined path, which only fences, and a
/// put staged for ordinary memory, in a target's ring or on the network stayed behind.
/// And `flush_local` alone writes puts to ranks of its node (documented at
/// `RawWindow::flush_local`; MPI asks only local completion): OSHMPI's `shmem_clear_lock`
/// hands its lock on after a put, `flush_local` and an atomic on another window, and
/// lost updates under the preload until it did (SOS's `mt_lock_test`). Rank 0 puts to
/// every rank and tells them with a barrier, its lock_all epoch still open (no unlock
/// completes anything on the calls' behalf); every kind of window.
#[test]
fn flush_local_and_flush_complete_at_the_target() {
    testing::run(3, |u| {
        let w = u.world();
        let (me, n) = (w.rank(), w.size());
        let near_zero = w.node_of(me)? == w.node_of(0)?;
        for kind in Kind::all_over(w) {
            let f = Fixture::<u64>::new(w, kind, 8)?;
            for round in 1..=20u64 {
                let value = |slot: u64| (round << 16) | (slot << 8) | kind as u64;
                if me == 0 {
                    f.win.lock_all(Assert::NONE)?;
                    for t in 0..n {
                        f.win.put(&[value(3)], t, f.disp(t, 3))?;
                        f.win.flush_local(t)?;
                        f.win.flush(t)?;
                        f.win.put(&[value(5)], t, f.disp(t, 5))?;
                        f.win.flush_local(t)?;
                    }
                }
                w.barrier()?;
                let mut mine = [0u64; 8];
                f.read_local(0, &mut mine)?;
                assert_eq!(
                    mine[3],
                    value(3),
                    "{kind:?}, round {round}, rank {me}: flush"
                );
                if near_zero {
                    assert_eq!(
                        mine[5],
                        value(5),
                        "{kind:?}, round {round}, rank {me}: flush_local"
                    );
                }
                w.barrier()?;
                if me == 0 {
                    f.win.unlock_all()?;
                }
            }
            f.free()?;
        }
        Ok(())
    });
}
