//! Accumulate, get_accumulate, fetch_and_op and compare_and_swap on every window kind:
//! results against a serial model, atomicity under contention, and errors.

mod common;

use std::fmt::Debug;

use common::{Fixture, Kind, Rng};
use onesided::{
    testing, AccElement, Assert, Comm, Error, Group, LockType, Op, Universe, WinInfo, Window,
};

/// Test values as any element type.
trait Num: AccElement + Debug {
    fn from_i(i: i64) -> Self;
}

macro_rules! num {
    ($($t:ty),*) => {$(impl Num for $t { fn from_i(i: i64) -> Self { i as $t } })*};
}
num!(i8, i16, i32, i64, u8, u16, u32, u64, f32, f64);

fn bits<T: Num>(v: &[T]) -> Vec<u8> {
    bytemuck::cast_slice(v).to_vec()
}

const LEN: usize = 6;

fn init<T: Num>(i: usize) -> T {
    T::from_i([0, 1, -2, 3, 5, -7][i % 6])
}

fn operand<T: Num>(rank: usize, i: usize) -> T {
    T::from_i(((rank * 5 + i * 3) % 11) as i64 - 5)
}

/// Ranks take turns applying `op` to rank 0's elements, each turn in a different
/// synchronization mode; afterwards every fetched value and the final state must equal a
/// serial replay.
fn check_op<T: Num>(w: &Comm, f: &Fixture<T>, op: Op) -> onesided::Result<()> {
    let (me, n) = (w.rank(), w.size());
    let win = &f.win;
    if !op.valid_for(T::TYPE) {
        let r = win.get_accumulate(&[T::from_i(1)], &mut [T::from_i(0)], 0, f.disp(0, 0), op);
        assert!(
            matches!(r, Err(Error::InvalidOp { .. })),
            "{op:?} on {:?}: {r:?}",
            T::TYPE
        );
        return Ok(());
    }
    if me == 0 {
        let v: Vec<T> = (0..LEN).map(init).collect();
        f.write_local(0, &v)?;
    }
    w.barrier()?;
    let mine: Vec<T> = (0..LEN).map(|i| operand(me, i)).collect();
    let mut fetched = vec![T::from_i(0); LEN];
    for turn in 0..n {
        if turn == me {
            let d = f.disp(0, 0);
            match me % 3 {
                0 => win.lock(LockType::Exclusive, 0, Assert::NONE)?,
                1 => win.lock(LockType::Shared, 0, Assert::NONE)?,
                _ => win.lock_all(Assert::NONE)?,
            }
            // Elements 0..LEN-1 with get_accumulate (or accumulate when nothing is fetched),
            // the last one with fetch_and_op.
            // Even ranks fetch with get_accumulate; odd ones get, flush, then accumulate
            // (no_op only exists where something is fetched).
            if op == Op::NoOp || me % 2 == 0 {
                win.get_accumulate(&mine[..LEN - 1], &mut fetched[..LEN - 1], 0, d, op)?;
            } else {
                win.get(&mut fetched[..LEN - 1], 0, d)?;
                win.flush(0)?;
                win.accumulate(&mine[..LEN - 1], 0, d, op)?;
            }
            fetched[LEN - 1] = win.fetch_and_op(mine[LEN - 1], 0, f.disp(0, LEN - 1), op)?;
            match me % 3 {
                2 => win.unlock_all()?,
                _ => win.unlock(0)?,
            }
        }
        w.barrier()?;
    }
    // Serial replay.
    let mut model: Vec<T> = (0..LEN).map(init).collect();
    for r in 0..n {
        if r == me {
            assert_eq!(
                bits(&fetched),
                bits(&model),
                "{op:?} on {:?}: values fetched by rank {me}",
                T::TYPE
            );
        }
        for (i, m) in model.iter_mut().enumerate() {
            *m = T::combine(op, *m, operand(r, i));
        }
    }
    let mut fin = vec![T::from_i(0); LEN];
    win.lock(LockType::Shared, 0, Assert::NONE)?;
    win.get(&mut fin, 0, f.disp(0, 0))?;
    win.unlock(0)?;
    assert_eq!(
        bits(&fin),
        bits(&model),
        "{op:?} on {:?}: final state",
        T::TYPE
    );
    w.barrier()?;
    Ok(())
}

