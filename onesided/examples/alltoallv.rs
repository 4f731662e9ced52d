//! Persistent alltoallv plans (seed 001): each variant built once and run many times, every
//! cycle's data checked, and the break-even model — after how many cycles a plan has paid
//! for its setup against the exchanges it replaces. `docs/guide-alltoallv.md` walks
//! through it.
//!
//! ```text
//! cargo build --release --examples
//! target/release/osrun -n 4 target/release/examples/alltoallv [elements per pair] [cycles]
//! ```

use std::time::{Duration, Instant};

use onesided::{
    alltoallv_rma_oneshot, alltoallv_two_sided, Alltoallv, AlltoallvVariant, AutoChoice, BreakEven,
    Comm, NodeSplit, ReduceOp,
};

fn main() -> onesided::Result<()> {
    let mut args = std::env::args().skip(1);
    let per_pair: usize = args
        .next()
        .map_or(4096, |a| a.parse().expect("elements per pair"));
    let cycles: usize = args.next().map_or(50, |a| a.parse().expect("cycles"));
    let universe = onesided::init()?;
    let world = universe.world();
    let (me, n) = (world.rank(), world.size());

    // Irregular counts, as alltoallv is for: rank `me` sends `per_pair + p` elements to
    // rank p, so it receives `per_pair + me` from everyone.
    let sendcounts: Vec<usize> = (0..n).map(|p| per_pair + p).collect();
    let sdispls = prefix_sums(&sendcounts);
    let recvcounts = vec![per_pair + me; n];
    let rdispls = prefix_sums(&recvcounts);
    let send_len = sendcounts.iter().sum::<usize>();
    let recv_len = recvcounts.iter().sum::<usize>();
    // Element i of the block from rank q in cycle c: distinct for every (cycle, sender, i).
    let value = |cycle: usize, from: usize, i: usize| ((cycle * n + from) * 1_000_000 + i) as u64;
    let fill = |send: &mut [u64], cycle: usize| {
        for p in 0..n {
            for (i, v) in send[sdispls[p]..][..sendcounts[p]].iter_mut().enumerate() {
                *v = value(cycle, me, i);
            }
        }
    };
    let check = |recv: &[u64], cycle: usize| {
        for q in 0..n {
            let block = &recv[rdispls[q]..][..recvcounts[q]];
            assert!(
                block
                    .iter()
                    .enumerate()
                    .all(|(i, &v)| v == value(cycle, q, i)),
                "cycle {cycle}: wrong data from rank {q}"
            );
        }
    };

    // The exchanges a plan replaces: MPI_Alltoallv (two-sided) and an RMA exchange through
    // a window created and freed for each call.
    let mut send = vec![0u64; send_len];
    let mut recv = vec![0u64; recv_len];
    let two_sided = time_cycles(world, cycles, |c| {
        fill(&mut send, c);
        alltoallv_two_sided(
            world,
            &send,
            &sendcounts,
            &sdispls,
            &mut recv,
            &recvcounts,
            &rdispls,
        )?;
        check(&recv, c);
        Ok(())
    })?;
    let oneshot = time_cycles(world, cycles, |c| {
        fill(&mut send, c);
        let got = alltoallv_rma_oneshot(
            world,
            &send,
            &sendcounts,
            &sdispls,
            onesided::alloc_mem::<u64>(recv_len)?,
            &recvcounts,
            &rdispls,
        )?;
        check(got.as_slice(), c);
        Ok(())
    })?;
    if me == 0 {
        println!(
            "{n} ranks, {} KiB per pair, {cycles} cycles",
            per_pair * 8 / 1024
        );
        println!(
            "two-sided alltoallv       {:>9.1} µs per call",
            us(two_sided)
        );
        println!("RMA, window per call      {:>9.1} µs per call", us(oneshot));
        println!(
            "{:<22} {:>12} {:>11}   break-even against: two-sided, window per call",
            "plan", "init + free", "per cycle"
        );
    }

    // Every variant: init, `cycles` start + wait, free. Emulated nodes of two ranks let the
    // hierarchical plan order its puts on one machine; across real nodes, NodeSplit::Hosts.
    for variant in [
        AlltoallvVariant::Fence,
        AlltoallvVariant::FenceHierarchical,
        AlltoallvVariant::Lock,
        AlltoallvVariant::Notify,
        AlltoallvVariant::Auto,
    ] {
        let started = Instant::now();
        let mut plan = Alltoallv::new(
            world,
            variant,
            NodeSplit::RanksPerNode(2),
            onesided::alloc_mem::<u64>(send_len)?,
            &sendcounts,
            &sdispls,
            onesided::alloc_mem::<u64>(recv_len)?,
            &recvcounts,
            &rdispls,
        )?;
        let init = started.elapsed();
        let per_cycle = time_cycles(world, cycles, |c| {
            fill(plan.send_mut()?, c);
            plan.start()?.wait()?;
            check(plan.recv()?, c);
            Ok(())
        })?;
        let chose = plan.auto_choice();
        let started = Instant::now();
        plan.free()?;
        let t_init = slowest(world, init + started.elapsed())?;
        if me == 0 {
            let against = |t_baseline| {
                BreakEven {
                    t_init,
                    t_persist: per_cycle,
                    t_baseline,
                }
                .iterations()
                .map_or("never".to_string(), |k| match k {
                    1 => "1 cycle".to_string(),
                    k => format!("{k} cycles"),
                })
            };
            let name = match (variant, chose) {
                (AlltoallvVariant::Auto, AutoChoice::TwoSided) => "auto (chose two-sided)",
                (AlltoallvVariant::Auto, AutoChoice::Persistent) => "auto (chose the plan)",
                _ => variant.name(),
            };
            println!(
                "{name:<22} {:>9.1} µs {:>8.1} µs   {}, {}",
                us(t_init),
                us(per_cycle),
                against(two_sided),
                against(oneshot)
            );
        }
    }
    Ok(())
}

/// The median over `cycles` of the slowest rank's time for one call of `cycle`.
fn time_cycles(
    world: &Comm,
    cycles: usize,
    mut cycle: impl FnMut(usize) -> onesided::Result<()>,
) -> onesided::Result<Duration> {
    let mut times = Vec::with_capacity(cycles);
    for c in 0..cycles {
        world.barrier()?;
        let t = Instant::now();
        cycle(c)?;
        times.push(slowest(world, t.elapsed())?);
    }
    times.sort();
    Ok(times[times.len() / 2])
}

/// The longest of the ranks' `time`s, at every rank.
fn slowest(world: &Comm, time: Duration) -> onesided::Result<Duration> {
    let mut t = [time.as_secs_f64()];
    world.allreduce(&mut t, ReduceOp::Max)?;
    Ok(Duration::from_secs_f64(t[0]))
}

fn prefix_sums(counts: &[usize]) -> Vec<usize> {
    counts
        .iter()
        .scan(0, |at, &c| {
            let here = *at;
            *at += c;
            Some(here)
        })
        .collect()
}

fn us(t: Duration) -> f64 {
    t.as_secs_f64() * 1e6
}
