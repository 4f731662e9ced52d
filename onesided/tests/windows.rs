//! Window creation, attributes, info, displacement units and direct shared access.

use onesided::{
    alloc_mem, testing, Assert, Flavor, LockType, MemoryModel, Pod, WinInfo, Window, WindowLayout,
    Zeroable,
};

#[test]
fn attributes_of_every_flavor() {
    testing::run(3, |u| {
        let w = u.world();
        let me = w.rank();
        let a = Window::<f64>::allocate(w, 10)?;
        assert_eq!(
            (a.flavor(), a.model()),
            (Flavor::Allocate, MemoryModel::Unified)
        );
        assert_eq!((a.len(), a.size_bytes(), a.disp_unit()), (10, 80, 8));
        assert_eq!((a.rank(), a.size()), (me, 3));
        assert!(!a.base().is_null());
        // Across nodes a symmetric window keeps O(1) metadata too where every rank's node
        // segment can be registered under one key, addressed by offset (tcp, udp); `shm`
        // keys and addresses differ per process: a table. No memory is shared by all
        // (allocate_shared is MPI_ERR_RMA_SHARED: tests/across_nodes.rs).
        let one_node = w.node_size() == w.size();
        let keys_differ = std::env::var("ONESIDED_PROVIDER").is_ok_and(|p| p == "shm");
        assert_eq!(
            a.layout(),
            if one_node || !keys_differ {
                WindowLayout::Symmetric
            } else {
                WindowLayout::PerRank
            },
            "symmetric sizes need O(1) metadata per window"
        );
        let s = if one_node {
            let s = Window::<u16>::allocate_shared(w, 5)?;
            assert_eq!(
                (s.flavor(), s.size_bytes(), s.disp_unit()),
                (Flavor::Shared, 10, 2)
            );
            Some(s)
        } else {
            assert!(Window::<u16>::allocate_shared(w, 5).is_err());
            None
        };
        let c = Window::create(w, vec![0u32; 7])?;
        assert_eq!((c.flavor(), c.len(), c.disp_unit()), (Flavor::Create, 7, 4));
        assert_eq!(c.layout(), WindowLayout::PerRank);
        let d = Window::<u8>::create_dynamic(w)?;
        assert_eq!(
            (d.flavor(), d.size_bytes(), d.disp_unit()),
            (Flavor::Dynamic, 0, 1)
        );
        assert_eq!(d.layout(), WindowLayout::Dynamic);
        // Asymmetric allocate falls back to a per-rank table.
        let asym = Window::<u8>::allocate(w, 100 + me)?;
        assert_eq!(asym.layout(), WindowLayout::PerRank);
        // A window can move to another thread (and back).
        let a = std::thread::spawn(move || -> onesided::Result<Window<f64>> {
            a.fence(Assert::NONE)?;
            a.fence(Assert::NOSUCCEED)?;
            Ok(a)
        })
        .join()
        .expect("thread")?;
        // Windows are freed in any order.
        drop(c.free()?);
        d.free()?;
        a.free()?;
        if let Some(s) = s {
            s.free()?;
        }
        asym.free()?;
        Ok(())
    });
}

/// A library that sets `mpi_accumulate_granularity` from each process's own size passes
/// different values: every flavor is created with the largest (never refused), and
/// concurrent accumulates of every rank stay element-wise atomic under it.
#[test]
fn a_granularity_hint_that_differs_between_ranks_takes_the_largest() {
    testing::run(3, |u| {
        let w = u.world();
        let (me, n) = (w.rank(), w.size());
        let largest = (8 << (n - 1)).to_string();
        let info = WinInfo::new().accumulate_granularity(8 << me);
        let one_node = w.node_size() == w.size();
        let mut wins = vec![
            Window::<u64>::builder(w).info(&info).allocate(64 + me)?,
            Window::<u64>::builder(w).info(&info).create(vec![0; 64])?,
        ];
        if one_node {
            wins.push(Window::<u64>::builder(w).info(&info).allocate_shared(64)?);
        }
        for win in &wins {
            assert_eq!(
                win.get_info().get("mpi_accumulate_granularity"),
                Some(largest.as_str()),
                "{:?}",
                win.flavor()
            );
            win.lock_all(Assert::NONE)?;
            for _ in 0..100 {
                win.accumulate(&[1u64; 8], 0, 0, onesided::Op::Sum)?;
            }
            win.unlock_all()?;
            w.barrier()?;
            if me == 0 {
                let mut got = [0u64; 8];
                win.local_read(0, &mut got)?;
                assert_eq!(got, [100 * n as u64; 8], "{:?}", win.flavor());
            }
        }
        let dynamic = Window::<u64>::builder(w).info(&info).create_dynamic()?;
        assert_eq!(
            dynamic.get_info().get("mpi_accumulate_granularity"),
            Some(largest.as_str())
        );
        // set_info too: the largest, not an error.
        dynamic.set_info(&WinInfo::new().accumulate_granularity(16 * (me + 1)))?;
        assert_eq!(
            dynamic.get_info().get("mpi_accumulate_granularity"),
            Some((16 * n).to_string().as_str())
        );
        dynamic.free()?;
        for win in wins {
            win.free()?;
        }
        Ok(())
    });
}

