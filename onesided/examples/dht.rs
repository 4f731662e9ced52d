//! Distributed hashtable ([Gerstenberger13] §4.1): every rank inserts random 8-byte keys into a
//! table spread over all ranks, with compare_and_swap for the table slot and fetch_and_op
//! for the overflow heap; then every inserted key must be found exactly once.
//!
//! Each rank's part of the table (its "local volume") lives in one window:
//!
//! ```text
//! [next free heap entry] [table: SLOTS x (key, next)] [heap: HEAP x (key, next)]
//! ```
//!
//! `next` links a slot to a chain of heap entries (heap index + 1; 0 ends the chain). An
//! insert CASes the key into its slot; on a collision it takes a heap entry with
//! fetch_and_op, writes (key, chain head) there, flushes, and CASes the slot's chain head to
//! the new entry. The insert rate is measured for 1, 2, ... N inserting ranks (the table
//! always spans all N).
//!
//! ```text
//! cargo build --release --examples
//! target/release/osrun -n 2 target/release/examples/dht [INSERTS_PER_RANK (65536)]
//! ```

use std::time::Instant;

use onesided::{Assert, Op, ReduceOp, Window};

const COUNTER: usize = 0;
const TABLE: usize = 1;
/// Timed repetitions per number of inserters (the median is reported).
const REPS: usize = 5;

/// Where things are in one rank's volume, sized for `keys` keys per owner.
#[derive(Clone, Copy)]
struct Volume {
    slots: usize,
    heap: usize,
}

impl Volume {
    fn for_keys(keys: usize) -> Self {
        // Load factor at most 1/2; collisions go to the heap.
        Volume {
            slots: (2 * keys).next_power_of_two(),
            heap: keys.max(16),
        }
    }
    fn heap_at(self) -> usize {
        TABLE + 2 * self.slots
    }
    fn words(self) -> usize {
        self.heap_at() + 2 * self.heap
    }
}

/// splitmix64: a bijection, so distinct inputs give distinct keys.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn keys_of(rank: usize, phase: usize, count: usize) -> impl Iterator<Item = u64> {
    (0..count as u64)
        .map(move |i| mix(((phase as u64) << 48) | ((rank as u64) << 32) | i))
        .filter(|&k| k != 0)
}

fn home(key: u64, ranks: usize, v: Volume) -> (usize, usize) {
    let h = mix(key ^ 0x5555_5555_5555_5555);
    (
        (h % ranks as u64) as usize,
        ((h >> 32) % v.slots as u64) as usize,
    )
}

fn insert(win: &Window<u64>, key: u64, ranks: usize, v: Volume) -> onesided::Result<()> {
    let (owner, slot) = home(key, ranks, v);
    let at = TABLE + 2 * slot;
    if win.compare_and_swap(key, 0, owner, at)? == 0 {
        return Ok(());
    }
    let entry = win.fetch_and_op(1, owner, COUNTER, Op::Sum)? as usize;
    assert!(entry < v.heap, "overflow heap of rank {owner} is full");
    let e = v.heap_at() + 2 * entry;
    let mut head = win.fetch_and_op(0, owner, at + 1, Op::NoOp)?;
    loop {
        win.put(&[key, head], owner, e)?;
        // The entry must be complete at the target before it becomes reachable.
        win.flush(owner)?;
        let seen = win.compare_and_swap(entry as u64 + 1, head, owner, at + 1)?;
        if seen == head {
            return Ok(());
        }
        head = seen;
    }
}

/// Remote lookup: how many times `key` occurs in its slot's chain.
fn count(win: &Window<u64>, key: u64, ranks: usize, v: Volume) -> onesided::Result<usize> {
    let (owner, slot) = home(key, ranks, v);
    let mut pair = [0u64; 2];
    win.get(&mut pair, owner, TABLE + 2 * slot)?;
    let mut found = usize::from(pair[0] == key);
    let mut next = pair[1];
    while next != 0 {
        win.get(&mut pair, owner, v.heap_at() + 2 * (next as usize - 1))?;
        found += usize::from(pair[0] == key);
        next = pair[1];
    }
    Ok(found)
}

