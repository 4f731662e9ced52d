//! The first program of the README: a fence epoch that passes each rank's number to its
//! right neighbour, then a passive-target read of rank 0's window.
//!
//! ```text
//! cargo build --release --bins --examples
//! target/release/osrun -n 2 target/release/examples/first
//! ```

use onesided::{Assert, LockType, Window};

fn main() -> onesided::Result<()> {
    let universe = onesided::init()?; // joins the job started by osrun
    let world = universe.world();
    let (me, n) = (world.rank(), world.size());

    let win = Window::<f64>::allocate(world, 1024)?; // 1024 f64 per rank
    win.fence(Assert::NOPRECEDE)?;
    win.put(&[me as f64], (me + 1) % n, 0)?; // displacement in elements
    win.fence(Assert::NOSUCCEED)?;

    win.lock(LockType::Exclusive, 0, Assert::NONE)?; // passive target
    let mut x = [0.0];
    win.get(&mut x, 0, 0)?;
    win.flush(0)?;
    win.unlock(0)?;
    println!("rank {me} of {n} read {} from rank 0", x[0]); // rank n-1 put it there
    win.free()?;
    Ok(())
}