/// compare_and_swap: integer types succeed or fail as a serial model says; floats refuse.
fn check_cas<T: Num>(w: &Comm, f: &Fixture<T>) -> onesided::Result<()> {
    let me = w.rank();
    let win = &f.win;
    if !T::TYPE.is_integer() {
        assert!(matches!(
            win.compare_and_swap(T::from_i(1), T::from_i(0), 0, f.disp(0, 0)),
            Err(Error::InvalidOp { op: "cas", .. })
        ));
        return Ok(());
    }
    if me == 0 {
        f.write_local(0, &[T::from_i(0)])?;
    }
    w.barrier()?;
    // Everyone tries to swap 0 -> its rank+1 at once; exactly one succeeds.
    win.lock_all(Assert::NONE)?;
    let old = win.compare_and_swap(T::from_i(me as i64 + 1), T::from_i(0), 0, f.disp(0, 0))?;
    win.unlock_all()?;
    let won = w.allgather(&[u32::from(bits(&[old]) == bits(&[T::from_i(0)]))])?;
    assert_eq!(
        won.iter().sum::<u32>(),
        1,
        "exactly one compare_and_swap wins"
    );
    let winner = won.iter().position(|&x| x == 1).unwrap();
    let mut v = [T::from_i(0)];
    win.lock(LockType::Shared, 0, Assert::NONE)?;
    win.get(&mut v, 0, f.disp(0, 0))?;
    win.unlock(0)?;
    assert_eq!(bits(&v), bits(&[T::from_i(winner as i64 + 1)]));
    w.barrier()?;
    Ok(())
}

fn all_ops_for<T: Num>(u: &Universe, kind: Kind) -> onesided::Result<()> {
    let w = u.world();
    let f = Fixture::<T>::new(w, kind, LEN)?;
    for op in Op::ALL {
        check_op(w, &f, op)?;
    }
    check_cas(w, &f)?;
    f.free()
}

fn every_op_and_type(kind: Kind) {
    kind.job(3)
        .run(move |u| {
            all_ops_for::<i8>(u, kind)?;
            all_ops_for::<i16>(u, kind)?;
            all_ops_for::<i32>(u, kind)?;
            all_ops_for::<i64>(u, kind)?;
            all_ops_for::<u8>(u, kind)?;
            all_ops_for::<u16>(u, kind)?;
            all_ops_for::<u32>(u, kind)?;
            all_ops_for::<u64>(u, kind)?;
            all_ops_for::<f32>(u, kind)?;
            all_ops_for::<f64>(u, kind)
        })
        .assert_success();
}

mod serial_model {
    use super::*;
    #[test]
    fn allocate() {
        every_op_and_type(Kind::Allocate)
    }
    #[test]
    fn allocate_shared() {
        every_op_and_type(Kind::Shared)
    }
    #[test]
    fn create_vec() {
        every_op_and_type(Kind::CreateVec)
    }
    #[test]
    fn create_alloc_mem() {
        every_op_and_type(Kind::CreateAllocMem)
    }
    #[test]
    fn dynamic_vec() {
        every_op_and_type(Kind::DynamicVec)
    }
    #[test]
    fn dynamic_alloc_mem() {
        every_op_and_type(Kind::DynamicAllocMem)
    }
}

/// One randomized operation of the stress test.
#[derive(Debug, Clone, Copy)]
enum Action {
    /// accumulate(sum) of `len` elements starting at `at`.
    Acc {
        target: usize,
        at: usize,
        len: usize,
        seed: u64,
    },
    /// fetch_and_op(sum) of one element.
    Fop { target: usize, at: usize, add: u64 },
    /// compare_and_swap loop adding `add` to one element.
    Cas { target: usize, at: usize, add: u64 },
    /// get_accumulate(sum) of `len` elements.
    GetAcc {
        target: usize,
        at: usize,
        len: usize,
        seed: u64,
    },
}

const STRESS_LEN: usize = 40;
const ROUNDS: usize = 10;
const PER_ROUND: usize = 25;

fn increments(seed: u64, len: usize) -> Vec<u64> {
    let mut r = Rng::new(seed);
    (0..len).map(|_| r.next() % 1000).collect()
}

