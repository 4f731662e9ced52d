//! Every erroneous call we can detect cheaply returns an error — and the window keeps
//! working afterwards.

use onesided::{alloc_mem, testing, Assert, Error, Group, LockType, WinInfo, Window};

macro_rules! assert_err {
    ($e:expr, $pat:pat) => {
        match $e {
            Err($pat) => {}
            other => panic!(
                "{}: expected {}, got {:?}",
                stringify!($e),
                stringify!($pat),
                other
            ),
        }
    };
}

#[test]
fn out_of_bounds_and_invalid_rank() {
    testing::run(2, |u| {
        let w = u.world();
        // Asymmetric sizes: rank r has 4 + r elements.
        let win = Window::<u32>::allocate(w, 4 + w.rank())?;
        win.lock_all(Assert::NONE)?;
        for t in 0..2 {
            let size = 4 + t;
            win.put(&vec![1; size], t, 0)?;
            assert_err!(
                win.put(&[1, 2], t, size - 1),
                Error::OutOfBounds { op: "put", .. }
            );
            assert_err!(
                win.get(&mut [0; 1], t, size),
                Error::OutOfBounds { op: "get", .. }
            );
            assert_err!(win.put(&[1], t, usize::MAX), Error::OutOfBounds { .. });
        }
        assert_err!(win.put(&[1], 2, 0), Error::InvalidRank { rank: 2, size: 2 });
        assert_err!(
            win.get(&mut [0], 99, 0),
            Error::InvalidRank { rank: 99, .. }
        );
        assert_err!(win.flush(2), Error::InvalidRank { .. });
        win.unlock_all()?;
        assert_err!(
            win.lock(LockType::Shared, 5, Assert::NONE),
            Error::InvalidRank { .. }
        );
        assert_err!(
            win.post(&Group::new([0, 7])?, Assert::NONE),
            Error::InvalidRank { rank: 7, .. }
        );
        assert_err!(
            win.start(&Group::single(2), Assert::NONE),
            Error::InvalidRank { .. }
        );
        assert_err!(win.shared_query(2), Error::InvalidRank { .. });
        win.free()?;
        Ok(())
    });
}

#[test]
fn communication_outside_an_epoch() {
    testing::run(3, |u| {
        let w = u.world();
        let win = Window::<u64>::allocate(w, 4)?;
        assert_err!(
            win.put(&[1], 1, 0),
            Error::NoAccessEpoch {
                op: "put",
                target: 1
            }
        );
        assert_err!(
            win.get(&mut [0], 0, 0),
            Error::NoAccessEpoch { op: "get", .. }
        );
        // After a fence with NOSUCCEED there is no epoch.
        win.fence(Assert::NONE)?;
        win.put(&[1], 1, 0)?;
        win.fence(Assert::NOSUCCEED)?;
        assert_err!(win.put(&[1], 1, 0), Error::NoAccessEpoch { .. });
        // A lock epoch covers only the locked target.
        win.lock(LockType::Shared, 1, Assert::NONE)?;
        assert_err!(win.put(&[1], 2, 0), Error::NoAccessEpoch { target: 2, .. });
        win.put(&[1], 1, 0)?;
        win.unlock(1)?;
        assert_err!(win.put(&[1], 1, 0), Error::NoAccessEpoch { .. });
        // A PSCW epoch covers only its group.
        let me = w.rank();
        let others = Group::new((0..3).filter(|&r| r != me))?;
        win.post(&others, Assert::NONE)?;
        win.start(&others, Assert::NONE)?;
        assert_err!(win.put(&[1], me, 0), Error::NoAccessEpoch { .. });
        win.complete()?;
        win.wait()?;
        win.free()?;
        Ok(())
    });
}

