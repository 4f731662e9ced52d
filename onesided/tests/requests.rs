//! Request-based operations: rput, rget, raccumulate, rget_accumulate.

mod common;

use common::block_on;
use onesided::{testing, Assert, Error, LockType, Op, Window};

#[test]
fn request_based_operations() {
    testing::run(3, |u| {
        let w = u.world();
        let (me, n) = (w.rank(), w.size());
        let right = (me + 1) % n;
        let win = Window::<u64>::allocate(w, 8)?;
        win.lock_all(Assert::NONE)?;
        // rput: the buffer is released by wait.
        let mut src = [me as u64; 4];
        let req = win.rput(&src, right, 0)?;
        req.wait()?;
        src[0] = 99; // the borrow ended with wait
                     // rget + test loop.
        win.flush(right)?;
        let mut dst = [0u64; 4];
        let mut req = win.rget(&mut dst, right, 0)?;
        while !req.test()? {}
        drop(req);
        assert_eq!(dst, [me as u64; 4]);
        // raccumulate and rget_accumulate, awaited.
        block_on(win.raccumulate(&[10, 20], right, 4, Op::Sum)?)?;
        let mut old = [0u64; 2];
        block_on(win.rget_accumulate(&[1, 1], &mut old, right, 4, Op::Sum)?)?;
        win.unlock_all()?;
        w.barrier()?;
        // Each rank's slots 4,5 saw: +10,+20 then +1,+1 from its left neighbour only.
        let mut mine = [0u64; 2];
        win.local_read(4, &mut mine)?;
        assert_eq!(mine, [11, 21]);
        assert_eq!(old, [10, 20]);
        let _ = src;
        w.barrier()?;
        // Outside passive-target epochs requests are errors (MPI allows them only there).
        win.fence(Assert::NONE)?;
        assert!(matches!(
            win.rput(&[1], right, 0),
            Err(Error::RequestOutsidePassiveEpoch { op: "rput", .. })
        ));
        let mut b = [0u64];
        assert!(matches!(
            win.rget(&mut b, right, 0),
            Err(Error::RequestOutsidePassiveEpoch { .. })
        ));
        win.fence(Assert::NOSUCCEED)?;
        win.lock(LockType::Shared, right, Assert::NONE)?;
        assert!(matches!(
            win.raccumulate(&[1], (right + 1) % n, 0, Op::Sum),
            Err(Error::RequestOutsidePassiveEpoch { .. })
        ));
        win.rget(&mut b, right, 0)?.wait()?;
        win.unlock(right)?;
        w.barrier()?;
        win.free()?;
        Ok(())
    });
}
