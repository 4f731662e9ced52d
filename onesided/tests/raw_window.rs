//! The untyped window (`RawWindow`): bytes and run-time element types, as a C binding
//! uses it — puts and gets in bytes with the target's displacement unit, byte layouts,
//! accumulates of every element type chosen at run time (from unaligned buffers too),
//! fetch_and_op, compare_and_swap, and error classes of misuse.

use onesided::{testing, Assert, ElemType, ErrorClass, Layout, LockType, Op, RawWindow, Window};

/// Each element type with its size, for the accumulate matrix.
const TYPES: [(ElemType, usize); 10] = [
    (ElemType::I8, 1),
    (ElemType::I16, 2),
    (ElemType::I32, 4),
    (ElemType::I64, 8),
    (ElemType::U8, 1),
    (ElemType::U16, 2),
    (ElemType::U32, 4),
    (ElemType::U64, 8),
    (ElemType::F32, 4),
    (ElemType::F64, 8),
];

/// The bytes of the number `v` as element type `ty`.
fn bytes_of(ty: ElemType, v: i64) -> Vec<u8> {
    match ty {
        ElemType::I8 => (v as i8).to_ne_bytes().to_vec(),
        ElemType::I16 => (v as i16).to_ne_bytes().to_vec(),
        ElemType::I32 => (v as i32).to_ne_bytes().to_vec(),
        ElemType::I64 => v.to_ne_bytes().to_vec(),
        ElemType::U8 => (v as u8).to_ne_bytes().to_vec(),
        ElemType::U16 => (v as u16).to_ne_bytes().to_vec(),
        ElemType::U32 => (v as u32).to_ne_bytes().to_vec(),
        ElemType::U64 => (v as u64).to_ne_bytes().to_vec(),
        ElemType::F32 => (v as f32).to_ne_bytes().to_vec(),
        ElemType::F64 => (v as f64).to_ne_bytes().to_vec(),
        other => panic!("{other:?} is not in the matrix"),
    }
}

