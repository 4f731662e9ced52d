//! Dynamic windows: attach/detach visibility through the origins' descriptor caches, also
//! while peers keep accessing.

use std::time::Duration;

use onesided::{alloc_mem, testing, Assert, Error, LockType, Op, WinBuffer, Window};

/// Deterministic life cycle: attach, access, detach, access fails, attach elsewhere.
#[test]
fn attach_detach_visibility() {
    testing::run(3, |u| {
        let w = u.world();
        let me = w.rank();
        let win = Window::<u32>::create_dynamic(w)?;
        assert_eq!(win.disp_unit(), 1);
        assert!(win.base().is_null() && win.size_bytes() == 0);
        // Two regions per rank: one from the shared heap, one ordinary.
        let mut shm = alloc_mem::<u32>(8)?;
        shm.iter_mut()
            .enumerate()
            .for_each(|(i, x)| *x = (me * 100 + i) as u32);
        let a = win.attach(shm)?;
        let b = win.attach(
            (0..8)
                .map(|i| (me * 100 + 50 + i) as u32)
                .collect::<Vec<_>>(),
        )?;
        let addrs = w.allgather(&[a.addr as u64, b.addr as u64])?;
        win.lock_all(Assert::NONE)?;
        for t in 0..w.size() {
            let (ta, tb) = (addrs[2 * t] as usize, addrs[2 * t + 1] as usize);
            let mut v = [0u32; 3];
            win.get(&mut v, t, ta + 4)?;
            assert_eq!(
                v,
                [t as u32 * 100 + 1, t as u32 * 100 + 2, t as u32 * 100 + 3]
            );
            win.get(&mut v, t, tb + 20)?;
            assert_eq!(
                v,
                [
                    t as u32 * 100 + 55,
                    t as u32 * 100 + 56,
                    t as u32 * 100 + 57
                ]
            );
            // Straddling the end of a region is not attached memory.
            assert!(matches!(
                win.get(&mut v, t, tb + 24),
                Err(Error::NotAttached { .. })
            ));
        }
        win.unlock_all()?;
        w.barrier()?;
        // Every rank detaches its shared-heap region.
        let back = win.detach(a.addr)?;
        assert_eq!(back.len(), 8);
        w.barrier()?;
        win.lock_all(Assert::NONE)?;
        for t in 0..w.size() {
            let mut v = [0u32; 1];
            match win.get(&mut v, t, addrs[2 * t] as usize) {
                Err(Error::NotAttached { target, .. }) => assert_eq!(target, t),
                other => panic!("access to detached memory at {t}: {other:?}"),
            }
            win.get(&mut v, t, addrs[2 * t + 1] as usize)?;
            assert_eq!(v[0], t as u32 * 100 + 50);
        }
        win.unlock_all()?;
        w.barrier()?;
        // Re-attach the same memory: visible again.
        let again = win.attach(back)?;
        assert_eq!(again.addr, a.addr);
        w.barrier()?;
        win.lock(LockType::Exclusive, (me + 1) % 3, Assert::NONE)?;
        win.put(&[9999], (me + 1) % 3, addrs[2 * ((me + 1) % 3)] as usize)?;
        win.unlock((me + 1) % 3)?;
        w.barrier()?;
        let mut v = [0u32];
        win.local_read(a.addr, &mut v)?;
        assert_eq!(v[0], 9999);
        assert_eq!(win.attached_regions().len(), 2);
        let left = win.free()?;
        assert_eq!(left.len(), 2, "free returns the regions still attached");
        Ok(())
    });
}