fn actions(rank: usize, n: usize) -> Vec<Action> {
    let mut r = Rng::new(rank as u64 + 1);
    (0..ROUNDS * PER_ROUND)
        .map(|_| {
            let target = r.below(n);
            let at = r.below(STRESS_LEN);
            let len = 1 + r.below(STRESS_LEN - at);
            match r.below(4) {
                0 => Action::Acc {
                    target,
                    at,
                    len,
                    seed: r.next(),
                },
                1 => Action::Fop {
                    target,
                    at,
                    add: r.next() % 1000,
                },
                2 => Action::Cas {
                    target,
                    at,
                    add: r.next() % 1000,
                },
                _ => Action::GetAcc {
                    target,
                    at,
                    len,
                    seed: r.next(),
                },
            }
        })
        .collect()
}

fn run_action<T: Num>(f: &Fixture<T>, a: Action) -> onesided::Result<()> {
    let conv = |v: &[u64]| -> Vec<T> { v.iter().map(|&x| T::from_i(x as i64)).collect() };
    match a {
        Action::Acc {
            target,
            at,
            len,
            seed,
        } => f.win.accumulate(
            &conv(&increments(seed, len)),
            target,
            f.disp(target, at),
            Op::Sum,
        ),
        Action::GetAcc {
            target,
            at,
            len,
            seed,
        } => {
            let mut out = vec![T::from_i(0); len];
            f.win.get_accumulate(
                &conv(&increments(seed, len)),
                &mut out,
                target,
                f.disp(target, at),
                Op::Sum,
            )
        }
        Action::Fop { target, at, add } => f
            .win
            .fetch_and_op(T::from_i(add as i64), target, f.disp(target, at), Op::Sum)
            .map(drop),
        // MPI defines compare_and_swap on integers only: floats add with fetch_and_op.
        Action::Cas { target, at, add } if !T::TYPE.is_integer() => f
            .win
            .fetch_and_op(T::from_i(add as i64), target, f.disp(target, at), Op::Sum)
            .map(drop),
        Action::Cas { target, at, add } => {
            let d = f.disp(target, at);
            let mut seen = f.win.fetch_and_op(T::from_i(0), target, d, Op::NoOp)?;
            loop {
                let want = T::combine(Op::Sum, seen, T::from_i(add as i64));
                let old = f.win.compare_and_swap(want, seen, target, d)?;
                if bits(&[old]) == bits(&[seen]) {
                    return Ok(());
                }
                seen = old;
            }
        }
    }
}

/// All ranks at once, mixed single- and multi-element operations, mixed synchronization
/// modes (a common mode per round for fence/PSCW rounds; each rank its own passive mode
/// otherwise): the final state must be the serial sum of everything — no lost update.
fn stress<T: Num>(kind: Kind) {
    testing::run(4, move |u| {
        let w = u.world();
        let (me, n) = (w.rank(), w.size());
        let f = Fixture::<T>::new(w, kind, STRESS_LEN)?;
        let all = Group::new(0..n)?;
        let mine = actions(me, n);
        for (round, batch) in mine.chunks(PER_ROUND).enumerate() {
            let mut pick = Rng::new((round * 100 + me) as u64);
            match round % 4 {
                0 => {
                    f.win.fence(Assert::NONE)?;
                    for &a in batch {
                        run_action(&f, a)?;
                    }
                    f.win.fence(Assert::NOSUCCEED)?;
                }
                1 => {
                    f.win.post(&all, Assert::NONE)?;
                    f.win.start(&all, Assert::NONE)?;
                    for &a in batch {
                        run_action(&f, a)?;
                    }
                    f.win.complete()?;
                    f.win.wait()?;
                }
                _ => {
                    for &a in batch {
                        let target = match a {
                            Action::Acc { target, .. }
                            | Action::Fop { target, .. }
                            | Action::Cas { target, .. }
                            | Action::GetAcc { target, .. } => target,
                        };
                        match pick.below(3) {
                            0 => {
                                f.win.lock_all(Assert::NONE)?;
                                run_action(&f, a)?;
                                f.win.unlock_all()?;
                            }
                            1 => {
                                f.win.lock(LockType::Shared, target, Assert::NONE)?;
                                run_action(&f, a)?;
                                f.win.unlock(target)?;
                            }
                            _ => {
                                f.win.lock(LockType::Exclusive, target, Assert::NONE)?;
                                run_action(&f, a)?;
                                f.win.flush(target)?;
                                f.win.unlock(target)?;
                            }
                        }
                    }
                    w.barrier()?;
                }
            }
        }
        w.barrier()?;
        // Serial model from every rank's action list.
        let mut model = vec![vec![0u64; STRESS_LEN]; n];
        for r in 0..n {
            for a in actions(r, n) {
                match a {
                    Action::Acc {
                        target,
                        at,
                        len,
                        seed,
                    }
                    | Action::GetAcc {
                        target,
                        at,
                        len,
                        seed,
                    } => {
                        for (i, x) in increments(seed, len).into_iter().enumerate() {
                            model[target][at + i] += x;
                        }
                    }
                    Action::Fop { target, at, add } | Action::Cas { target, at, add } => {
                        model[target][at] += add
                    }
                }
            }
        }
        let mut got = vec![T::from_i(0); STRESS_LEN];
        f.read_local(0, &mut got)?;
        let want: Vec<T> = model[me].iter().map(|&x| T::from_i(x as i64)).collect();
        assert_eq!(
            bits(&got),
            bits(&want),
            "rank {me}: lost or duplicated updates"
        );
        f.free()
    });
}

