//! Where a fence epoch's time goes on a `create` window over a `Vec` (docs/performance.md):
//! a fence alone and a fence after one 8-byte put, on an `allocate` window and on `create`
//! windows with the target's request service (the default) and without it
//! (`onesided_target_service=false`: the put is written with cross-memory attach).
//!
//! Run: `cargo build --release -p onesided --example fence_create && target/release/osrun -n 2
//! target/release/examples/fence_create`

use onesided::{Assert, Comm, WinInfo, Window};
use std::time::Instant;

const WARMUP: usize = 2_000;
const ITERS: usize = 20_000;

/// Microseconds per epoch of `win`: rank 0 puts one element to rank 1 (when `put`), then
/// both fence.
fn epoch_us(world: &Comm, win: &Window<u64>, put: bool) -> onesided::Result<f64> {
    let peer = 1 - world.rank();
    let origin = put && world.rank() == 0;
    win.fence(Assert::NONE)?;
    let mut started = Instant::now();
    for i in 0..WARMUP + ITERS {
        if i == WARMUP {
            started = Instant::now();
        }
        if origin {
            win.put(&[i as u64], peer, 0)?;
        }
        win.fence(Assert::NONE)?;
    }
    Ok(started.elapsed().as_secs_f64() * 1e6 / ITERS as f64)
}

fn main() -> onesided::Result<()> {
    let universe = onesided::init()?;
    let world = universe.world();
    if world.size() != 2 {
        eprintln!("fence_create needs exactly 2 ranks: osrun -n 2 ...");
        std::process::exit(2);
    }
    let mut no_service = WinInfo::new();
    no_service.set("onesided_target_service", "false");
    for round in 1..=3 {
        let mut row = Vec::new();
        let win = Window::<u64>::allocate(world, 8)?;
        row.push(("allocate fence", epoch_us(world, &win, false)?));
        row.push(("allocate put+fence", epoch_us(world, &win, true)?));
        win.free()?;
        let win = Window::create(world, vec![0u64; 8])?;
        row.push(("create fence", epoch_us(world, &win, false)?));
        row.push(("create put+fence", epoch_us(world, &win, true)?));
        win.free()?;
        let win = Window::<u64>::builder(world)
            .info(&no_service)
            .create(vec![0u64; 8])?;
        row.push(("create put+fence, no service", epoch_us(world, &win, true)?));
        win.free()?;
        if world.rank() == 0 {
            for (what, us) in row {
                println!("round {round}: {what:30} {us:.3} us per epoch");
            }
        }
    }
    Ok(())
}