#[test]
fn info_in_effect() {
    testing::run(2, |u| {
        let w = u.world();
        let info = WinInfo::new()
            .same_size(true)
            .same_disp_unit(true)
            .accumulate_ordering(
                onesided::AccumulateOrdering::RAW | onesided::AccumulateOrdering::WAW,
            )
            .accumulate_granularity(16)
            .memory_alloc_kinds("system,mpi:alloc_mem")
            .with("made_up_key", "kept, ignored");
        let win = Window::<u64>::builder(w).info(&info).allocate(4)?;
        let got = win.get_info();
        assert_eq!(got.get("same_size"), Some("true"));
        assert_eq!(got.get("same_disp_unit"), Some("true"));
        assert_eq!(got.get("no_locks"), Some("false"));
        assert_eq!(got.get("accumulate_ordering"), Some("raw,waw"));
        assert_eq!(got.get("accumulate_ops"), Some("same_op_no_op"));
        assert_eq!(got.get("mpi_accumulate_granularity"), Some("16"));
        assert_eq!(
            got.get("mpi_assert_memory_alloc_kinds"),
            Some("system,mpi:alloc_mem")
        );
        assert_eq!(got.get("made_up_key"), None);
        assert!(win.hints().same_size);
        // set_info ignores creation-only keys and applies the others.
        win.set_info(
            &WinInfo::new()
                .same_size(false)
                .with("accumulate_ops", "same_op"),
        )?;
        assert_eq!(win.get_info().get("same_size"), Some("true"));
        assert_eq!(win.get_info().get("accumulate_ops"), Some("same_op"));
        win.free()?;
        // Shared windows exist within one node only.
        if w.node_size() == w.size() {
            let sh = Window::<u8>::builder(w)
                .info(&WinInfo::new().with("alloc_shared_noncontig", "true"))
                .allocate_shared(10)?;
            assert_eq!(sh.get_info().get("alloc_shared_noncontig"), Some("true"));
            sh.free()?;
        }
        Ok(())
    });
}

/// Displacements are scaled by the *target's* displacement unit.
#[test]
fn per_target_disp_units() {
    testing::run(2, |u| {
        let w = u.world();
        let me = w.rank();
        // Rank 0: disp_unit 1 (byte addressing); rank 1: disp_unit 8.
        let unit = if me == 0 { 1 } else { 8 };
        for kind in 0..2 {
            let win = if kind == 0 {
                Window::<u8>::builder(w).disp_unit(unit).allocate(64)?
            } else {
                Window::<u8>::builder(w)
                    .disp_unit(unit)
                    .create(vec![0u8; 64])?
            };
            assert_eq!(win.disp_unit(), unit);
            win.fence(Assert::NONE)?;
            if me == 0 {
                win.put(&[0xAB], 1, 3)?; // byte 24 of rank 1
            } else {
                win.put(&[0xCD], 0, 3)?; // byte 3 of rank 0
            }
            win.fence(Assert::NONE)?;
            let mut mem = [0u8; 64];
            win.local_read(0, &mut mem)?;
            let (at, v) = if me == 0 { (3, 0xCD) } else { (24, 0xAB) };
            assert_eq!(mem[at], v);
            assert_eq!(mem.iter().filter(|&&b| b != 0).count(), 1);
            // The next epoch may write our memory again only after we checked it.
            win.fence(Assert::NONE)?;
            // Out of bounds is measured in the target's units too.
            let peer = 1 - me;
            let last = if peer == 0 { 63 } else { 7 };
            win.put(&[1], peer, last)?;
            assert!(win.put(&[1], peer, last + 1).is_err());
            win.fence(Assert::NOSUCCEED)?;
            drop(win.free()?);
        }
        Ok(())
    });
}