#[test]
fn lock_protocol_misuse() {
    testing::run(2, |u| {
        let w = u.world();
        let win = Window::<u64>::allocate(w, 1)?;
        assert_err!(
            win.unlock(0),
            Error::NotLocked {
                call: "unlock",
                target: 0
            }
        );
        assert_err!(
            win.unlock_all(),
            Error::EpochConflict {
                call: "unlock_all",
                ..
            }
        );
        assert_err!(win.flush(0), Error::EpochConflict { call: "flush", .. });
        assert_err!(win.flush_all(), Error::EpochConflict { .. });
        assert_err!(win.flush_local(1), Error::EpochConflict { .. });
        assert_err!(win.flush_local_all(), Error::EpochConflict { .. });
        win.lock(LockType::Exclusive, 0, Assert::NONE)?;
        assert_err!(
            win.lock(LockType::Shared, 0, Assert::NONE),
            Error::AlreadyLocked { target: 0 }
        );
        assert_err!(
            win.lock(LockType::Exclusive, 0, Assert::NONE),
            Error::AlreadyLocked { .. }
        );
        assert_err!(win.unlock(1), Error::NotLocked { target: 1, .. });
        assert_err!(
            win.flush(1),
            Error::NotLocked {
                call: "flush",
                target: 1
            }
        );
        assert_err!(
            win.fence(Assert::NONE),
            Error::EpochConflict { call: "fence", .. }
        );
        assert_err!(
            win.lock_all(Assert::NONE),
            Error::EpochConflict {
                call: "lock_all",
                ..
            }
        );
        assert_err!(
            win.start(&Group::single(1), Assert::NONE),
            Error::EpochConflict { call: "start", .. }
        );
        assert_err!(
            win.lock(LockType::Shared, 1, Assert::NOPUT),
            Error::InvalidArgument(_)
        );
        win.unlock(0)?;
        win.lock_all(Assert::NONE)?;
        assert_err!(win.lock_all(Assert::NONE), Error::EpochConflict { .. });
        assert_err!(
            win.lock(LockType::Shared, 1, Assert::NONE),
            Error::EpochConflict { call: "lock", .. }
        );
        assert_err!(
            win.fence(Assert::NONE),
            Error::EpochConflict { call: "fence", .. }
        );
        win.flush(1)?;
        win.unlock_all()?;
        // After all that the locks still work for both ranks.
        w.barrier()?;
        for _ in 0..10 {
            win.lock(LockType::Exclusive, 1, Assert::NONE)?;
            win.unlock(1)?;
        }
        w.barrier()?;
        win.free()?;
        Ok(())
    });
}

#[test]
fn pscw_and_fence_misuse() {
    testing::run(2, |u| {
        let w = u.world();
        let win = Window::<u64>::allocate(w, 1)?;
        let other = Group::single(1 - w.rank());
        assert_err!(
            win.complete(),
            Error::EpochConflict {
                call: "complete",
                ..
            }
        );
        assert_err!(win.wait(), Error::EpochConflict { call: "wait", .. });
        assert_err!(win.test(), Error::EpochConflict { call: "test", .. });
        assert_err!(win.fence(Assert::NOCHECK), Error::InvalidArgument(_));
        assert_err!(
            win.post(&other, Assert::NOPRECEDE),
            Error::InvalidArgument(_)
        );
        assert_err!(
            win.start(&other, Assert::NOSTORE),
            Error::InvalidArgument(_)
        );
        // NOPRECEDE with RMA pending in the fence epoch.
        win.fence(Assert::NONE)?;
        win.put(&[1], 1 - w.rank(), 0)?;
        assert_err!(
            win.fence(Assert::NOPRECEDE),
            Error::AssertViolated {
                assert: "NOPRECEDE",
                ..
            }
        );
        // A used fence epoch blocks lock and start; a fence closes it.
        assert_err!(
            win.lock(LockType::Shared, 0, Assert::NONE),
            Error::EpochConflict { call: "lock", .. }
        );
        assert_err!(
            win.start(&other, Assert::NONE),
            Error::EpochConflict { call: "start", .. }
        );
        assert_err!(win.free(), Error::EpochConflict { call: "free", .. });
        Ok(())
    });
}

#[test]
fn free_with_an_open_epoch_fails_everywhere() {
    testing::run(3, |u| {
        let w = u.world();
        let win = Window::<u64>::allocate(w, 1)?;
        if w.rank() == 1 {
            win.lock(LockType::Shared, 0, Assert::NONE)?;
        }
        match win.free() {
            Err(Error::EpochConflict { call: "free", .. }) => assert_eq!(w.rank(), 1),
            Err(Error::PeerFailed { call: "free" }) => assert_ne!(w.rank(), 1),
            other => panic!("rank {}: {other:?}", w.rank()),
        }
        // The failed free dropped the window without hanging anyone.
        w.barrier()?;
        Ok(())
    });
}