#[test]
fn raw_bytes_and_run_time_types() {
    testing::job(2)
        .timeout(std::time::Duration::from_secs(60))
        .run(|u| {
            let w = u.world();
            let me = w.rank();
            let peer = 1 - me;
            // Displacement unit 8 on a byte window: displacements count 8-byte slots.
            let win = Window::<u8>::builder(w).disp_unit(8).allocate(256)?;
            let raw: &RawWindow = &win;
            assert_eq!((raw.disp_unit(), raw.size_bytes()), (8, 256));

            // Contiguous put/get in bytes, and byte layouts (every other byte).
            raw.fence(Assert::NONE)?;
            raw.put(&[me as u8 + 1; 5], peer, 2)?; // bytes 16..21
            let strided = Layout::<u8>::vector(4, 1, 2)?;
            raw.put_layout(
                &[9, 0, 8, 0, 7, 0, 6],
                &strided,
                peer,
                4,
                &Layout::contiguous(4)?,
            )?;
            raw.fence(Assert::NONE)?;
            let mut got = [0u8; 5];
            raw.get(&mut got, me, 2)?;
            let mut picked = [0u8; 7];
            raw.get_layout(&mut picked, &strided, me, 4, &Layout::contiguous(4)?)?;
            raw.fence(Assert::NONE)?;
            assert_eq!(got, [peer as u8 + 1; 5]);
            assert_eq!(picked, [9, 0, 8, 0, 7, 0, 6]);

            // Accumulates of every type, element type chosen at run time, from a buffer at
            // an odd address: both ranks add 3 then 4 to slot 8 + i of rank 0.
            w.barrier()?;
            raw.lock_all(Assert::NONE)?;
            let mut unaligned = [0u8; 9];
            for (i, &(ty, size)) in TYPES.iter().enumerate() {
                unaligned[1..1 + size].copy_from_slice(&bytes_of(ty, 3));
                raw.accumulate(&unaligned[1..1 + size], ty, 0, 8 + i, Op::Sum)?;
                let mut old = vec![0u8; size + 1];
                raw.fetch_and_op(&bytes_of(ty, 4), &mut old[1..], ty, 0, 8 + i, Op::Sum)?;
            }
            raw.unlock_all()?;
            w.barrier()?;
            if me == 0 {
                for (i, &(ty, size)) in TYPES.iter().enumerate() {
                    let mut v = vec![0u8; size];
                    win.local_read(8 + i, &mut v)?;
                    assert_eq!(v, bytes_of(ty, 14), "{ty:?}: 2 ranks x (3 + 4)");
                }
            }
            w.barrier()?;

            // compare_and_swap: exactly one rank swaps 0 -> its rank + 1 in slot 20 of rank 1.
            raw.lock(LockType::Shared, 1, Assert::NONE)?;
            let mut old = [0u8; 8];
            raw.compare_and_swap(
                &(me as u64 + 1).to_ne_bytes(),
                &0u64.to_ne_bytes(),
                &mut old,
                ElemType::U64,
                1,
                20,
            )?;
            raw.unlock(1)?;
            let swapped = u64::from_ne_bytes(old) == 0;
            let winners = w.allgather(&[u64::from(swapped)])?;
            assert_eq!(winners.iter().sum::<u64>(), 1);

            // get_accumulate with NoOp reads atomically.
            raw.lock(LockType::Shared, 0, Assert::NONE)?;
            let mut read = [0u8; 8];
            raw.get_accumulate(&[0u8; 8], &mut read, ElemType::U64, 0, 8 + 7, Op::NoOp)?;
            raw.unlock(0)?;
            assert_eq!(u64::from_ne_bytes(read), 14);

            // Requests that own what they need: they outlive every borrow of the handle.
            let mut landing = vec![0u8; 8];
            raw.lock_all(Assert::NONE)?;
            let requests: Vec<onesided::Request<'static>> = vec![
                raw.rput(&(me as u64 + 50).to_ne_bytes(), peer, 30)?,
                raw.raccumulate(&2u32.to_ne_bytes(), ElemType::U32, 0, 29, Op::Sum)?,
                // SAFETY: `landing` outlives the request and is not touched until it is done.
                unsafe { raw.rget(landing.as_mut_ptr(), 8, 1, 8 + 7)? },
                raw.own_request(raw.iflush_all()?)?,
            ];
            onesided::wait_all(requests)?;
            raw.unlock_all()?;
            assert_eq!(u64::from_ne_bytes(landing[..].try_into().unwrap()), 0);
            // A pending request of another window is not this one's to own: rank 0's
            // exposure epoch waits for rank 1, which starts only after the check.
            let other = Window::<u8>::allocate(w, 8)?;
            if me == 0 {
                other.post(&onesided::Group::new([1])?, Assert::NONE)?;
                let foreign = other.iwait()?;
                assert!(!foreign.is_complete());
                let e = raw.own_request(foreign).unwrap_err();
                assert_eq!(e.mpi_class(), ErrorClass::Arg, "{e}");
            }
            w.barrier()?;
            if me == 1 {
                other.start(&onesided::Group::new([0])?, Assert::NONE)?;
                other.complete()?;
            }
            other.free()?;
            let e = unsafe { raw.rget(std::ptr::null_mut(), 8, 1, 0) }.unwrap_err();
            assert_eq!(e.mpi_class(), ErrorClass::Arg, "{e}");
            w.barrier()?;
            let mut mine = [0u8; 8];
            win.local_read(30, &mut mine)?;
            assert_eq!(u64::from_ne_bytes(mine), peer as u64 + 50);
            if me == 0 {
                let mut sum = [0u8; 4];
                win.local_read(29, &mut sum)?;
                assert_eq!(u32::from_ne_bytes(sum), 4);
            }

            // Misuse: outside an epoch, out of range, an op a float has not, ragged lengths.
            let e = raw.put(&[1], peer, 0).unwrap_err();
            assert_eq!(e.mpi_class(), ErrorClass::RmaSync, "{e}");
            raw.lock(LockType::Shared, peer, Assert::NONE)?;
            let e = raw.put(&[1; 9], peer, 31).unwrap_err();
            assert_eq!(e.mpi_class(), ErrorClass::RmaRange, "{e}");
            let e = raw
                .accumulate(&1f64.to_ne_bytes(), ElemType::F64, peer, 0, Op::Band)
                .unwrap_err();
            assert_eq!(e.mpi_class(), ErrorClass::Op, "{e}");
            let e = raw
                .accumulate(&[1, 2, 3], ElemType::U16, peer, 0, Op::Sum)
                .unwrap_err();
            assert_eq!(e.mpi_class(), ErrorClass::Arg, "{e}");
            raw.unlock(peer)?;
            win.free()?;
            Ok(())
        })
        .assert_success();
}