mod stress {
    use super::*;
    #[test]
    fn allocate_u64() {
        stress::<u64>(Kind::Allocate)
    }
    #[test]
    fn allocate_f64() {
        stress::<f64>(Kind::Allocate)
    }
    #[test]
    fn create_vec_i64() {
        stress::<i64>(Kind::CreateVec)
    }
    #[test]
    fn create_alloc_mem_u32() {
        stress::<u32>(Kind::CreateAllocMem)
    }
    #[test]
    fn dynamic_vec_f64() {
        stress::<f64>(Kind::DynamicVec)
    }
    #[test]
    fn dynamic_alloc_mem_u64() {
        stress::<u64>(Kind::DynamicAllocMem)
    }
}

/// Every rank increments one counter many times with fetch_and_op (and get_accumulate):
/// the values returned are exactly 0..total, each once, increasing per rank — a valid
/// linearization of a counter.
fn linearization(kind: Kind, info: WinInfo) {
    testing::run(4, move |u| {
        let w = u.world();
        const PER_RANK: usize = 400;
        let win = match kind {
            Kind::Allocate => Window::<u64>::builder(w).info(&info).allocate(2)?,
            _ => Window::<u64>::builder(w)
                .info(&info)
                .create(vec![0u64; 2])?,
        };
        let mut seen = Vec::with_capacity(PER_RANK);
        win.lock_all(Assert::NONE)?;
        for i in 0..PER_RANK {
            let v = if i % 2 == 0 {
                win.fetch_and_op(1, 0, 1, Op::Sum)?
            } else {
                let mut old = [0];
                win.get_accumulate(&[1], &mut old, 0, 1, Op::Sum)?;
                old[0]
            };
            seen.push(v);
        }
        win.unlock_all()?;
        assert!(
            seen.windows(2).all(|p| p[0] < p[1]),
            "per-rank values increase"
        );
        let mut all: Vec<u64> = w.allgatherv(&seen)?.concat();
        all.sort_unstable();
        let total = (PER_RANK * w.size()) as u64;
        assert_eq!(all, (0..total).collect::<Vec<_>>());
        w.barrier()?;
        drop(win.free()?);
        Ok(())
    });
}

#[test]
fn counter_linearization_atomic_path() {
    linearization(Kind::Allocate, WinInfo::new());
}

#[test]
fn counter_linearization_cma_path() {
    linearization(Kind::CreateVec, WinInfo::new());
}

#[test]
fn counter_linearization_coarse_granularity() {
    // A granularity above the element size makes even single elements use lock stripes.
    linearization(Kind::Allocate, WinInfo::new().accumulate_granularity(256));
}

#[test]
fn counter_linearization_absurd_granularity() {
    // usize::MAX bytes: before, rounding it up to a multiple of the element size
    // overflowed (a panic in debug builds, a division by zero in release builds).
    linearization(
        Kind::Allocate,
        WinInfo::new().accumulate_granularity(usize::MAX),
    );
}