#[test]
fn bad_info_values() {
    testing::run(3, |u| {
        let w = u.world();
        // Everybody passes the same bad value.
        let bad = WinInfo::new().with("accumulate_ops", "sum_only");
        assert_err!(
            Window::<u8>::builder(w).info(&bad).allocate(8),
            Error::InvalidInfo { .. }
        );
        // Only rank 2 passes a bad value: it gets InvalidInfo, the others PeerFailed.
        let mine = if w.rank() == 2 {
            WinInfo::new().with("no_locks", "perhaps")
        } else {
            WinInfo::new().no_locks(true)
        };
        for r in [
            Window::<u8>::builder(w).info(&mine).allocate(8).map(drop),
            Window::<u8>::builder(w)
                .info(&mine)
                .allocate_shared(8)
                .map(drop),
            Window::<u8>::builder(w)
                .info(&mine)
                .create(vec![0; 8])
                .map(drop),
            Window::<u8>::builder(w)
                .info(&mine)
                .create_dynamic()
                .map(drop),
        ] {
            match r {
                Err(Error::InvalidInfo { key, .. }) if w.rank() == 2 => assert_eq!(key, "no_locks"),
                Err(Error::PeerFailed { .. }) if w.rank() != 2 => {}
                other => panic!("rank {}: {other:?}", w.rank()),
            }
        }
        // same_size asserted but false.
        let same = WinInfo::new().same_size(true);
        assert_err!(
            Window::<u8>::builder(w).info(&same).allocate(8 + w.rank()),
            Error::InvalidInfo { .. }
        );
        // A zero displacement unit.
        assert_err!(
            Window::<u8>::builder(w).disp_unit(0).allocate(8),
            Error::InvalidDisplacement(_) | Error::PeerFailed { .. }
        );
        // Dynamic-table capacity must agree (it fixes the layout).
        let cap = WinInfo::new().with(
            "onesided_max_attached_regions",
            if w.rank() == 0 { "4" } else { "8" },
        );
        assert!(Window::<u8>::builder(w)
            .info(&cap)
            .create_dynamic()
            .is_err());
        // Nothing of the failed creations is left in /dev/shm, and windows still work.
        let win = Window::<u8>::allocate(w, 8)?;
        win.fence(Assert::NONE)?;
        win.fence(Assert::NONE)?;
        win.free()?;
        Ok(())
    });
}

#[test]
fn no_locks_and_wrong_flavor() {
    testing::run(2, |u| {
        let w = u.world();
        let win = Window::<u64>::builder(w)
            .info(&WinInfo::new().no_locks(true))
            .allocate(2)?;
        assert_err!(
            win.lock(LockType::Shared, 0, Assert::NONE),
            Error::LocksDisabled { call: "lock" }
        );
        assert_err!(
            win.lock_all(Assert::NONE),
            Error::LocksDisabled { call: "lock_all" }
        );
        assert_err!(
            win.attach(vec![1u64]),
            Error::WrongFlavor {
                call: "attach",
                flavor: "allocate"
            }
        );
        assert_err!(win.detach(0), Error::WrongFlavor { .. });
        // Active target still works.
        win.fence(Assert::NONE)?;
        win.put(&[3], 1 - w.rank(), 1)?;
        win.fence(Assert::NOSUCCEED)?;
        // set_info can turn locks back on (it is collective).
        win.set_info(&WinInfo::new().no_locks(false))?;
        win.lock(LockType::Shared, 0, Assert::NONE)?;
        win.unlock(0)?;
        win.free()?;
        // Dynamic windows: detach of memory never attached; access to detached memory.
        let dwin = Window::<u64>::create_dynamic(w)?;
        assert_err!(dwin.detach(0x1000), Error::DetachUnknown { addr: 0x1000 });
        let r = dwin.attach(alloc_mem::<u64>(4)?)?;
        let addrs = w.allgather(&[r.addr as u64])?;
        let peer = 1 - w.rank();
        dwin.lock_all(Assert::NONE)?;
        dwin.put(&[5], peer, addrs[peer] as usize)?;
        assert_err!(
            dwin.put(&[5], peer, addrs[peer] as usize + 32),
            Error::NotAttached { .. }
        );
        dwin.unlock_all()?;
        w.barrier()?;
        dwin.detach(r.addr)?;
        w.barrier()?;
        dwin.lock_all(Assert::NONE)?;
        assert_err!(
            dwin.get(&mut [0], peer, addrs[peer] as usize),
            Error::NotAttached { .. }
        );
        assert_err!(dwin.local_read(r.addr, &mut [0]), Error::NotAttached { .. });
        dwin.unlock_all()?;
        dwin.free()?;
        Ok(())
    });
}

#[test]
fn set_info_validation() {
    testing::run(2, |u| {
        let w = u.world();
        let win = Window::<u64>::allocate(w, 1)?;
        // A bad value anywhere fails everywhere and changes nothing.
        let info = if w.rank() == 0 {
            WinInfo::new().with("accumulate_ordering", "sideways")
        } else {
            WinInfo::new().with("accumulate_ordering", "none")
        };
        assert!(win.set_info(&info).is_err());
        assert_eq!(
            win.get_info().get("accumulate_ordering"),
            Some("rar,raw,war,waw")
        );
        win.set_info(
            &WinInfo::new()
                .accumulate_granularity(64)
                .with("accumulate_ordering", "none"),
        )?;
        assert_eq!(win.get_info().get("mpi_accumulate_granularity"), Some("64"));
        assert_eq!(win.get_info().get("accumulate_ordering"), Some("none"));
        win.free()?;
        Ok(())
    });
}
