//! Derived layouts on both sides of put, get, accumulate and get_accumulate.

mod common;

use common::{Fixture, Kind};
use onesided::{testing, Assert, Error, Layout, LockType, Op, Pod, Window, Zeroable};

/// Origin and target shaped differently (vector vs indexed vs contiguous), on every kind of
/// memory: what lands must be what was selected, in order, and nothing else may change.
fn round_trip(kind: Kind) {
    kind.job(3)
        .run(move |u| {
            let w = u.world();
            let (me, n) = (w.rank(), w.size());
            const LEN: usize = 64;
            let f = Fixture::<u32>::new(w, kind, LEN)?;
            let src: Vec<u32> = (0..LEN as u32)
                .map(|i| 1000 * (me as u32 + 1) + i)
                .collect();
            // Origin: elements 0, 3, 6, ... (16 of them); target: blocks 2+5+9 at scattered spots.
            let origin = Layout::<u32>::vector(16, 1, 3)?;
            let target = Layout::<u32>::indexed(&[(40, 2), (10, 5), (20, 9)])?;
            let right = (me + 1) % n;
            f.win.fence(Assert::NONE)?;
            f.win
                .put_layout(&src, &origin, right, f.disp(right, 0), &target)?;
            f.win.fence(Assert::NONE)?;
            let left = (me + n - 1) % n;
            let lsrc: Vec<u32> = (0..LEN as u32)
                .map(|i| 1000 * (left as u32 + 1) + i)
                .collect();
            let mut mem = vec![0u32; LEN];
            f.read_local(0, &mut mem)?;
            let picked: Vec<u32> = (0..16).map(|k| lsrc[3 * k]).collect();
            let mut want = vec![0u32; LEN];
            let mut k = 0;
            for (d, l) in [(40, 2), (10, 5), (20, 9)] {
                for i in 0..l {
                    want[d + i] = picked[k];
                    k += 1;
                }
            }
            assert_eq!(mem, want, "rank {me}: target memory after put_layout");
            // get back with the layouts swapped: the scattered target blocks, read as a vector.
            let mut back = vec![0u32; LEN];
            f.win
                .get_layout(&mut back, &origin, right, f.disp(right, 0), &target)?;
            f.win.fence(Assert::NOSUCCEED)?;
            for k in 0..16 {
                assert_eq!(back[3 * k], src[3 * k]);
                assert_eq!(
                    back[3 * k + 1],
                    0,
                    "get_layout wrote outside the origin layout"
                );
            }
            f.free()
        })
        .assert_success();
}

