//! The window extensions of seed 000: duplicates with their own info, thread-scope flush,
//! ordered operations, notifications, remote-completing requests and memory handles.
//! `docs/guide-extensions.md` walks through it.
//!
//! ```text
//! cargo build --release --examples
//! target/release/osrun -n 2 target/release/examples/extensions
//! ```

use onesided::{Assert, MemHandle, Op, WinInfo, WinScope, Window};

/// Threads per rank in the thread-scope part, and elements each one writes.
const THREADS: usize = 4;
const BLOCK: usize = 256;

fn main() -> onesided::Result<()> {
    let universe = onesided::init_thread(onesided::ThreadLevel::Multiple)?;
    let world = universe.world();
    let (me, n) = (world.rank(), world.size());
    assert!(n >= 2, "run with 2 or more ranks");
    let (left, right) = ((me + n - 1) % n, (me + 1) % n);

    // One window, three handles: each duplicate shares the memory and the epochs of the
    // window and differs only in its info.
    let win = Window::<u64>::allocate(world, THREADS * BLOCK + 8)?;
    let per_thread = win.dup_with_info(&WinInfo::new().scope(WinScope::Thread))?;
    let ordered = win.dup_with_info(&WinInfo::new().order(true))?;
    win.lock_all(Assert::NONE)?; // one epoch for all three handles

    // 1. Thread scope: each thread writes its block to the right neighbour and flushes
    //    only what it issued itself — it never waits for the other threads' transfers.
    std::thread::scope(|s| {
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let per_thread = &per_thread;
                s.spawn(move || -> onesided::Result<()> {
                    let block = vec![(me * THREADS + t) as u64; BLOCK];
                    for _ in 0..100 {
                        per_thread.put(&block, right, t * BLOCK)?;
                        per_thread.flush(right)?; // this thread's puts only
                    }
                    Ok(())
                })
            })
            .collect();
        threads
            .into_iter()
            .try_for_each(|t| t.join().expect("a writer thread panicked"))
    })?;
    win.flush_all()?;
    world.barrier()?;
    let mut got = vec![0u64; THREADS * BLOCK];
    win.local_read(0, &mut got)?;
    for t in 0..THREADS {
        assert!(got[t * BLOCK..][..BLOCK]
            .iter()
            .all(|&v| v == (left * THREADS + t) as u64));
    }
    world.barrier()?;

    // 2. Order: with mpi_win_order, a put and a later accumulate to the same target land
    //    in issue order, so a flag written after the data needs no flush in between.
    let (data, flag) = (THREADS * BLOCK, THREADS * BLOCK + 1);
    ordered.put(&[1000 + me as u64], right, data)?;
    ordered.accumulate(&[1], right, flag, Op::Replace)?;
    while win.fetch_and_op(0, me, flag, Op::NoOp)? != 1 {
        std::thread::yield_now();
    }
    let mut seen = [0u64];
    win.get(&mut seen, me, data)?;
    win.flush(me)?;
    assert_eq!(
        seen[0],
        1000 + left as u64,
        "the flag arrived before the data"
    );
    win.unlock_all()?;
    drop((per_thread, ordered));

    // 3. Notifications: a counter at the target counts arrived operations, so the target
    //    knows its halo is there without a flush at the origin or a barrier.
    win.set_num_notify(1)?;
    win.lock_all(Assert::NONE)?;
    win.put_notify(&[2000 + me as u64], right, data, 0)?;
    win.wait_notify(0, 1)?.wait()?;
    win.local_read(data, &mut seen)?;
    assert_eq!(seen[0], 2000 + left as u64);

    // 4. A remote-completing request: when `rrput`'s request completes, the data is in
    //    the target's memory — an accumulate can signal it without a flush.
    let halo = [3000 + me as u64; 4];
    let req = win.rrput(&halo, right, 0)?;
    req.wait()?;
    win.accumulate(&[1], right, flag, Op::Sum)?; // the flag goes 1 -> 2
    while win.fetch_and_op(0, me, flag, Op::NoOp)? != 2 {
        std::thread::yield_now();
    }
    let mut four = [0u64; 4];
    win.get(&mut four, me, 0)?;
    win.flush(me)?;
    assert_eq!(four, [3000 + left as u64; 4]);
    win.unlock_all()?;
    win.free()?;

    // 5. Memory handles: memory registered once with a dynamic window, reached by a peer
    //    through a window made from the handle — no attach, no address exchange per
    //    region, and the owner ends the exposure on its own.
    let dynamic = Window::<u64>::create_dynamic(world)?;
    let mine = dynamic.memhandle_create(onesided::alloc_mem::<u64>(16)?)?;
    let len = mine.as_bytes().len();
    let all = world.allgather(mine.as_bytes())?; // any transport will do
    let theirs = MemHandle::from_bytes(&all[right * len..][..len])?;
    {
        let remote = dynamic.window_from_memhandle(&theirs)?;
        dynamic.lock_all(Assert::NONE)?;
        remote.put(&[4000 + me as u64; 16], 0)?;
        remote.flush()?;
        dynamic.unlock_all()?;
    }
    world.barrier()?; // every peer is done with my memory
    let memory = dynamic.memhandle_release(&mine)?;
    assert!(memory.as_slice().iter().all(|&v| v == 4000 + left as u64));
    dynamic.free()?;

    if me == 0 {
        println!("thread scope: {THREADS} threads x 100 put + own flush, every block checked");
        println!("order: flag by accumulate after the put, data seen first");
        println!("notify: put_notify counted at the target, halo read after wait_notify");
        println!("rrput: request complete = data at the target, flag without flush");
        println!("memhandle: put through the neighbour's handle, released by its owner");
    }
    Ok(())
}