/// Raw windows of every flavor over memory the caller keeps (as a C program's), owned
/// duplicates that outlive the scope that made them, raw attach/detach, shared_query, and
/// the typed window that refuses owned duplicates.
#[test]
fn raw_flavors_and_owned_duplicates() {
    testing::job(2)
        .timeout(std::time::Duration::from_secs(60))
        .run(|u| {
            let w = u.world();
            let me = w.rank();
            let peer = 1 - me;
            let info = onesided::WinInfo::new();

            // create over a buffer this test keeps, displacement unit 4.
            let mut mine = vec![0u32; 16];
            // SAFETY: `mine` outlives the window (freed below) and is read only after the
            // closing fence.
            let created = unsafe { RawWindow::create(w, mine.as_mut_ptr().cast(), 64, 4, &info)? };
            assert_eq!(created.flavor(), onesided::Flavor::Create);
            let ordered = {
                // An owned duplicate: no borrow of `created` remains.
                created.dup_with_info(&onesided::WinInfo::new().order(true))?
            };
            assert!(ordered.is_duplicate() && ordered.hints().order);
            ordered.fence(Assert::NONE)?;
            ordered.put(&(me as u32 + 7).to_ne_bytes(), peer, 3)?;
            ordered.fence(Assert::NONE)?;
            ordered.free()?; // local for a duplicate
            created.free()?;
            assert_eq!(mine[3], peer as u32 + 7);

            // dynamic: attach memory the test keeps, peers address it by its address.
            let dynamic = RawWindow::create_dynamic(w, &info)?;
            let mut region = vec![0u64; 4];
            // SAFETY: `region` outlives the attachment (detached below).
            unsafe { dynamic.attach(region.as_mut_ptr().cast(), 32)? };
            let addrs = w.allgather(&[region.as_ptr() as u64])?;
            dynamic.lock_all(Assert::NONE)?;
            dynamic.put(
                &(me as u64 + 70).to_ne_bytes(),
                peer,
                addrs[peer] as usize + 8,
            )?;
            dynamic.unlock_all()?;
            w.barrier()?;
            assert_eq!(region[1], peer as u64 + 70);
            dynamic.detach(region.as_mut_ptr().cast())?;
            let e = dynamic.detach(region.as_mut_ptr().cast()).unwrap_err();
            assert_eq!(e.mpi_class(), ErrorClass::RmaAttach, "{e}");
            dynamic.free()?;

            // allocate_shared: the peer's memory by load and store (one node only; over
            // two nodes it is MPI_ERR_RMA_SHARED).
            if w.node_size() != w.size() {
                let e = RawWindow::allocate_shared(w, 16, 1, &info).unwrap_err();
                assert_eq!(e.mpi_class(), ErrorClass::RmaShared, "{e}");
            } else {
                shared_window(w, peer)?;
            }

            // Flavor errors and the typed window's duplicates.
            let allocated = RawWindow::allocate(w, 8, 8, &info)?;
            let e = allocated.detach(std::ptr::null_mut()).unwrap_err();
            assert_eq!(e.mpi_class(), ErrorClass::RmaFlavor, "{e}");
            allocated.free()?;
            let typed = Window::<u64>::allocate(w, 1)?;
            assert!(typed.dup_with_info(&onesided::WinInfo::new()).is_ok());
            let raw: &RawWindow = &typed;
            assert!(raw.dup_with_info(&onesided::WinInfo::new()).is_err());
            typed.free()?;
            Ok(())
        })
        .assert_success();
}

/// An allocate_shared raw window: `peer`'s memory read by load after a put of this rank.
fn shared_window(w: &onesided::Comm, peer: usize) -> onesided::Result<()> {
    let me = w.rank();
    let shared = RawWindow::allocate_shared(w, 16, 1, &onesided::WinInfo::new())?;
    let there = shared.shared_query(peer)?.expect("one node");
    assert_eq!((there.size_bytes(), there.disp_unit()), (16, 1));
    shared.fence(Assert::NONE)?;
    shared.put(&[me as u8 + 1], peer, 5)?;
    shared.fence(Assert::NONE)?;
    // SAFETY: no RMA to the peer's memory until the next fence.
    let seen = unsafe { there.as_slice() }[5];
    assert_eq!(seen, me as u8 + 1);
    shared.fence(Assert::NONE)?;
    shared.free()
}