mod round_trip {
    use super::*;
    #[test]
    fn allocate() {
        round_trip(Kind::Allocate)
    }
    #[test]
    fn create_vec() {
        round_trip(Kind::CreateVec)
    }
    #[test]
    fn create_alloc_mem() {
        round_trip(Kind::CreateAllocMem)
    }
    #[test]
    fn dynamic_vec() {
        round_trip(Kind::DynamicVec)
    }
    #[test]
    fn dynamic_alloc_mem() {
        round_trip(Kind::DynamicAllocMem)
    }
    #[test]
    fn allocate_shared() {
        round_trip(Kind::Shared)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
struct Cell {
    density: f64,
    velocity: [f64; 3],
    flags: u64,
}

/// Struct layouts: move only some fields of an array of records.
#[test]
fn struct_fields() {
    testing::run(2, |u| {
        let w = u.world();
        let me = w.rank();
        let cells: Vec<Cell> = (0..8)
            .map(|i| Cell {
                density: i as f64 + 10.0 * me as f64,
                velocity: [i as f64; 3],
                flags: 0xF0 + i,
            })
            .collect();
        for create in [false, true] {
            let win = if create {
                Window::create(w, vec![Cell::zeroed(); 8])?
            } else {
                Window::<Cell>::allocate(w, 8)?
            };
            // density (offset 0, 8 bytes) and flags (offset 32, 8 bytes) of every record.
            let fields = Layout::<Cell>::fields(8, &[(0, 8), (32, 8)])?;
            // flags of record i (bytes 32..40) touch density of record i+1 (40..48): those
            // pairs merge, so 16 fields are 9 contiguous copies.
            assert_eq!(fields.blocks().len(), 9);
            win.lock(LockType::Exclusive, 1 - me, Assert::NONE)?;
            win.put_layout(&cells, &fields, 1 - me, 0, &fields)?;
            win.unlock(1 - me)?;
            w.barrier()?;
            let mut got = vec![Cell::zeroed(); 8];
            win.local_read(0, &mut got)?;
            for (i, c) in got.iter().enumerate() {
                assert_eq!(c.density, i as f64 + 10.0 * (1 - me) as f64);
                assert_eq!(c.flags, 0xF0 + i as u64);
                assert_eq!(c.velocity, [0.0; 3], "unselected field changed");
            }
            w.barrier()?;
            drop(win.free()?);
        }
        Ok(())
    });
}

/// accumulate and get_accumulate with layouts keep element-wise semantics.
#[test]
fn accumulate_with_layouts() {
    testing::run(3, |u| {
        let w = u.world();
        let n = w.size();
        for kind in [Kind::Allocate, Kind::CreateVec] {
            let f = Fixture::<i64>::new(w, kind, 16)?;
            // Everyone adds 1..=8 from the even elements of its buffer into elements 8..16
            // of rank 0 (a contiguous target), concurrently.
            let src: Vec<i64> = (0..16)
                .map(|i| if i % 2 == 0 { i / 2 + 1 } else { -99 })
                .collect();
            f.win.lock_all(Assert::NONE)?;
            f.win.accumulate_layout(
                &src,
                &Layout::vector(8, 1, 2)?,
                0,
                f.disp(0, 8),
                &Layout::contiguous(8)?,
                Op::Sum,
            )?;
            f.win.unlock_all()?;
            w.barrier()?;
            if w.rank() == 0 {
                let mut v = vec![0i64; 16];
                f.read_local(0, &mut v)?;
                let want: Vec<i64> = (0..16)
                    .map(|i| if i < 8 { 0 } else { (i - 7) * n as i64 })
                    .collect();
                assert_eq!(v, want);
            }
            w.barrier()?;
            // get_accumulate(no_op) reads the same 8 values into scattered result slots.
            let mut out = vec![0i64; 24];
            f.win.lock(LockType::Shared, 0, Assert::NONE)?;
            f.win.get_accumulate_layout(
                &[0; 8],
                &Layout::contiguous(8)?,
                &mut out,
                &Layout::vector(8, 1, 3)?,
                0,
                f.disp(0, 8),
                &Layout::contiguous(8)?,
                Op::NoOp,
            )?;
            f.win.unlock(0)?;
            for k in 0..8 {
                assert_eq!(out[3 * k], (k as i64 + 1) * n as i64);
            }
            w.barrier()?;
            f.free()?;
        }
        Ok(())
    });
}

#[test]
fn layout_errors() {
    testing::run(2, |u| {
        let w = u.world();
        let win = Window::<u32>::allocate(w, 16)?;
        win.lock_all(Assert::NONE)?;
        let three = Layout::<u32>::contiguous(3)?;
        let four = Layout::<u32>::vector(2, 2, 5)?;
        assert!(matches!(
            win.put_layout(&[0; 8], &three, 1, 0, &four),
            Err(Error::LayoutMismatch {
                origin: 12,
                target: 16,
                ..
            })
        ));
        assert!(matches!(
            win.get_layout(&mut [0; 2], &three, 1, 0, &Layout::contiguous(3)?),
            Err(Error::InvalidArgument(_))
        ));
        // The target extent must fit the target window.
        assert!(matches!(
            win.put_layout(&[0; 4], &Layout::contiguous(4)?, 1, 10, &four),
            Err(Error::OutOfBounds { .. })
        ));
        assert!(matches!(
            win.accumulate_layout(&[1; 4], &Layout::contiguous(4)?, 1, 0, &three, Op::Sum),
            Err(Error::LayoutMismatch { .. })
        ));
        win.put_layout(&[7; 4], &Layout::contiguous(4)?, 1, 8, &four)?;
        win.unlock_all()?;
        w.barrier()?;
        win.free()?;
        Ok(())
    });
}

/// Layouts whose offsets wrap around the address space are refused when built, and a
/// layout that passed its own checks can never reach outside the target's window on any
/// memory kind (before: the wrapped offset passed the bounds check of its end and the put
/// wrote into another rank's memory, or over a `create` window corrupted the target's heap).
#[test]
fn wrapping_layouts_never_reach_outside_the_window() {
    testing::run(2, |u| {
        let w = u.world();
        assert!(matches!(
            Layout::<u8>::indexed(&[(0usize.wrapping_sub(16), 17)]),
            Err(Error::InvalidArgument(_))
        ));
        assert!(Layout::<u64>::indexed(&[(usize::MAX / 8, 2)]).is_err());
        for kind in Kind::all_over(w) {
            let f = Fixture::<u64>::new(w, kind, 8)?;
            let peer = 1 - w.rank();
            f.win.lock_all(Assert::NONE)?;
            // The largest offsets that are still representable: refused by the bounds
            // check of the target window, never wrapped.
            let far = Layout::<u64>::indexed(&[(usize::MAX / 8 - 1, 1)])?;
            assert!(
                f.win
                    .put_layout(
                        &[7u64; 1],
                        &Layout::contiguous(1)?,
                        peer,
                        f.disp(peer, 0),
                        &far
                    )
                    .is_err(),
                "{kind:?}"
            );
            let mut back = [0u64; 1];
            assert!(f
                .win
                .get_layout(
                    &mut back,
                    &Layout::contiguous(1)?,
                    peer,
                    f.disp(peer, 0),
                    &far
                )
                .is_err());
            assert!(f
                .win
                .accumulate_layout(
                    &[1],
                    &Layout::contiguous(1)?,
                    peer,
                    f.disp(peer, 0),
                    &far,
                    Op::Sum
                )
                .is_err());
            // The origin side is bounded block by block too.
            assert!(f
                .win
                .put_layout(
                    &[7u64; 2],
                    &far,
                    peer,
                    f.disp(peer, 0),
                    &Layout::contiguous(1)?
                )
                .is_err());
            f.win.unlock_all()?;
            w.barrier()?;
            // Nothing landed anywhere in the window.
            let mut mem = [1u64; 8];
            f.read_local(0, &mut mem)?;
            assert_eq!(mem, [0u64; 8], "{kind:?}");
            w.barrier()?;
            f.free()?;
        }
        Ok(())
    });
}

/// A zero-count operation is a no-op on every window flavor, whatever its displacement,
/// a dynamic window with nothing attached included (before: `NotAttached` there only).
#[test]
fn zero_count_operations_are_no_ops_on_every_flavor() {
    testing::run(2, |u| {
        let w = u.world();
        let peer = 1 - w.rank();
        for kind in Kind::all_over(w) {
            let f = Fixture::<u64>::new(w, kind, 4)?;
            f.win.lock_all(Assert::NONE)?;
            for disp in [0, f.disp(peer, 0), f.disp(peer, 1000), 0x1000] {
                f.win.put(&[], peer, disp)?;
                f.win.get(&mut [], peer, disp)?;
                f.win.accumulate(&[], peer, disp, Op::Sum)?;
                f.win.get_accumulate(&[], &mut [], peer, disp, Op::NoOp)?;
                f.win.rput(&[], peer, disp)?.wait()?;
                let none = Layout::<u64>::contiguous(0)?;
                f.win.put_layout(&[], &none, peer, disp, &none)?;
            }
            // Rank and epoch are still checked.
            assert!(matches!(
                f.win.put(&[], 2, 0),
                Err(Error::InvalidRank { .. })
            ));
            f.win.unlock_all()?;
            assert!(f.win.put(&[], peer, 0).is_err(), "outside an epoch");
            w.barrier()?;
            f.free()?;
        }
        // The case that failed: a dynamic window with nothing attached anywhere.
        let empty = Window::<u64>::create_dynamic(w)?;
        empty.lock_all(Assert::NONE)?;
        empty.put(&[], peer, 0x1234)?;
        empty.get(&mut [], peer, 0)?;
        empty.accumulate(&[], peer, 8, Op::Sum)?;
        assert!(matches!(
            empty.put(&[1], peer, 0x1234),
            Err(Error::NotAttached { .. })
        ));
        empty.unlock_all()?;
        empty.free()?;
        Ok(())
    });
}
