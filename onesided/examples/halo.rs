//! 1-D heat diffusion with halo exchange over PSCW: each rank owns a slab of cells and,
//! every step, puts its boundary cells into the ghost cells of its two neighbours inside
//! an epoch that synchronizes only those neighbours. At the end rank 0 gathers the field
//! and compares it with a serial computation of the same steps.
//!
//! ```text
//! cargo build --release --examples
//! target/release/osrun -n 4 target/release/examples/halo [CELLS_PER_RANK] [STEPS]
//! ```

use onesided::{Assert, Group, Window};

/// One explicit Euler step of u_t = u_xx on cells 1..=n of `u` (0 and n+1 are ghosts).
fn step(u: &[f64], next: &mut [f64]) {
    const ALPHA: f64 = 0.25;
    for i in 1..u.len() - 1 {
        next[i] = u[i] + ALPHA * (u[i - 1] - 2.0 * u[i] + u[i + 1]);
    }
}

fn initial(global: usize, total: usize) -> f64 {
    // A hot spike and a ramp, so that the answer is not trivially symmetric.
    if global == total / 3 {
        100.0
    } else {
        global as f64 / total as f64
    }
}

fn main() -> onesided::Result<()> {
    let universe = onesided::init()?;
    let world = universe.world();
    let (me, n) = (world.rank(), world.size());
    let mut args = std::env::args().skip(1);
    let cells: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let steps: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(500);
    let total = cells * n;

    // Window: [left ghost, cells..., right ghost]; fixed (Dirichlet) ends at the domain edge.
    let win = Window::<f64>::allocate(world, cells + 2)?;
    let mut u = vec![0.0; cells + 2];
    for (i, cell) in u.iter_mut().enumerate().take(cells + 1).skip(1) {
        *cell = initial(me * cells + i - 1, total);
    }
    if me == n - 1 {
        u[cells + 1] = 1.0; // right boundary of the domain
    }
    let mut next = u.clone();
    let neighbours: Vec<usize> = [me.checked_sub(1), (me + 1 < n).then_some(me + 1)]
        .into_iter()
        .flatten()
        .collect();
    let group = Group::new(neighbours.clone())?;

    let t = std::time::Instant::now();
    for _ in 0..steps {
        // Exchange boundary cells: my first cell is my left neighbour's right ghost, and so on.
        win.post(&group, Assert::NONE)?;
        win.start(&group, Assert::NONE)?;
        if me > 0 {
            win.put(&u[1..2], me - 1, cells + 1)?;
        }
        if me + 1 < n {
            win.put(&u[cells..cells + 1], me + 1, 0)?;
        }
        win.complete()?;
        win.wait()?;
        if me > 0 {
            win.local_read(0, &mut u[0..1])?;
        }
        if me + 1 < n {
            win.local_read(cells + 1, &mut u[cells + 1..])?;
        }
        step(&u, &mut next);
        std::mem::swap(&mut u, &mut next);
        next[0] = u[0];
        next[cells + 1] = u[cells + 1];
    }
    let elapsed = t.elapsed();

    let field = world.allgather(&u[1..=cells])?;
    if me == 0 {
        let mut serial: Vec<f64> = (0..total + 2)
            .map(|i| match i {
                0 => 0.0,
                i if i == total + 1 => 1.0,
                i => initial(i - 1, total),
            })
            .collect();
        let mut tmp = serial.clone();
        for _ in 0..steps {
            step(&serial, &mut tmp);
            std::mem::swap(&mut serial, &mut tmp);
            tmp[0] = serial[0];
            tmp[total + 1] = serial[total + 1];
        }
        let max_err = field
            .iter()
            .zip(&serial[1..=total])
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        println!(
            "halo: {n} ranks x {cells} cells, {steps} steps in {:.3} s ({:.2} µs per step); \
             max |parallel - serial| = {max_err:e}",
            elapsed.as_secs_f64(),
            elapsed.as_secs_f64() * 1e6 / steps as f64
        );
        assert_eq!(
            max_err, 0.0,
            "the parallel result must equal the serial one bit for bit"
        );
    }
    win.free()?;
    Ok(())
}