/// Whether `addr` lies in a mapping of one of onesided's shared-memory segments.
fn in_onesided_segment(addr: usize) -> bool {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .any(|line| {
            let range = line.split_whitespace().next().unwrap_or("");
            let (lo, hi) = range.split_once('-').unwrap_or(("0", "0"));
            let (lo, hi) = (
                usize::from_str_radix(lo, 16).unwrap(),
                usize::from_str_radix(hi, 16).unwrap(),
            );
            (lo..hi).contains(&addr) && line.contains("onesided.")
        })
}

#[test]
fn create_windows_share_their_memory_in_place() {
    testing::job(2)
        .timeout(std::time::Duration::from_secs(60))
        .run(|u| {
            let w = u.world();
            let me = w.rank();
            let peer = 1 - me;
            // Window memory starting and ending inside pages that hold other bytes too.
            let mut heap = vec![0xABu8; 5 * 4096];
            let page = (heap.as_ptr() as usize).next_multiple_of(4096) - heap.as_ptr() as usize;
            let (start, len) = (page + 100, 6000);
            heap[start..start + len].fill(me as u8);
            let base = heap[start..].as_mut_ptr();
            let info = onesided::WinInfo::new().with(onesided::info_keys::SHARE_IN_PLACE, "true");
            // SAFETY: `heap` outlives the window; this test's process has no other thread
            // writing those pages during creation and free.
            let win = unsafe { RawWindow::create(w, base, len, 1, &info)? };
            // One node only: across nodes the network registers the memory where it is.
            let one_node = w.node_size() == w.size();
            assert_eq!(
                in_onesided_segment(base as usize),
                one_node,
                "moved into shared memory exactly on one node"
            );
            assert_eq!(heap[start - 1], 0xAB, "bytes around the window kept");
            win.lock_all(Assert::NONE)?;
            win.put(&[7 + me as u8; 3], peer, 10)?;
            let mut old = [0u8; 8];
            win.fetch_and_op(
                &1u64.to_ne_bytes(),
                &mut old,
                ElemType::U64,
                peer,
                5992,
                Op::Sum,
            )?;
            win.unlock_all()?;
            w.barrier()?;
            // The peer's writes are in this process's memory, seen at the same addresses.
            assert_eq!(heap[start + 10..start + 13], [7 + peer as u8; 3]);
            win.free()?;
            assert!(
                !in_onesided_segment(base as usize),
                "still shared after the free"
            );
            // Contents kept through the move back, the peer's updates included.
            assert_eq!(heap[start + 10..start + 13], [7 + peer as u8; 3]);
            let word = u64::from_ne_bytes(heap[start + 5992..start + 6000].try_into().unwrap());
            assert_eq!(word, u64::from_ne_bytes([me as u8; 8]) + 1);
            assert!(heap[..start].iter().all(|&b| b == 0xAB));
            assert!(heap[start + len..].iter().all(|&b| b == 0xAB));

            // `whole_pages` leaves memory that shares pages with other data where it is;
            // `false` (the default) any memory.
            for value in ["whole_pages", "false"] {
                let info =
                    onesided::WinInfo::new().with(onesided::info_keys::SHARE_IN_PLACE, value);
                // SAFETY: as above.
                let win = unsafe { RawWindow::create(w, base, len, 1, &info)? };
                assert!(!in_onesided_segment(base as usize), "{value}: moved");
                assert_eq!(
                    win.get_info().get(onesided::info_keys::SHARE_IN_PLACE),
                    Some(value)
                );
                win.free()?;
            }
            // Dynamic windows: an attached region moves until its detach.
            let info = onesided::WinInfo::new().with(onesided::info_keys::SHARE_IN_PLACE, "true");
            let dynamic = RawWindow::create_dynamic(w, &info)?;
            // SAFETY: `heap` outlives the attachment; no other thread writes its pages.
            unsafe { dynamic.attach(base, len)? };
            assert_eq!(
                in_onesided_segment(base as usize),
                one_node,
                "attached region"
            );
            let addrs = w.allgather(&[base as u64])?;
            dynamic.lock_all(Assert::NONE)?;
            dynamic.put(&[40 + me as u8; 2], peer, addrs[peer] as usize + 20)?;
            dynamic.unlock_all()?;
            w.barrier()?;
            dynamic.detach(base)?;
            assert!(
                !in_onesided_segment(base as usize),
                "still shared after the detach"
            );
            assert_eq!(heap[start + 20..start + 22], [40 + peer as u8; 2]);
            dynamic.free()?;

            // `whole_pages` moves memory made of whole pages.
            let aligned = heap[page..].as_mut_ptr();
            let info =
                onesided::WinInfo::new().with(onesided::info_keys::SHARE_IN_PLACE, "whole_pages");
            // SAFETY: as above.
            let win = unsafe { RawWindow::create(w, aligned, 2 * 4096, 1, &info)? };
            assert_eq!(in_onesided_segment(aligned as usize), one_node);
            win.free()?;
            Ok(())
        })
        .assert_success();
}