/// allocate_shared: direct loads and stores into every rank's memory, contiguous by default.
#[test]
fn shared_query_direct_access() {
    // Shared windows exist within one node only (tests/across_nodes.rs checks the error
    // across nodes): this job stays on one node whatever ONESIDED_TEST_NODES says.
    testing::job(4)
        .nodes(1)
        .run(|u| {
            let w = u.world();
            let (me, n) = (w.rank(), w.size());
            let sizes = [3usize, 0, 5, 2];
            let win = Window::<u32>::allocate_shared(w, sizes[me])?;
            let regions: Vec<_> = (0..n)
                .map(|r| win.shared_query(r).map(|q| q.expect("shared memory")))
                .collect::<Result<_, _>>()?;
            for r in 0..n {
                assert_eq!(regions[r].len(), sizes[r]);
                assert_eq!(regions[r].disp_unit(), 4);
                if r + 1 < n {
                    // Contiguous: rank r+1 starts where rank r ends.
                    assert_eq!(
                        regions[r].as_ptr().wrapping_add(sizes[r]),
                        regions[r + 1].as_ptr()
                    );
                }
            }
            // Every rank stores into element `me` of every region long enough to have one.
            win.fence(Assert::NONE)?;
            for (t, reg) in regions.iter().enumerate().filter(|(_, r)| me < r.len()) {
                // SAFETY: element `me` is inside the region; each rank writes a distinct element,
                // and nobody else touches the window between these two fences.
                unsafe { reg.as_ptr().add(me).write_volatile((t * 10 + me) as u32) };
            }
            win.fence(Assert::NONE)?;
            // SAFETY: no process writes between these fences.
            let mine = unsafe { win.local_slice() };
            for (i, v) in mine.iter().enumerate() {
                if i < n {
                    assert_eq!(*v, (me * 10 + i) as u32);
                }
            }
            win.fence(Assert::NOSUCCEED)?;
            win.free()?;
            // Non-contiguous: every rank's memory starts on its own page or line.
            let nc = Window::<u8>::builder(w)
                .info(&WinInfo::new().with("alloc_shared_noncontig", "true"))
                .allocate_shared(10)?;
            let p0 = nc.shared_query(0)?.unwrap().as_ptr() as usize;
            let p1 = nc.shared_query(1)?.unwrap().as_ptr() as usize;
            assert!(p1 - p0 >= 64 && p1 % 64 == 0);
            nc.free()?;
            // allocate windows are shared memory too; create windows over alloc_mem as well,
            // create windows over ordinary memory are not.
            let a = Window::<u8>::allocate(w, 8)?;
            assert!(a.shared_query((me + 1) % n)?.is_some());
            a.free()?;
            let c = Window::create(w, alloc_mem::<u8>(8)?)?;
            assert!(c.shared_query((me + 1) % n)?.is_some());
            drop(c.free()?);
            let v = Window::create(w, vec![0u8; 8])?;
            assert!(v.shared_query((me + 1) % n)?.is_none());
            assert!(
                v.shared_query(me)?.is_some(),
                "own memory is always directly accessible"
            );
            drop(v.free()?);
            Ok(())
        })
        .assert_success();
}

#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
struct Particle {
    pos: [f64; 3],
    id: u64,
}

