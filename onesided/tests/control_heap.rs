//! `create` and `dynamic` windows take their control words from a heap their communicator
//! maps once (`shm::heap`): blocks are reused after a collective free, the heap grows by
//! chunks, and a creation that fails anywhere leaves every process's heap in step.

use onesided::{testing, Assert, Group, LockType, Op, WinInfo, Window};

/// Every synchronization leaves state in the control words (lock words, PSCW counters,
/// barrier generations, accumulate stripes); a reused block that kept any of it would hang
/// or corrupt the next window's epochs.
#[test]
fn reused_control_blocks_start_clean() {
    testing::run(3, |u| {
        let w = u.world();
        let (me, n) = (w.rank(), w.size());
        let right = (me + 1) % n;
        let left = (me + n - 1) % n;
        for round in 0..60u64 {
            let dynamic = round % 2 == 1;
            let (win, addrs) = if dynamic {
                let win = Window::<u64>::create_dynamic(w)?;
                let region = win.attach(onesided::alloc_mem::<u64>(4)?)?;
                let addrs = w.allgather(&[region.addr as u64])?;
                (win, addrs)
            } else {
                (Window::<u64>::create(w, vec![0u64; 4])?, vec![0; n])
            };
            // Element `k` of `rank`'s memory: a byte address in dynamic windows.
            let at = |rank: usize, k: usize| {
                if dynamic {
                    addrs[rank] as usize + 8 * k
                } else {
                    k
                }
            };
            // Passive target: an exclusive epoch, then an accumulate in a shared one.
            win.lock(LockType::Exclusive, right, Assert::NONE)?;
            win.put(&[round, me as u64], right, at(right, 0))?;
            win.unlock(right)?;
            win.lock(LockType::Shared, right, Assert::NONE)?;
            win.accumulate(&[1u64], right, at(right, 2), Op::Sum)?;
            win.unlock(right)?;
            // Generalized active target: expose to the left neighbour, access the right.
            win.post(&Group::new([left])?, Assert::NONE)?;
            win.start(&Group::new([right])?, Assert::NONE)?;
            win.accumulate(&[10u64], right, at(right, 3), Op::Sum)?;
            win.complete()?;
            win.wait()?;
            win.fence(Assert::NONE)?;
            let mut got = [0u64; 4];
            win.get(&mut got, me, at(me, 0))?;
            win.fence(Assert::NONE)?;
            assert_eq!(got, [round, left as u64, 1, 10], "rank {me}, round {round}");
            win.free()?;
        }
        Ok(())
    });
}

/// More windows alive than one chunk holds: the heap grows, every window works.
#[test]
fn heap_grows_past_one_chunk() {
    testing::run(2, |u| {
        let w = u.world();
        let me = w.rank();
        let peer = 1 - me;
        let wins: Vec<Window<u64>> = (0..80)
            .map(|_| Window::<u64>::create(w, vec![0u64; 1]))
            .collect::<onesided::Result<_>>()?;
        for (i, win) in wins.iter().enumerate() {
            win.fence(Assert::NONE)?;
            win.put(&[(i * 10 + me) as u64], peer, 0)?;
            win.fence(Assert::NONE)?;
        }
        for (i, win) in wins.iter().enumerate() {
            let mut got = [0u64];
            win.local_read(0, &mut got)?;
            assert_eq!(got[0], (i * 10 + peer) as u64);
        }
        for win in wins {
            win.free()?;
        }
        Ok(())
    });
}

/// A creation refused everywhere (layouts differ), and windows dropped without a collective
/// free, leave the heaps in step: later windows are created and work.
#[test]
fn failed_creations_and_dropped_windows_keep_heaps_in_step() {
    testing::run(2, |u| {
        let w = u.world();
        let me = w.rank();
        let peer = 1 - me;
        let cap = if me == 0 { "8" } else { "16" };
        let refused = Window::<u64>::builder(w)
            .info(&WinInfo::new().with("onesided_max_attached_regions", cap))
            .create_dynamic();
        assert!(refused.is_err(), "rank {me}");
        // Dropped, not freed: its block is never handed out again.
        drop(Window::<u64>::create(w, vec![0u64; 1])?);
        for round in 0..10u64 {
            let win = Window::<u64>::create(w, vec![0u64; 1])?;
            win.fence(Assert::NONE)?;
            win.put(&[round + me as u64], peer, 0)?;
            win.fence(Assert::NONE)?;
            let mut got = [0u64];
            win.local_read(0, &mut got)?;
            assert_eq!(got[0], round + peer as u64);
            win.free()?;
        }
        Ok(())
    });
}