/// Complex numbers, x87 `long double` and MINLOC/MAXLOC pairs at run time: both ranks
/// accumulate into rank 0's elements at once (lock stripes keep each element's update
/// atomic), on mapped memory (allocate) and on memory reached by cross-memory attach
/// (create over a private buffer) — and across nodes, where the stripes are taken through
/// the network's control plane and the elements read and written through the network.
#[test]
fn complex_long_double_and_pair_accumulates() {
    use onesided::{Complex64, DoubleInt, LongDouble, ValueIndex};
    testing::job(2)
        .timeout(std::time::Duration::from_secs(60))
        .run(|u| {
            let w = u.world();
            let me = w.rank();
            let mut private = vec![0u64; 16];
            let windows = mapped_and_attached(w, &mut private)?;
            for win in &windows {
                win.fence(Assert::NONE)?;
                if me == 0 {
                    let start = DoubleInt::new(5.0, 100);
                    win.put(bytemuck::bytes_of(&start), 0, 64)?;
                    win.put(bytemuck::bytes_of(&start), 0, 80)?;
                    win.put(bytemuck::bytes_of(&Complex64 { re: 1.0, im: 0.0 }), 0, 32)?;
                }
                win.fence(Assert::NONE)?;
                win.lock(LockType::Shared, 0, Assert::NONE)?;
                for round in 0..50 {
                    let z = Complex64 { re: 1.0, im: 1.0 };
                    win.accumulate(bytemuck::bytes_of(&z), ElemType::C64, 0, 0, Op::Sum)?;
                    let x = LongDouble::from_f64(0.5);
                    win.accumulate(&x.bits, ElemType::LongDouble, 0, 16, Op::Sum)?;
                    // Values fall over the rounds; rank 1 reaches each value first.
                    let v = 50.0 - round as f64;
                    let pair = DoubleInt::new(v, (me as i32) * 1000 + round);
                    win.accumulate(
                        bytemuck::bytes_of(&pair),
                        ElemType::DoubleInt,
                        0,
                        64,
                        Op::MinLoc,
                    )?;
                    let up = DoubleInt::new(round as f64 + 10.0, me as i32);
                    win.accumulate(
                        bytemuck::bytes_of(&up),
                        ElemType::DoubleInt,
                        0,
                        80,
                        Op::MaxLoc,
                    )?;
                }
                // (1 + 0i) * i, once.
                if me == 1 {
                    let i = Complex64 { re: 0.0, im: 1.0 };
                    win.accumulate(bytemuck::bytes_of(&i), ElemType::C64, 0, 32, Op::Prod)?;
                }
                // MPI's rules: no sum of pairs, no MINLOC of numbers.
                let pair = DoubleInt::new(1.0, 1);
                let e = win
                    .accumulate(
                        bytemuck::bytes_of(&pair),
                        ElemType::DoubleInt,
                        0,
                        64,
                        Op::Sum,
                    )
                    .unwrap_err();
                assert_eq!(e.mpi_class(), ErrorClass::Op, "{e}");
                let e = win
                    .accumulate(&1u64.to_ne_bytes(), ElemType::U64, 0, 96, Op::MinLoc)
                    .unwrap_err();
                assert_eq!(e.mpi_class(), ErrorClass::Op, "{e}");
                win.unlock(0)?;
                w.barrier()?;
                if me == 0 {
                    let mut got = [0u8; 96];
                    win.lock(LockType::Shared, 0, Assert::NONE)?;
                    win.get(&mut got, 0, 0)?;
                    win.unlock(0)?;
                    let sum: Complex64 = bytemuck::pod_read_unaligned(&got[0..16]);
                    assert_eq!(
                        sum,
                        Complex64 {
                            re: 100.0,
                            im: 100.0
                        }
                    );
                    let ld: LongDouble = bytemuck::pod_read_unaligned(&got[16..32]);
                    assert_eq!(ld.to_f64(), 50.0);
                    let prod: Complex64 = bytemuck::pod_read_unaligned(&got[32..48]);
                    assert_eq!(prod, Complex64 { re: 0.0, im: 1.0 });
                    let min: DoubleInt = bytemuck::pod_read_unaligned(&got[64..80]);
                    // Value 1.0 (round 49) from both ranks: the lower index, rank 0's.
                    assert_eq!((min.value(), min.index()), (1.0, 49), "minloc");
                    let max: DoubleInt = bytemuck::pod_read_unaligned(&got[80..96]);
                    assert_eq!((max.value(), max.index()), (59.0, 0), "maxloc");
                }
                w.barrier()?;
            }
            for win in windows {
                win.free()?;
            }
            Ok(())
        })
        .assert_success();
}

