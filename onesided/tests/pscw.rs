//! General active-target synchronization on rings, stars and irregular groups.

use onesided::{testing, Assert, Group, Window};

/// Each rank exposes to and accesses its two ring neighbours; many epochs in a row so that
/// a fast rank posts its next epoch before slow ones finished the current one.
#[test]
fn ring_many_epochs() {
    for n in [2, 3, 6] {
        testing::run(n, move |u| {
            let w = u.world();
            let (me, n) = (w.rank(), w.size());
            let (left, right) = ((me + n - 1) % n, (me + 1) % n);
            let neighbours = Group::new(
                [left, right]
                    .into_iter()
                    .collect::<std::collections::BTreeSet<_>>(),
            )?;
            // slot 0: from the left neighbour, slot 1: from the right neighbour
            let win = Window::<u64>::allocate(w, 2)?;
            for epoch in 0..200u64 {
                win.post(&neighbours, Assert::NONE)?;
                win.start(&neighbours, Assert::NONE)?;
                win.put(&[epoch * 1000 + me as u64], right, 0)?;
                win.put(&[epoch * 1000 + me as u64], left, 1)?;
                win.complete()?;
                win.wait()?;
                let mut got = [0u64; 2];
                win.local_read(0, &mut got)?;
                assert_eq!(
                    got,
                    [epoch * 1000 + left as u64, epoch * 1000 + right as u64]
                );
            }
            win.free()?;
            Ok(())
        });
    }
}

/// Star, both directions: the centre exposes to all leaves (each writes its slot), then
/// the centre accesses every leaf that exposes to it alone.
#[test]
fn star_in_and_out() {
    testing::run(7, |u| {
        let w = u.world();
        let (me, n) = (w.rank(), w.size());
        let leaves = Group::new(1..n)?;
        let centre = Group::single(0);
        let win = Window::<u32>::allocate(w, n)?;
        for round in 1..=20u32 {
            // Leaves -> centre.
            if me == 0 {
                win.post(&leaves, Assert::NONE)?;
                win.wait()?;
                let mut got = vec![0u32; n];
                win.local_read(0, &mut got)?;
                for (leaf, v) in got.iter().enumerate().skip(1) {
                    assert_eq!(*v, round * 100 + leaf as u32);
                }
            } else {
                win.start(&centre, Assert::NONE)?;
                win.put(&[round * 100 + me as u32], 0, me)?;
                win.complete()?;
            }
            // Centre -> leaves.
            if me == 0 {
                win.start(&leaves, Assert::NONE)?;
                for leaf in 1..n {
                    win.put(&[round * 7 + leaf as u32], leaf, 0)?;
                }
                win.complete()?;
            } else {
                win.post(&centre, Assert::NONE)?;
                // test() polls; it must eventually close the epoch.
                while !win.test()? {
                    std::thread::yield_now();
                }
                let mut got = [0u32];
                win.local_read(0, &mut got)?;
                assert_eq!(got[0], round * 7 + me as u32);
            }
        }
        win.free()?;
        Ok(())
    });
}

/// Access and exposure groups of different, irregular shapes, and empty groups.
#[test]
fn irregular_groups_and_empty_epochs() {
    testing::run(5, |u| {
        let w = u.world();
        let (me, n) = (w.rank(), w.size());
        // Rank r accesses every rank s with (r + s) odd; exposure groups mirror that.
        let partners = Group::new((0..n).filter(|s| (me + s) % 2 == 1))?;
        let win = Window::<u64>::allocate(w, n)?;
        for round in 0..30u64 {
            win.post(&partners, Assert::NONE)?;
            win.start(&partners, Assert::NONE)?;
            for &t in partners.ranks() {
                win.put(&[round + 10 * me as u64], t, me)?;
            }
            win.complete()?;
            win.wait()?;
            for &s in partners.ranks() {
                let mut v = [0u64];
                win.local_read(s, &mut v)?;
                assert_eq!(v[0], round + 10 * s as u64);
            }
            // Empty epochs are legal and return at once.
            win.post(&Group::empty(), Assert::NONE)?;
            win.start(&Group::empty(), Assert::NONE)?;
            win.complete()?;
            assert!(win.test()?);
        }
        win.free()?;
        Ok(())
    });
}

/// NOCHECK on both sides: the program guarantees the matching, no notifications are sent.
#[test]
fn nocheck_epochs() {
    testing::run(3, |u| {
        let w = u.world();
        let (me, n) = (w.rank(), w.size());
        let right = (me + 1) % n;
        let left = (me + n - 1) % n;
        let win = Window::<u64>::allocate(w, 1)?;
        for round in 0..10u64 {
            w.barrier()?; // the barrier is the program's own guarantee of matching
            win.post(&Group::single(left), Assert::NOCHECK)?;
            win.start(&Group::single(right), Assert::NOCHECK)?;
            win.put(&[round * 10 + me as u64], right, 0)?;
            win.complete()?;
            win.wait()?;
            let mut v = [0u64];
            win.local_read(0, &mut v)?;
            assert_eq!(v[0], round * 10 + left as u64);
        }
        win.free()?;
        Ok(())
    });
}