/// Misaligned elements (disp_unit 1, odd offsets) take the lock-stripe path; concurrent
/// single- and multi-element sums on them still lose nothing.
#[test]
fn misaligned_elements_stay_atomic() {
    testing::run(3, |u| {
        let w = u.world();
        let win = Window::<u64>::builder(w).disp_unit(1).allocate(8)?;
        const ITERS: u64 = 300;
        win.lock_all(Assert::NONE)?;
        for i in 0..ITERS {
            if i % 3 == 0 {
                win.accumulate(&[1, 1], 0, 4, Op::Sum)?; // bytes 4..20 of rank 0
            } else {
                win.fetch_and_op(1, 0, 4, Op::Sum)?;
                win.fetch_and_op(1, 0, 12, Op::Sum)?;
            }
        }
        win.unlock_all()?;
        w.barrier()?;
        if w.rank() == 0 {
            let mut words = [0u64; 2];
            win.lock(LockType::Shared, 0, Assert::NONE)?;
            win.get(&mut words[..1], 0, 4)?;
            win.get(&mut words[1..], 0, 12)?;
            win.unlock(0)?;
            assert_eq!(words, [ITERS * 3, ITERS * 3]);
        }
        w.barrier()?;
        win.free()?;
        Ok(())
    });
}

#[test]
fn accumulate_errors() {
    testing::run(2, |u| {
        let w = u.world();
        let win = Window::<f64>::allocate(w, 4)?;
        let ints = Window::<u32>::allocate(w, 4)?;
        assert!(matches!(
            win.accumulate(&[1.0], 1, 0, Op::Sum),
            Err(Error::NoAccessEpoch { .. })
        ));
        win.lock_all(Assert::NONE)?;
        ints.lock_all(Assert::NONE)?;
        for op in [Op::Band, Op::Bor, Op::Bxor, Op::Land, Op::Lor, Op::Lxor] {
            assert!(matches!(
                win.accumulate(&[1.0], 1, 0, op),
                Err(Error::InvalidOp {
                    call: "accumulate",
                    ty: "f64",
                    ..
                })
            ));
            ints.accumulate(&[1], 1, 0, op)?;
        }
        assert!(matches!(
            ints.accumulate(&[1], 1, 0, Op::NoOp),
            Err(Error::InvalidOp { op: "no_op", .. })
        ));
        assert!(matches!(
            win.compare_and_swap(1.0, 0.0, 1, 0),
            Err(Error::InvalidOp { op: "cas", .. })
        ));
        assert!(matches!(
            win.get_accumulate(&[1.0, 2.0], &mut [0.0], 1, 0, Op::Sum),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            win.accumulate(&[1.0; 2], 1, 3, Op::Sum),
            Err(Error::OutOfBounds { .. })
        ));
        assert!(matches!(
            win.fetch_and_op(1.0, 2, 0, Op::Sum),
            Err(Error::InvalidRank { .. })
        ));
        assert!(matches!(
            ints.compare_and_swap(1, 0, 1, 4),
            Err(Error::OutOfBounds { .. })
        ));
        win.unlock_all()?;
        ints.unlock_all()?;
        w.barrier()?;
        win.free()?;
        ints.free()?;
        Ok(())
    });
}