/// Runs of MINLOC/MAXLOC pairs (types no CPU atomic updates) across 64-byte granules are
/// updated whole under their lock stripes, however many processes contend: both ranks
/// replace ten `DoubleInt` (160 bytes, three granules) at rank 0 and read them back with
/// `get_accumulate(no_op)` and a MAXLOC that changes nothing; a torn run fails. Across
/// nodes rank 1's updates are single messages that the target applies under the stripes
/// its own node's processes take with CPU atomics (`Wire::post_striped`), retried while
/// one is held.
#[test]
fn pair_runs_are_updated_whole_under_contention() {
    use onesided::{DoubleInt, ValueIndex};
    testing::job(2)
        .timeout(std::time::Duration::from_secs(120))
        .run(|u| {
            let w = u.world();
            let me = w.rank();
            let mut private = vec![0u64; 32];
            let windows = mapped_and_attached(w, &mut private)?;
            let rounds = if w.node_size() == w.size() {
                2_000
            } else {
                300
            };
            const RUN: usize = 10;
            for win in &windows {
                win.lock_all(Assert::NONE)?;
                for round in 0..rounds {
                    let mine = DoubleInt::new(-((2 * round + me) as f64), me as i32);
                    let run = [mine; RUN];
                    win.accumulate(
                        bytemuck::cast_slice(&run),
                        ElemType::DoubleInt,
                        0,
                        8,
                        Op::Replace,
                    )?;
                    let mut seen = [DoubleInt::new(0.0, 0); RUN];
                    let probe = [DoubleInt::new(f64::MIN, 0); RUN];
                    let op = if round % 2 == 0 { Op::NoOp } else { Op::MaxLoc };
                    win.get_accumulate(
                        bytemuck::cast_slice(&probe),
                        bytemuck::cast_slice_mut(&mut seen),
                        ElemType::DoubleInt,
                        0,
                        8,
                        op,
                    )?;
                    assert!(
                        seen.iter().all(|p| p == &seen[0]),
                        "round {round}: a torn run of pairs {seen:?}"
                    );
                    assert!(seen[0].value() <= 0.0, "round {round}: {seen:?}");
                }
                win.unlock_all()?;
                w.barrier()?;
            }
            for win in windows {
                win.free()?;
            }
            drop(private);
            Ok(())
        })
        .assert_success();
}

