//! A token travels around a ring of ranks three times, once with each synchronization mode:
//! fence, post-start-complete-wait, and passive-target locks with flush.
//!
//! ```text
//! cargo build --release --examples
//! target/release/osrun -n 4 target/release/examples/ring
//! ```

use onesided::{Assert, Group, LockType, Window};

fn main() -> onesided::Result<()> {
    let universe = onesided::init()?;
    let world = universe.world();
    let (me, n) = (world.rank(), world.size());
    let right = (me + 1) % n;
    let left = (me + n - 1) % n;

    // Slot 0 receives the token; slot 1 is the "token arrived" flag for the lock round.
    let win = Window::<u64>::allocate(world, 2)?;

    // Round 1 — fence: every rank adds its rank to the value it holds and passes it on.
    // One hop per fence epoch: n epochs for a full lap.
    let mut token = if me == 0 { 1000 } else { 0 };
    win.fence(Assert::NOPRECEDE)?;
    for hop in 0..n {
        if hop == me {
            win.put(&[token + me as u64], right, 0)?;
        }
        win.fence(Assert::NONE)?;
        if (hop + 1) % n == me {
            let mut got = [0u64];
            win.local_read(0, &mut got)?;
            token = got[0];
        }
    }
    win.fence(Assert::NOSUCCEED)?;
    let expect = 1000 + (0..n as u64).sum::<u64>();
    if me == 0 {
        println!("fence: token came back as {token} (expected {expect})");
        assert_eq!(token, expect);
    }

    // Round 2 — PSCW: the same lap, but each hop only synchronizes the two neighbours.
    let ring_left = Group::single(left);
    let ring_right = Group::single(right);
    // Rank 0 exposes itself for the returning token first (this also makes one rank work).
    let mut token = 2000;
    win.post(&ring_left, Assert::NONE)?;
    if me != 0 {
        win.wait()?;
        let mut got = [0u64];
        win.local_read(0, &mut got)?;
        token = got[0];
    }
    win.start(&ring_right, Assert::NONE)?;
    win.put(&[token + me as u64], right, 0)?;
    win.complete()?;
    if me == 0 {
        win.wait()?;
        let mut got = [0u64];
        win.local_read(0, &mut got)?;
        println!(
            "pscw:  token came back as {} (expected {})",
            got[0],
            2000 + expect - 1000
        );
        assert_eq!(got[0], 2000 + expect - 1000);
    }

    // Round 3 — locks: each rank waits for its flag, then writes token and flag at its
    // right neighbour under an exclusive lock, with a flush between data and flag.
    world.barrier()?;
    win.local_write(0, &[0, 0])?;
    world.barrier()?;
    let mut token = 3000u64;
    if me != 0 {
        loop {
            let mut flag = [0u64; 2];
            win.lock(LockType::Shared, me, Assert::NONE)?;
            win.get(&mut flag, me, 0)?;
            win.unlock(me)?;
            if flag[1] == 1 {
                token = flag[0];
                break;
            }
            std::thread::yield_now();
        }
    }
    win.lock(LockType::Exclusive, right, Assert::NONE)?;
    win.put(&[token + me as u64], right, 0)?;
    win.flush(right)?;
    win.put(&[1], right, 1)?;
    win.unlock(right)?;
    if me == 0 {
        loop {
            let mut v = [0u64; 2];
            win.lock(LockType::Shared, 0, Assert::NONE)?;
            win.get(&mut v, 0, 0)?;
            win.unlock(0)?;
            if v[1] == 1 {
                println!(
                    "lock:  token came back as {} (expected {})",
                    v[0],
                    3000 + expect - 1000
                );
                assert_eq!(v[0], 3000 + expect - 1000);
                break;
            }
            std::thread::yield_now();
        }
    }
    world.barrier()?;
    win.free()?;
    if me == 0 {
        println!("ring of {n} ranks: all three laps correct");
    }
    Ok(())
}