/// Long accumulates on ordinary memory (reached by cross-memory attach or served by the
/// target) take every lock stripe of a chunk at once: runs that wrap around the stripe
/// numbers, runs that need all of them, and runs longer than one chunk race each other and
/// single-element fetch_and_ops from 4 ranks, and no update is lost (a deadlock between two
/// holders of several stripes would time the test out).
#[test]
fn long_runs_take_their_stripes_together_and_lose_no_update() {
    testing::run(4, |u| {
        let w = u.world();
        // 10,000 u64: 1,250 granules of 64 bytes, ~20 times round the 64 stripes; the
        // longest run (~80 KB) is more than one chunk.
        const LEN: usize = 10_000;
        const ROUNDS: usize = 24;
        let win = Window::<u64>::create(w, vec![0u64; LEN])?;
        let mut rng = Rng::new(7 + w.rank() as u64);
        let mut expected = vec![0u64; LEN * w.size()];
        win.lock_all(Assert::NONE)?;
        for round in 0..ROUNDS {
            let target = rng.below(w.size());
            let (at, len) = match round % 3 {
                // Across stripe 63 -> 0 (granule 63 is stripe 63).
                0 => (63 * 8 - 3 + rng.below(8), 16 + rng.below(32)),
                // More than 64 granules: every stripe.
                1 => (rng.below(LEN / 2), 64 * 8 + rng.below(LEN / 2 - 64 * 8)),
                // Short runs anywhere.
                _ => (rng.below(LEN - 64), 1 + rng.below(63)),
            };
            let ones = vec![1u64 + round as u64; len];
            win.accumulate(&ones, target, at, Op::Sum)?;
            for e in &mut expected[target * LEN + at..target * LEN + at + len] {
                *e += 1 + round as u64;
            }
            for _ in 0..8 {
                let (t, i) = (rng.below(w.size()), rng.below(LEN));
                win.fetch_and_op(1, t, i, Op::Sum)?;
                expected[t * LEN + i] += 1;
            }
        }
        win.unlock_all()?;
        w.barrier()?;
        let mut mine = vec![0u64; LEN];
        win.local_read(0, &mut mine)?;
        let mut total = expected;
        w.allreduce(&mut total, onesided::ReduceOp::Sum)?;
        let me = w.rank();
        assert_eq!(mine, total[me * LEN..(me + 1) * LEN], "rank {me}'s window");
        win.free()?;
        Ok(())
    });
}

/// Long accumulates under an exclusive lock are applied with plain loads and stores when
/// one thread issues the window's atomics (`plain_accumulate_runs` counts them), with the
/// results of the atomics: sums, fetched old values, replace, max, on every window kind
/// whose memory the origin maps. Under a shared lock they stay atomic (no plain run). And
/// when other threads issue fetch_and_ops on the same elements meanwhile, no update is
/// lost: the first of them turns plain runs off and waits for the one in progress.
#[test]
fn long_accumulates_under_an_exclusive_lock_go_plain_and_lose_no_update() {
    testing::run(2, |u| {
        let w = u.world();
        const LEN: usize = 512;
        for kind in [
            Kind::Allocate,
            Kind::CreateAllocMem,
            Kind::DynamicAllocMem,
            Kind::CreateVec,
        ] {
            let f = Fixture::<u64>::new(w, kind, LEN)?;
            let win = &f.win;
            // Memory rank 0 maps: rank 1 on its node, not reached by cross-memory attach.
            let direct = w.node_of(0)? == w.node_of(1)? && kind != Kind::CreateVec;
            w.barrier()?;
            if w.rank() == 0 {
                let before = testing::plain_accumulate_runs();
                let ramp: Vec<u64> = (0..LEN as u64).collect();
                win.lock(LockType::Exclusive, 1, Assert::NONE)?;
                win.accumulate(&ramp, 1, f.disp(1, 0), Op::Sum)?;
                win.accumulate(&ramp, 1, f.disp(1, 0), Op::Sum)?;
                let mut old = vec![0u64; LEN];
                win.get_accumulate(&ramp, &mut old, 1, f.disp(1, 0), Op::Sum)?;
                assert_eq!(
                    old,
                    ramp.iter().map(|i| 2 * i).collect::<Vec<_>>(),
                    "{kind:?}"
                );
                // A short run stays atomic; a single element too.
                win.accumulate(&[1u64; 4], 1, f.disp(1, 0), Op::Sum)?;
                win.fetch_and_op(10, 1, f.disp(1, 5), Op::Sum)?;
                win.accumulate(&[7u64; 100], 1, f.disp(1, 400), Op::Replace)?;
                win.accumulate(&vec![1000u64; 200], 1, f.disp(1, 100), Op::Max)?;
                win.unlock(1)?;
                let plain = testing::plain_accumulate_runs() - before;
                // Direct memory (allocate, and create/dynamic windows this process maps)
                // takes the plain path; memory reached otherwise never does.
                assert_eq!(plain, if direct { 5 } else { 0 }, "{kind:?}: plain runs");
                // Under a shared lock nothing goes plain.
                let before = testing::plain_accumulate_runs();
                win.lock(LockType::Shared, 1, Assert::NONE)?;
                win.accumulate(&ramp, 1, f.disp(1, 0), Op::Sum)?;
                win.unlock(1)?;
                assert_eq!(
                    testing::plain_accumulate_runs(),
                    before,
                    "{kind:?}: shared lock"
                );
            }
            w.barrier()?;
            if w.rank() == 1 {
                let mut got = vec![0u64; LEN];
                f.read_local(0, &mut got)?;
                for (i, &v) in got.iter().enumerate() {
                    // The exclusive epoch: three sums of the ramp, the short run, the
                    // fetch_and_op, replace, max; then the shared epoch's sum.
                    let mut want = 3 * i as u64 + u64::from(i < 4) + if i == 5 { 10 } else { 0 };
                    if (400..500).contains(&i) {
                        want = 7;
                    }
                    if (100..300).contains(&i) {
                        want = want.max(1000);
                    }
                    want += i as u64;
                    assert_eq!(v, want, "{kind:?}: element {i}");
                }
            }
            w.barrier()?;
            f.free()?;
        }
        // Threads: one streams long sums (the first to issue an atomic, so plain runs
        // start), three fetch_and_op the same elements meanwhile.
        let win = Window::<u64>::allocate(w, 64)?;
        const RUNS: u64 = 5000;
        if w.rank() == 0 {
            win.lock(LockType::Exclusive, 1, Assert::NONE)?;
            let before = testing::plain_accumulate_runs();
            let started = std::sync::atomic::AtomicBool::new(false);
            std::thread::scope(|s| -> onesided::Result<()> {
                let long = s.spawn(|| -> onesided::Result<()> {
                    for run in 0..RUNS {
                        win.accumulate(&[1u64; 64], 1, 0, Op::Sum)?;
                        if run == 0 {
                            started.store(true, std::sync::atomic::Ordering::Release);
                        }
                    }
                    Ok(())
                });
                let singles: Vec<_> = (0..3u64)
                    .map(|t| {
                        let (win, started) = (&win, &started);
                        s.spawn(move || -> onesided::Result<()> {
                            while !started.load(std::sync::atomic::Ordering::Acquire) {
                                std::thread::yield_now();
                            }
                            for i in 0..RUNS {
                                win.fetch_and_op(1, 1, ((t * 7 + i) % 64) as usize, Op::Sum)?;
                            }
                            Ok(())
                        })
                    })
                    .collect();
                long.join().expect("the long thread")?;
                singles
                    .into_iter()
                    .try_for_each(|h| h.join().expect("a single thread"))
            })?;
            win.unlock(1)?;
            if w.node_of(0)? == w.node_of(1)? {
                assert!(
                    testing::plain_accumulate_runs() > before,
                    "no plain run raced"
                );
            }
        }
        w.barrier()?;
        if w.rank() == 1 {
            let mut got = [0u64; 64];
            win.local_read(0, &mut got)?;
            let total: u64 = got.iter().sum();
            assert_eq!(total, 64 * RUNS + 3 * RUNS, "an update was lost");
        }
        win.free()?;
        Ok(())
    });
}