/// Two windows over memory in the same pages: the second shares the first one's move, and
/// the pages stay shared until both are freed, whichever goes first; a third window that
/// only partly overlaps those pages stays where it is (cross-memory attach) and still works.
#[test]
fn windows_in_the_same_pages_share_one_move() {
    testing::job(2)
        .timeout(std::time::Duration::from_secs(60))
        .run(|u| {
            let w = u.world();
            let (me, peer) = (w.rank(), 1 - w.rank());
            let one_node = w.node_size() == w.size();
            let mut heap = vec![0u8; 6 * 4096];
            let page = (heap.as_ptr() as usize).next_multiple_of(4096) - heap.as_ptr() as usize;
            let info = onesided::WinInfo::new().with(onesided::info_keys::SHARE_IN_PLACE, "true");
            let base = heap.as_mut_ptr();
            let at = |off: usize| base.wrapping_add(page + off);
            // SAFETY: `heap` outlives the windows (freed below); no other thread writes it.
            let (a, b, c) = unsafe {
                (
                    RawWindow::create(w, at(100), 100, 1, &info)?,
                    RawWindow::create(w, at(1000), 50, 1, &info)?,
                    // Pages 0..3: overlaps the first page only in part.
                    RawWindow::create(w, at(3000), 2 * 4096, 1, &info)?,
                )
            };
            assert_eq!(in_onesided_segment(at(100) as usize), one_node);
            // `a` goes first; `b` still reaches the peer's memory, and the peer sees it.
            a.free()?;
            assert_eq!(in_onesided_segment(at(1000) as usize), one_node);
            for win in [&b, &c] {
                win.lock_all(Assert::NONE)?;
                win.put(&[7 + me as u8; 4], peer, 10)?;
                win.unlock_all()?;
            }
            w.barrier()?;
            assert_eq!(heap[page + 1010..page + 1014], [7 + peer as u8; 4], "b");
            assert_eq!(heap[page + 3010..page + 3014], [7 + peer as u8; 4], "c");
            b.free()?;
            c.free()?;
            assert!(
                !in_onesided_segment(at(1000) as usize),
                "shared after both frees"
            );
            Ok(())
        })
        .assert_success();
}

/// Two windows as long as `private` (at least 128 bytes): `allocate` (memory every process
/// maps) and `create` over `private` (reached by cross-memory attach); the caller keeps
/// `private` until both are freed.
fn mapped_and_attached(
    w: &onesided::Comm,
    private: &mut [u64],
) -> onesided::Result<[RawWindow; 2]> {
    let len = private.len() * 8;
    assert!(len >= 128, "128 bytes of private memory");
    let info = onesided::WinInfo::new();
    Ok([
        RawWindow::allocate(w, len, 1, &info)?,
        // SAFETY: the caller keeps `private` alive until the window is freed.
        unsafe { RawWindow::create(w, private.as_mut_ptr().cast(), len, 1, &info)? },
    ])
}

/// Short multi-element accumulates are atomic as a whole against each other, not only
/// element by element (as MPICH's and Open MPI's are): the MPI-3 linked-list example
/// replaces a 16-byte `MPI_BYTE` pointer with `MPI_Accumulate` while others read it with
/// `MPI_Get_accumulate(MPI_NO_OP)`, and a torn read sends them to an address never attached.
/// Both ranks replace and read, into rank 0: 16 bytes at an 8- but not 16-byte aligned
/// offset, and six `u32` that cross a 64-byte granule — on mapped memory (allocate) and on
/// memory reached by cross-memory attach (create over a private buffer).
#[test]
fn short_accumulates_are_atomic_as_a_whole() {
    testing::job(2)
        .timeout(std::time::Duration::from_secs(120))
        .run(|u| {
            let w = u.world();
            let me = w.rank();
            let mut private = vec![0u64; 16];
            let windows = mapped_and_attached(w, &mut private)?;
            let rounds = if w.node_size() == w.size() {
                20_000
            } else {
                2_000
            };
            for win in &windows {
                win.lock_all(Assert::NONE)?;
                for round in 0..rounds {
                    let v = (2 * round + me) as u32;
                    win.accumulate(&[v as u8; 16], ElemType::U8, 0, 8, Op::Replace)?;
                    let words: Vec<u8> = bytemuck::cast_slice(&[v; 6]).to_vec();
                    win.accumulate(&words, ElemType::U32, 0, 56, Op::Replace)?;
                    let mut seen = [0u8; 16];
                    win.get_accumulate(&[0; 16], &mut seen, ElemType::U8, 0, 8, Op::NoOp)?;
                    assert!(
                        seen.iter().all(|&b| b == seen[0]),
                        "round {round}: a torn 16-byte read {seen:?}"
                    );
                    let mut seen = [0u8; 24];
                    win.get_accumulate(&[0; 24], &mut seen, ElemType::U32, 0, 56, Op::NoOp)?;
                    let seen: [u32; 6] = bytemuck::pod_read_unaligned(&seen);
                    assert!(
                        seen.iter().all(|&x| x == seen[0]),
                        "round {round}: a torn read across granules {seen:?}"
                    );
                }
                win.unlock_all()?;
                w.barrier()?;
            }
            for win in windows {
                win.free()?;
            }
            drop(private);
            Ok(())
        })
        .assert_success();
}