/// All keys in this rank's volume; checks that every heap entry in use is on one chain.
fn local_keys(win: &Window<u64>, v: Volume) -> onesided::Result<Vec<u64>> {
    let mut mem = vec![0u64; v.words()];
    win.local_read(0, &mut mem)?;
    let used = mem[COUNTER] as usize;
    let mut keys = Vec::new();
    let mut reached = vec![false; used];
    for slot in 0..v.slots {
        let (key, mut next) = (mem[TABLE + 2 * slot], mem[TABLE + 2 * slot + 1]);
        if key != 0 {
            keys.push(key);
        }
        while next != 0 {
            let i = next as usize - 1;
            assert!(
                i < used && !reached[i],
                "heap entry {i} unused or on two chains"
            );
            reached[i] = true;
            keys.push(mem[v.heap_at() + 2 * i]);
            next = mem[v.heap_at() + 2 * i + 1];
        }
    }
    assert!(
        reached.iter().all(|&r| r),
        "a heap entry was lost from its chain"
    );
    Ok(keys)
}

fn main() -> onesided::Result<()> {
    let universe = onesided::init()?;
    let world = universe.world();
    let (me, n) = (world.rank(), world.size());
    let per_rank: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(65_536);
    if me == 0 {
        println!(
            "dht: {per_rank} random 8-byte keys per inserting rank, table over {n} ranks, \
             median of {REPS} runs"
        );
        println!(
            "{:>9} {:>10} {:>10} {:>14} {:>9}",
            "inserters", "keys", "time [s]", "inserts/s", "speedup"
        );
    }
    // With all N inserting, each owner receives about per_rank keys; allow for imbalance.
    let v = Volume::for_keys(per_rank + per_rank / 4 + 64);
    let win = Window::<u64>::allocate(world, v.words())?;
    let zero = vec![0u64; v.words()];
    let mut base_rate = 0.0;
    for inserters in 1..=n {
        let mine: Vec<u64> = if me < inserters {
            keys_of(me, inserters, per_rank).collect()
        } else {
            Vec::new()
        };
        let mut times = Vec::with_capacity(REPS);
        for _ in 0..REPS {
            win.local_write(0, &zero)?;
            win.lock_all(Assert::NONE)?;
            world.barrier()?;
            let t = Instant::now();
            for &k in &mine {
                insert(&win, k, n, v)?;
            }
            win.flush_all()?;
            let mut elapsed = [t.elapsed().as_secs_f64()];
            world.barrier()?;
            world.allreduce(&mut elapsed, ReduceOp::Max)?;
            times.push(elapsed[0]);

            // Every inserted key is found exactly once: remotely by its inserter...
            for &k in &mine {
                assert_eq!(
                    count(&win, k, n, v)?,
                    1,
                    "key {k:#x} not found exactly once"
                );
            }
            win.unlock_all()?;
            world.barrier()?;
            // ...and as a multiset at its owner.
            let mut by_owner: Vec<Vec<u64>> = vec![Vec::new(); n];
            for &k in &mine {
                by_owner[home(k, n, v).0].push(k);
            }
            let refs: Vec<&[u64]> = by_owner.iter().map(|b| b.as_slice()).collect();
            let mut expected: Vec<u64> = world.alltoallv(&refs)?.concat();
            let mut found = local_keys(&win, v)?;
            expected.sort_unstable();
            found.sort_unstable();
            assert_eq!(
                found, expected,
                "rank {me}: the keys stored here differ from those inserted"
            );
            world.barrier()?;
        }
        times.sort_by(f64::total_cmp);
        let median = times[REPS / 2];
        let mut total = [mine.len() as u64];
        world.allreduce(&mut total, ReduceOp::Sum)?;
        if me == 0 {
            let rate = total[0] as f64 / median;
            if inserters == 1 {
                base_rate = rate;
            }
            println!(
                "{inserters:>9} {:>10} {median:>10.4} {rate:>14.0} {:>8.2}x",
                total[0],
                rate / base_rate
            );
        }
    }
    win.free()?;
    if me == 0 {
        println!("dht: every inserted key was found exactly once");
    }
    Ok(())
}