/// Struct elements, zero-size ranks, create over a mix of memory kinds.
#[test]
fn struct_elements_and_mixed_memory() {
    testing::run(3, |u| {
        let w = u.world();
        let (me, n) = (w.rank(), w.size());
        // Rank 0 exposes nothing, rank 1 ordinary memory, rank 2 shared-heap memory.
        let win = match me {
            0 => Window::create(w, Vec::<Particle>::new())?,
            1 => Window::create(w, vec![Particle::zeroed(); 4])?,
            _ => Window::create(w, alloc_mem::<Particle>(4)?)?,
        };
        win.lock_all(Assert::NONE)?;
        for t in 1..n {
            let p = Particle {
                pos: [me as f64, t as f64, 0.5],
                id: (me * 10 + t) as u64,
            };
            win.put(&[p], t, me)?;
        }
        assert!(
            win.put(&[Particle::zeroed()], 0, 0).is_err(),
            "rank 0 exposes nothing"
        );
        win.flush_all()?;
        win.unlock_all()?;
        w.barrier()?;
        if me > 0 {
            let mut got = [Particle::zeroed(); 3];
            win.local_read(0, &mut got)?;
            for (o, p) in got.iter().enumerate() {
                assert_eq!(p.id, (o * 10 + me) as u64);
                assert_eq!(p.pos, [o as f64, me as f64, 0.5]);
            }
        }
        w.barrier()?;
        drop(win.free()?);
        Ok(())
    });
}

/// A put completed by flush is visible to a third process that learns about it afterwards.
#[test]
fn flush_makes_data_visible_to_third_parties() {
    testing::run(3, |u| {
        let w = u.world();
        let me = w.rank();
        // rank 0 writes data to rank 1, flushes, then raises a flag at rank 2; rank 2 sees
        // the flag, then reads the data at rank 1.
        let win = Window::<u64>::allocate(w, 2)?;
        win.lock_all(Assert::NONE)?;
        for round in 1..=200u64 {
            match me {
                0 => {
                    win.put(&[round], 1, 0)?;
                    win.flush(1)?;
                    win.put(&[round], 2, 1)?;
                    win.flush(2)?;
                }
                2 => loop {
                    let mut flag = [0u64];
                    win.get(&mut flag, 2, 1)?;
                    if flag[0] == round {
                        let mut data = [0u64];
                        win.get(&mut data, 1, 0)?;
                        assert!(data[0] >= round, "data {} older than flag {round}", data[0]);
                        break;
                    }
                    std::thread::yield_now();
                },
                _ => {}
            }
            w.barrier()?;
        }
        win.unlock_all()?;
        win.lock(LockType::Shared, 0, Assert::NONE)?;
        win.unlock(0)?;
        win.free()?;
        Ok(())
    });
}

#[test]
fn windows_over_split_communicators() {
    testing::run(4, |u| {
        let w = u.world();
        let me = w.rank();
        // Two groups {0, 2} and {1, 3}, each ranked in reverse world order.
        let half = w.split(Some((me % 2) as u32), 10 - me)?.expect("member");
        assert_eq!(half.size(), 2);
        assert_eq!(half.rank(), usize::from(me < 2));
        let win = Window::<u64>::allocate(&half, 4)?;
        // A shared window needs the group on one node (across nodes the halves are not).
        let shared = if half.node_size() == half.size() {
            Some(Window::<u64>::allocate_shared(&half, 4)?)
        } else {
            assert!(Window::<u64>::allocate_shared(&half, 4).is_err());
            None
        };
        win.fence(Assert::NONE)?;
        let peer = 1 - half.rank();
        win.put(&[me as u64; 4], peer, 0)?;
        if let Some(shared) = &shared {
            shared.fence(Assert::NONE)?;
            shared.put(&[100 + me as u64; 4], peer, 0)?;
            shared.fence(Assert::NONE)?;
        }
        win.fence(Assert::NONE)?;
        // The peer in my group is the other rank of my parity.
        let partner = if me < 2 { me + 2 } else { me - 2 };
        let mut got = [0u64; 4];
        win.get(&mut got, half.rank(), 0)?;
        win.fence(Assert::NONE)?;
        assert_eq!(got, [partner as u64; 4]);
        if let Some(shared) = shared {
            shared.local_read(0, &mut got)?;
            assert_eq!(got, [100 + partner as u64; 4]);
            shared.free()?;
        }
        // A process outside every group gets no communicator.
        assert!(w.split((me != 3).then_some(0), me)?.is_some() == (me != 3));
        win.free()?;
        Ok(())
    });
}
