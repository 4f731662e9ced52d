//! Every window kind × every synchronization mode × put and get, with data validation.
//!
//! Each rank `o` writes a block of `K` values into every target `t` (itself included), at
//! block `o` of the target's window; every value encodes (round, origin, target, index), so
//! a misplaced, lost or torn write is detected. After the epoch closes, each target checks
//! its own memory, and each origin reads the blocks back with `get`.

use onesided::{alloc_mem, testing, Assert, Group, LockType, Universe, Window};

const K: usize = 33;
const RANKS: usize = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Allocate,
    Shared,
    CreateVec,
    CreateAllocMem,
    DynamicVec,
    DynamicAllocMem,
}

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

/// A window of `n * K` u64 per rank, with displacements for every target.
struct Fixture {
    win: Window<u64>,
    /// Displacement of element 0 at each target.
    base: Vec<usize>,
    /// Displacement units per element (1 for u64-unit windows, 8 for dynamic windows).
    scale: usize,
}

impl Fixture {
    fn new(u: &Universe, kind: Kind) -> onesided::Result<Fixture> {
        let w = u.world();
        let len = w.size() * K;
        let win = match kind {
            Kind::Allocate => Window::<u64>::allocate(w, len)?,
            Kind::Shared => Window::<u64>::allocate_shared(w, len)?,
            Kind::CreateVec => Window::create(w, vec![0u64; len])?,
            Kind::CreateAllocMem => Window::create(w, alloc_mem::<u64>(len)?)?,
            Kind::DynamicVec | Kind::DynamicAllocMem => {
                let win = Window::<u64>::create_dynamic(w)?;
                let region = if kind == Kind::DynamicVec {
                    win.attach(vec![0u64; len])?
                } else {
                    win.attach(alloc_mem::<u64>(len)?)?
                };
                let addrs = w.allgather(&[region.addr as u64])?;
                return Ok(Fixture {
                    win,
                    base: addrs.iter().map(|&a| a as usize).collect(),
                    scale: 8,
                });
            }
        };
        assert_eq!(win.len(), len);
        Ok(Fixture {
            win,
            base: vec![0; w.size()],
            scale: 1,
        })
    }

    fn disp(&self, target: usize, elem: usize) -> usize {
        self.base[target] + elem * self.scale
    }

    fn put_blocks(&self, round: u64, targets: &[usize]) -> onesided::Result<()> {
        let me = self.win.rank();
        for &t in targets {
            let block: Vec<u64> = (0..K).map(|i| value(round, me, t, i)).collect();
            self.win.put(&block, t, self.disp(t, me * K))?;
        }
        Ok(())
    }

    fn get_and_check(&self, round: u64, targets: &[usize]) -> onesided::Result<()> {
        let me = self.win.rank();
        for &t in targets {
            let mut got = vec![0u64; K];
            self.win.get(&mut got, t, self.disp(t, me * K))?;
            let want: Vec<u64> = (0..K).map(|i| value(round, me, t, i)).collect();
            assert_eq!(got, want, "get from {t}");
        }
        Ok(())
    }

    fn check_local(&self, round: u64, origins: &[usize]) -> onesided::Result<()> {
        let me = self.win.rank();
        for &o in origins {
            let mut got = vec![0u64; K];
            self.win.local_read(self.disp(me, o * K), &mut got)?;
            let want: Vec<u64> = (0..K).map(|i| value(round, o, me, i)).collect();
            assert_eq!(got, want, "block of origin {o} in my memory");
        }
        Ok(())
    }
}

fn run_case(kind: Kind, mode: Mode) {
    testing::run(RANKS, move |u| {
        let f = Fixture::new(u, kind)?;
        let w = u.world();
        let all: Vec<usize> = (0..w.size()).collect();
        let everyone = Group::new(all.clone())?;
        for round in 1..=3u64 {
            match mode {
                Mode::Fence => {
                    f.win.fence(Assert::NOPRECEDE)?;
                    f.put_blocks(round, &all)?;
                    f.win.fence(Assert::NONE)?;
                    f.check_local(round, &all)?;
                    f.get_and_check(round, &all)?;
                    f.win.fence(Assert::NOSUCCEED)?;
                }
                Mode::Pscw => {
                    f.win.post(&everyone, Assert::NONE)?;
                    f.win.start(&everyone, Assert::NONE)?;
                    f.put_blocks(round, &all)?;
                    f.win.complete()?;
                    f.win.wait()?;
                    f.check_local(round, &all)?;
                    f.win.post(&everyone, Assert::NOSTORE)?;
                    f.win.start(&everyone, Assert::NONE)?;
                    f.get_and_check(round, &all)?;
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
                        f.put_blocks(round, &[t])?;
                        f.win.unlock(t)?;
                    }
                    w.barrier()?;
                    f.check_local(round, &all)?;
                    for &t in &all {
                        f.win.lock(kind, t, Assert::NONE)?;
                        f.get_and_check(round, &[t])?;
                        f.win.unlock(t)?;
                    }
                    w.barrier()?;
                }
                Mode::LockAllFlush => {
                    f.win.lock_all(Assert::NONE)?;
                    for &t in &all {
                        f.put_blocks(round, &[t])?;
                        f.win.flush(t)?;
                        f.get_and_check(round, &[t])?;
                        f.win.flush_local(t)?;
                    }
                    f.win.flush_all()?;
                    f.win.flush_local_all()?;
                    w.barrier()?;
                    f.check_local(round, &all)?;
                    f.win.unlock_all()?;
                    w.barrier()?;
                }
                Mode::LockFlushLocal => {
                    // Several targets locked at once, completed with flush_all.
                    for &t in &all {
                        f.win.lock(LockType::Exclusive, t, Assert::NONE)?;
                    }
                    f.put_blocks(round, &all)?;
                    f.win.flush_local_all()?;
                    f.win.flush_all()?;
                    f.win.sync()?;
                    f.get_and_check(round, &all)?;
                    for &t in all.iter().rev() {
                        f.win.unlock(t)?;
                    }
                    w.barrier()?;
                    f.check_local(round, &all)?;
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
    });
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