/// A wait for an accumulate lock stripe that lasts reports what it waits for
/// (`ONESIDED_HANG_REPORT`), and still completes: rank 1 keeps accumulating 64 KiB runs of
/// complex numbers into rank 0's memory (each run under all its stripes: on one node in
/// rank 0's control block, across nodes through the control plane) until rank 0 says stop;
/// rank 0 stops rank 1 and accumulates one element there itself. When rank 1 was stopped
/// holding the stripes, that accumulate waits until a thread of rank 0 lets rank 1
/// continue 1.5 s later — and says so after 0.5 s. Across two nodes rank 2, on the other
/// node, accumulates single elements among rank 1's runs now and then: the target applies
/// them under the stripes itself, answering "held" while rank 1 holds one.
#[test]
fn a_stripe_wait_that_lasts_reports_itself() {
    use onesided::{Complex64, ElemType, RawWindow};
    const RUN: usize = 64 << 10;
    let report = testing::job(3)
        .env("ONESIDED_HANG_REPORT", "0.5")
        .timeout(std::time::Duration::from_secs(120))
        .run(|u| {
            let w = u.world();
            let me = w.rank();
            let mut private = vec![0u64; RUN / 8 + 1];
            // SAFETY: `private` outlives the window, freed below.
            let win = unsafe {
                RawWindow::create(w, private.as_mut_ptr().cast(), RUN + 8, 1, &WinInfo::new())?
            };
            let pids = w.allgather(&[std::process::id() as u64])?;
            win.lock_all(Assert::NONE)?;
            let done_at = RUN;
            // On one node rank 2 only watches: its updates would go through rank 0's
            // request ring there, which rank 0's own wait serves.
            let across = w.node_size() != w.size();
            if me == 1 || (me == 2 && across) {
                let ones = vec![Complex64 { re: 1.0, im: 0.0 }; RUN / 16];
                let mine = if me == 1 { &ones[..] } else { &ones[..1] };
                let at = if me == 1 { 0 } else { 32 };
                let mut done = [0u8; 8];
                while done == [0; 8] {
                    win.accumulate(bytemuck::cast_slice(mine), ElemType::C64, 0, at, Op::Sum)?;
                    win.get_accumulate(&[0; 8], &mut done, ElemType::U64, 0, done_at, Op::NoOp)?;
                    if me == 2 {
                        // Now and then: rank 0 must find rank 1 holding the stripes.
                        std::thread::sleep(std::time::Duration::from_millis(2));
                    }
                }
            } else if me == 0 {
                let mut waited = false;
                for _attempt in 0..30 {
                    common::stop(pids[1]);
                    let peer = rustix::process::Pid::from_raw(pids[1] as i32).unwrap();
                    let waker = std::thread::spawn(move || {
                        std::thread::sleep(std::time::Duration::from_millis(1500));
                        rustix::process::kill_process(peer, rustix::process::Signal::CONT)
                    });
                    let start = std::time::Instant::now();
                    let z = Complex64 { re: 0.0, im: 1.0 };
                    win.accumulate(bytemuck::bytes_of(&z), ElemType::C64, 0, 16, Op::Sum)?;
                    waited = start.elapsed() >= std::time::Duration::from_secs(1);
                    waker.join().unwrap().expect("continue");
                    if waited {
                        break;
                    }
                }
                assert!(waited, "rank 1 was never stopped holding a stripe");
                win.accumulate(&1u64.to_ne_bytes(), ElemType::U64, 0, done_at, Op::Replace)?;
            }
            win.unlock_all()?;
            w.barrier()?;
            win.free()?;
            drop(private);
            Ok(())
        });
    report.assert_success();
    let err = report.stderr_of(0);
    assert!(
        err.lines().any(|l| l.contains("hang report after")
            && l.contains("an accumulate lock stripe of rank 0")),
        "rank 0 reported no stripe wait:\n{err}"
    );
}