/// Rank 0 keeps attaching new regions and detaching old ones while ranks 1.. keep reading
/// them. A reader must see the generation's pattern or `NotAttached`, never stale or foreign
/// data; once it saw a newer announcement, the old region is never reported as attached
/// with wrong contents. Detached memory is kept alive (not reused) so that a read racing
/// with a detach reads the old, still valid pattern.
#[test]
fn attach_detach_while_peers_access() {
    testing::job(4)
        .timeout(Duration::from_secs(90))
        .run(|u| {
            let w = u.world();
            let me = w.rank();
            const GENERATIONS: u64 = 60;
            const LEN: usize = 64;
            // Announcements: [generation, address] at rank 0, under exclusive locks.
            let mailbox = Window::<u64>::allocate(w, 2)?;
            let win = Window::<u64>::create_dynamic(w)?;
            w.barrier()?;
            if me == 0 {
                let mut keep: Vec<WinBuffer<u64>> = Vec::new();
                let mut current: Option<usize> = None;
                for g in 1..=GENERATIONS {
                    let pattern: Vec<u64> = (0..LEN as u64).map(|i| g << 32 | i).collect();
                    let region = if g % 2 == 0 {
                        let mut m = alloc_mem::<u64>(LEN)?;
                        m.copy_from_slice(&pattern);
                        win.attach(m)?
                    } else {
                        win.attach(pattern)?
                    };
                    mailbox.lock(LockType::Exclusive, 0, Assert::NONE)?;
                    mailbox.put(&[g, region.addr as u64], 0, 0)?;
                    mailbox.unlock(0)?;
                    if let Some(old) = current.replace(region.addr) {
                        keep.push(win.detach(old)?);
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                keep.extend(win.free()?);
            } else {
                let mut last_seen = 0;
                let mut successes = 0u64;
                while last_seen < GENERATIONS {
                    let mut ann = [0u64; 2];
                    mailbox.lock(LockType::Shared, 0, Assert::NONE)?;
                    mailbox.get(&mut ann, 0, 0)?;
                    mailbox.unlock(0)?;
                    let (g, addr) = (ann[0], ann[1] as usize);
                    if g == 0 {
                        std::thread::yield_now();
                        continue;
                    }
                    assert!(g >= last_seen, "announcements go forward");
                    last_seen = g;
                    let mut v = vec![0u64; LEN];
                    win.lock(LockType::Shared, 0, Assert::NONE)?;
                    let r = win.get(&mut v, 0, addr);
                    win.unlock(0)?;
                    match r {
                        Ok(()) => {
                            let want: Vec<u64> = (0..LEN as u64).map(|i| g << 32 | i).collect();
                            assert_eq!(v, want, "generation {g}");
                            successes += 1;
                        }
                        Err(Error::NotAttached { .. }) => {}
                        Err(e) => return Err(e),
                    }
                }
                assert!(successes > 0, "never read an attached region");
                drop(win.free()?);
            }
            w.barrier()?;
            mailbox.free()?;
            Ok(())
        })
        .assert_success();
}

/// `ONESIDED_MAX_ATTACHED_REGIONS` sets the table capacity of windows that do not pass the
/// info key (an unchanged C program attaching more regions than the default); the key still wins.
#[test]
fn region_table_capacity_from_the_environment() {
    testing::job(2)
        .env("ONESIDED_MAX_ATTACHED_REGIONS", "300")
        .timeout(std::time::Duration::from_secs(60))
        .run(|u| {
            let w = u.world();
            let win = Window::<u8>::builder(w).create_dynamic()?;
            assert_eq!(
                win.get_info().get("onesided_max_attached_regions"),
                Some("300")
            );
            let held: Vec<_> = (0..300)
                .map(|i| win.attach(vec![i as u8; 8]))
                .collect::<onesided::Result<_>>()?;
            assert!(matches!(
                win.attach(vec![0u8; 8]),
                Err(Error::TooManyRegions { capacity: 300 })
            ));
            // A peer reads the table through the window: the last region is reachable.
            let last = held.last().expect("300 regions").addr;
            w.barrier()?;
            let peer = 1 - w.rank();
            let addrs = w.allgather(&[last as u64])?;
            let mut got = [0u8; 8];
            win.lock(LockType::Shared, peer, Assert::NONE)?;
            win.get(&mut got, peer, addrs[peer] as usize)?;
            win.unlock(peer)?;
            assert_eq!(got, [(299 % 256) as u8; 8]);
            w.barrier()?;
            drop(held);
            let info = onesided::WinInfo::new().with("onesided_max_attached_regions", "2");
            let small = Window::<u8>::builder(w).info(&info).create_dynamic()?;
            assert_eq!(
                small.get_info().get("onesided_max_attached_regions"),
                Some("2")
            );
            small.free()?;
            win.free()?;
            Ok(())
        })
        .assert_success();
}

#[test]
fn region_table_limits() {
    testing::run(2, |u| {
        let w = u.world();
        let info = onesided::WinInfo::new().with("onesided_max_attached_regions", "2");
        let win = Window::<u8>::builder(w).info(&info).create_dynamic()?;
        assert_eq!(
            win.get_info().get("onesided_max_attached_regions"),
            Some("2")
        );
        let a = win.attach(vec![1u8; 16])?;
        let _b = win.attach(vec![2u8; 16])?;
        assert!(matches!(
            win.attach(vec![3u8; 16]),
            Err(Error::TooManyRegions { capacity: 2 })
        ));
        win.detach(a.addr)?;
        win.attach(vec![4u8; 16])?;
        // The same memory twice is an overlap.
        let mem = vec![0u8; 32];
        let raw = mem.as_ptr() as *mut u8;
        let c = win.detach(win.attached_regions()[0].addr)?;
        // SAFETY: `mem` lives until the end of this closure and is only used through the
        // window in between.
        let r1 = win.attach(unsafe { WinBuffer::from_raw_parts(raw, 16) })?;
        let overlap = win.attach(unsafe { WinBuffer::from_raw_parts(raw.wrapping_add(8), 16) });
        assert!(
            matches!(overlap, Err(Error::AttachOverlap { .. })),
            "{overlap:?}"
        );
        win.detach(r1.addr)?;
        drop(c);
        assert!(matches!(
            win.detach(12345),
            Err(Error::DetachUnknown { addr: 12345 })
        ));
        assert!(matches!(
            win.attach(Vec::<u8>::new()),
            Err(Error::InvalidArgument(_))
        ));
        drop(win.free()?);
        drop(mem);
        Ok(())
    });
}

/// An access may run from one attached region into the next when they are attached next to
/// each other (MPICH's `win_dynamic_rma_flush_get`): put, get, accumulate and
/// get_accumulate across the boundaries of three regions carved from one buffer — malloc'd
/// (reached by cross-memory attach) and from the shared heap (mapped) — land whole; a gap
/// between regions is still not attached memory.
#[test]
fn accesses_run_across_regions_attached_next_to_each_other() {
    testing::run(2, |u| {
        let w = u.world();
        let (me, peer) = (w.rank(), (w.rank() + 1) % 2);
        const THIRD: usize = 1000;
        let mut heap_mem = vec![0u32; 3 * THIRD];
        let mut shared_mem = alloc_mem::<u32>(3 * THIRD)?;
        for mem in [heap_mem.as_mut_ptr(), shared_mem.as_mut_ptr()] {
            let win = Window::<u32>::create_dynamic(w)?;
            let mut thirds = Vec::new();
            for i in 0..3 {
                // SAFETY: `mem` outlives the window (freed below) and is used through it only.
                let piece = unsafe { WinBuffer::from_raw_parts(mem.add(i * THIRD), THIRD) };
                thirds.push(win.attach(piece)?);
            }
            let base = w.allgather(&[thirds[0].addr as u64])?[peer] as usize;
            let (start, count) = (THIRD - 7, THIRD + 20); // from the first into the third
            let origin: Vec<u32> = (0..count as u32).map(|i| i * 3 + me as u32).collect();
            let at = base + start * 4;
            win.lock(LockType::Shared, peer, Assert::NONE)?;
            win.put(&origin, peer, at)?;
            win.flush(peer)?;
            let mut back = vec![0u32; count];
            win.get(&mut back, peer, at)?;
            assert_eq!(back, origin, "put then get across regions");
            win.accumulate(&origin, peer, at, Op::Sum)?;
            let mut old = vec![0u32; count];
            win.get_accumulate(&origin, &mut old, peer, at, Op::Sum)?;
            win.flush(peer)?;
            assert_eq!(old, origin.iter().map(|x| 2 * x).collect::<Vec<_>>());
            win.get(&mut back, peer, at)?;
            assert_eq!(back, origin.iter().map(|x| 3 * x).collect::<Vec<_>>());
            win.unlock(peer)?;
            w.barrier()?;
            // With the middle region detached, the run has a gap.
            let middle = win.detach(thirds[1].addr)?;
            w.barrier()?;
            win.lock(LockType::Shared, peer, Assert::NONE)?;
            assert!(matches!(
                win.get(&mut back, peer, at),
                Err(Error::NotAttached { .. })
            ));
            win.unlock(peer)?;
            w.barrier()?;
            drop(middle);
            drop(win.free()?);
        }
        drop(shared_mem);
        drop(heap_mem);
        Ok(())
    });
}