/// One origin's accumulate, then put and get of the same elements, with no flush between,
/// land and read in issue order, as on one node. On a window
/// across nodes, an accumulate that CPU atomics do not apply (here: ARMCI-MPI's 1 MiB
/// `mpi_accumulate_granularity`) to a rank of the origin's own node is in flight on the
/// network while a put or get touches that memory directly: they wait for it
/// (ARMCI-MPI's location-consistency test read stale values across two virtual nodes
/// before). Each rank accumulates to the next one only, so the next one's elements are
/// exactly the rounds done. A get through the network from another node may still
/// overtake a provider's accumulate (open): ranks of one node are checked.
#[test]
fn puts_and_gets_land_after_the_accumulate_issued_before_them() {
    const N: usize = 32;
    testing::run(4, |u| {
        let w = u.world();
        let (me, n) = (w.rank(), w.size());
        // ARMCI-MPI's hint: without it the elements take CPU atomics on this node.
        let info = WinInfo::new().accumulate_granularity(1 << 20);
        let win = Window::<u64>::builder(w).info(&info).allocate(N)?;
        let next = (me + 1) % n;
        let near = w.node_of(next)? == w.node_of(me)?;
        win.lock_all(Assert::NONE)?;
        for round in 1..=100u64 {
            win.accumulate(&[1; N], next, 0, Op::Sum)?;
            // A put after it lands after it too: element 0 ends as the put wrote it.
            win.put(&[round << 32], next, 0)?;
            let mut back = [0u64; N];
            win.get(&mut back, next, 0)?;
            if near {
                let mut want = [round; N];
                want[0] = round << 32;
                assert_eq!(back, want, "rank {me} reading rank {next}");
            }
        }
        win.unlock_all()?;
        w.barrier()?;
        win.free()?;
        Ok(())
    });
}
