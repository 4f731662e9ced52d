//! Persistent alltoallv plans (seed 001) on 1–4 ranks: every variant, uniform and irregular
//! counts (zeros and self-sends), 100 cycles with new send data each, checked element by
//! element and against the two-sided exchange; a late starter under the lock plan; re-init
//! with a new buffer; the hierarchical put order; mismatched counts.

use std::time::Duration;

use onesided::{
    alltoallv_rma_oneshot, alltoallv_two_sided, testing, Alltoallv, AlltoallvVariant, AutoChoice,
    Comm, Error, NodeSplit, WinBuffer,
};

const CYCLES: u64 = 100;
/// Untouched element between two receive blocks (catches writes outside a block).
const GAP: u64 = u64::MAX;

/// What `src` sends `dst` as element `k` in cycle `cycle`.
fn stamp(cycle: u64, src: usize, dst: usize, k: usize) -> u64 {
    (cycle << 40) | ((src as u64) << 28) | ((dst as u64) << 16) | k as u64
}

/// Elements `src` sends `dst`, known to every rank.
fn count(pattern: &str, src: usize, dst: usize) -> usize {
    match pattern {
        "uniform" => 5,
        // 256 KiB per pair: across nodes, long writes whose signal must land behind them.
        "large" => 32 * 1024,
        _ => {
            // A fixed hash: some pairs (self included) get nothing, others up to 40.
            let mut x = (src as u64 * 0x9e37_79b9 + dst as u64 * 0x85eb_ca6b) ^ 0x2545_f491;
            x ^= x >> 13;
            x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
            x ^= x >> 29;
            if x % 3 == 0 {
                0
            } else {
                (x % 41) as usize
            }
        }
    }
}

/// Counts and displacements of one rank: sends packed in rank order; receive blocks in
/// reverse rank order with one gap element after each (non-trivial displacements).
struct Shape {
    sendcounts: Vec<usize>,
    sdispls: Vec<usize>,
    recvcounts: Vec<usize>,
    rdispls: Vec<usize>,
    send_len: usize,
    recv_len: usize,
}

fn shape(pattern: &str, me: usize, n: usize) -> Shape {
    let sendcounts: Vec<usize> = (0..n).map(|p| count(pattern, me, p)).collect();
    let recvcounts: Vec<usize> = (0..n).map(|p| count(pattern, p, me)).collect();
    let mut sdispls = vec![0; n];
    let mut at = 0;
    for p in 0..n {
        sdispls[p] = at;
        at += sendcounts[p];
    }
    let send_len = at;
    let mut rdispls = vec![0; n];
    let mut at = 0;
    for p in (0..n).rev() {
        rdispls[p] = at;
        at += recvcounts[p] + 1;
    }
    Shape {
        sendcounts,
        sdispls,
        recvcounts,
        rdispls,
        send_len,
        recv_len: at,
    }
}

fn fill_send(s: &Shape, send: &mut [u64], cycle: u64, me: usize) {
    for (p, (&c, &d)) in s.sendcounts.iter().zip(&s.sdispls).enumerate() {
        for k in 0..c {
            send[d + k] = stamp(cycle, me, p, k);
        }
    }
}

/// The receive buffer as cycle `cycle` must leave it.
fn expected(s: &Shape, cycle: u64, me: usize) -> Vec<u64> {
    let mut v = vec![GAP; s.recv_len];
    for (p, (&c, &d)) in s.recvcounts.iter().zip(&s.rdispls).enumerate() {
        for k in 0..c {
            v[d + k] = stamp(cycle, p, me, k);
        }
    }
    v
}

fn recv_buffer(memory: &str, len: usize) -> onesided::Result<WinBuffer<u64>> {
    Ok(match memory {
        "alloc_mem" => {
            let mut m = onesided::alloc_mem::<u64>(len)?;
            m.fill(GAP);
            WinBuffer::from(m)
        }
        _ => WinBuffer::from(vec![GAP; len]),
    })
}

fn plan(
    w: &Comm,
    variant: AlltoallvVariant,
    s: &Shape,
    recv: WinBuffer<u64>,
) -> onesided::Result<Alltoallv<u64>> {
    Alltoallv::new(
        w,
        variant,
        NodeSplit::RanksPerNode(2),
        vec![0u64; s.send_len],
        &s.sendcounts,
        &s.sdispls,
        recv,
        &s.recvcounts,
        &s.rdispls,
    )
}

/// Every variant, both memories, both patterns: 100 cycles each, checked against the
/// expected stamps and against the two-sided exchange of the same data.
fn every_variant(n: usize) {
    testing::job(n)
        .timeout(Duration::from_secs(300))
        .run(|u| {
            let w = u.world();
            let me = w.rank();
            for pattern in ["uniform", "irregular"] {
                let s = shape(pattern, me, n);
                for memory in ["alloc_mem", "vec"] {
                    for variant in [
                        AlltoallvVariant::Fence,
                        AlltoallvVariant::FenceHierarchical,
                        AlltoallvVariant::Lock,
                        AlltoallvVariant::Notify,
                        AlltoallvVariant::Auto,
                    ] {
                        let mut p = plan(w, variant, &s, recv_buffer(memory, s.recv_len)?)?;
                        let mut reference = vec![GAP; s.recv_len];
                        for cycle in 1..=CYCLES {
                            fill_send(&s, p.send_mut()?, cycle, me);
                            p.start()?.wait()?;
                            let got = p.recv()?.to_vec();
                            assert_eq!(
                                got,
                                expected(&s, cycle, me),
                                "{pattern} {memory} {variant:?} cycle {cycle} at rank {me}"
                            );
                            if cycle % 25 == 0 {
                                let mut send = vec![0u64; s.send_len];
                                fill_send(&s, &mut send, cycle, me);
                                alltoallv_two_sided(
                                    w,
                                    &send,
                                    &s.sendcounts,
                                    &s.sdispls,
                                    &mut reference,
                                    &s.recvcounts,
                                    &s.rdispls,
                                )?;
                                assert_eq!(got, reference, "{variant:?} vs two-sided");
                            }
                        }
                        if variant == AlltoallvVariant::Auto {
                            assert_ne!(p.auto_choice(), AutoChoice::Probing);
                            // Every rank chose the same.
                            let choice = [u8::from(p.auto_choice() == AutoChoice::Persistent)];
                            let all = w.allgather(&choice)?;
                            assert!(all.iter().all(|&c| c == choice[0]), "{all:?}");
                        }
                        let (_, recv) = p.free()?;
                        assert_eq!(recv.len(), s.recv_len);
                    }
                }
                // The one-shot baseline: a window for one exchange.
                let mut send = vec![0u64; s.send_len];
                fill_send(&s, &mut send, 7, me);
                let recv = alltoallv_rma_oneshot(
                    w,
                    &send,
                    &s.sendcounts,
                    &s.sdispls,
                    vec![GAP; s.recv_len],
                    &s.recvcounts,
                    &s.rdispls,
                )?;
                assert_eq!(recv.into_vec().unwrap(), expected(&s, 7, me));
            }
            Ok(())
        })
        .assert_success();
}

/// Blocks of 256 KiB per pair, 4 ranks, 20 cycles: every element of every cycle is the
/// cycle's (a signal that overtook its block across nodes shows up as a stale element).
#[test]
fn notify_plan_moves_large_blocks_in_order() {
    testing::job(4)
        .timeout(Duration::from_secs(300))
        .run(|u| {
            let w = u.world();
            let me = w.rank();
            let s = shape("large", me, w.size());
            for memory in ["alloc_mem", "vec"] {
                let mut p = plan(
                    w,
                    AlltoallvVariant::Notify,
                    &s,
                    recv_buffer(memory, s.recv_len)?,
                )?;
                for cycle in 1..=20 {
                    fill_send(&s, p.send_mut()?, cycle, me);
                    p.start()?.wait()?;
                    let got = p.recv()?;
                    let want = expected(&s, cycle, me);
                    if let Some(k) = (0..got.len()).find(|&k| got[k] != want[k]) {
                        panic!(
                            "{memory} cycle {cycle} at rank {me}: element {k} is {:#x}",
                            got[k]
                        );
                    }
                }
                p.free()?;
            }
            Ok(())
        })
        .assert_success();
}

#[test]
fn every_variant_on_one_rank() {
    every_variant(1);
}

#[test]
fn every_variant_on_two_ranks() {
    every_variant(2);
}

#[test]
fn every_variant_on_three_ranks() {
    every_variant(3);
}

#[test]
fn every_variant_on_four_ranks() {
    every_variant(4);
}

/// Under the lock and notify plans one rank starts 20 ms late in every cycle (a different
/// one each time): no rank ever sees a partial or stale block after its wait, and nobody
/// writes into a buffer whose owner has not started yet (the owner checks its buffer right
/// before).
#[test]
fn lock_plan_with_a_late_starter_never_shows_partial_data() {
    late_starter_never_sees_partial_data(AlltoallvVariant::Lock);
}

#[test]
fn notify_plan_with_a_late_starter_never_shows_partial_data() {
    late_starter_never_sees_partial_data(AlltoallvVariant::Notify);
}

fn late_starter_never_sees_partial_data(variant: AlltoallvVariant) {
    testing::job(3)
        .timeout(Duration::from_secs(120))
        .run(|u| {
            let w = u.world();
            let me = w.rank();
            let n = w.size();
            let s = shape("uniform", me, n);
            let mut p = plan(w, variant, &s, recv_buffer("vec", s.recv_len)?)?;
            for cycle in 1..=12u64 {
                fill_send(&s, p.send_mut()?, cycle, me);
                if cycle as usize % n == me {
                    std::thread::sleep(Duration::from_millis(20));
                    // Still last cycle's data: the peers waited for this rank's start.
                    let before = if cycle == 1 {
                        vec![GAP; s.recv_len]
                    } else {
                        expected(&s, cycle - 1, me)
                    };
                    assert_eq!(p.recv()?.to_vec(), before, "cycle {cycle}: written early");
                }
                p.start()?.wait()?;
                assert_eq!(p.recv()?.to_vec(), expected(&s, cycle, me), "cycle {cycle}");
            }
            p.free()?;
            Ok(())
        })
        .assert_success();
}

/// A plan over a new receive buffer of the same size writes into the new buffer, not the
/// one of an earlier plan (the window belongs to the plan, never cached by size).
#[test]
fn a_new_plan_with_a_same_size_buffer_writes_the_new_buffer() {
    testing::job(2)
        .timeout(Duration::from_secs(60))
        .run(|u| {
            let w = u.world();
            let me = w.rank();
            let s = shape("uniform", me, w.size());
            let mut first = plan(
                w,
                AlltoallvVariant::Fence,
                &s,
                recv_buffer("vec", s.recv_len)?,
            )?;
            fill_send(&s, first.send_mut()?, 1, me);
            first.start()?.wait()?;
            let (_, old) = first.free()?;
            let old = old.into_vec().unwrap();
            assert_eq!(old, expected(&s, 1, me));
            let mut second = plan(
                w,
                AlltoallvVariant::Fence,
                &s,
                recv_buffer("vec", s.recv_len)?,
            )?;
            fill_send(&s, second.send_mut()?, 2, me);
            second.start()?.wait()?;
            let (_, new) = second.free()?;
            assert_eq!(new.into_vec().unwrap(), expected(&s, 2, me));
            assert_eq!(old, expected(&s, 1, me), "the old buffer changed");
            Ok(())
        })
        .assert_success();
}

/// With emulated nodes of two ranks, a hierarchical plan serves the other node first.
#[test]
fn hierarchical_plan_puts_to_other_nodes_first() {
    testing::job(4)
        .timeout(Duration::from_secs(60))
        .run(|u| {
            let w = u.world();
            let me = w.rank();
            let s = shape("uniform", me, w.size());
            let p = plan(
                w,
                AlltoallvVariant::FenceHierarchical,
                &s,
                recv_buffer("vec", s.recv_len)?,
            )?;
            let order = p.put_order();
            let node = |r: usize| r / 2;
            let first_local = order.iter().position(|&r| node(r) == node(me)).unwrap();
            assert_eq!(first_local, 2, "{order:?} at rank {me}");
            assert!(order[..2].iter().all(|&r| node(r) != node(me)), "{order:?}");
            let flat = plan(
                w,
                AlltoallvVariant::Fence,
                &s,
                recv_buffer("vec", s.recv_len)?,
            )?;
            // Without the hierarchy: plain rotation after this rank.
            let rotated: Vec<usize> = (1..=4).map(|k| (me + k) % 4).collect();
            assert_eq!(flat.put_order(), rotated);
            p.free()?;
            flat.free()?;
            Ok(())
        })
        .assert_success();
}

/// A receive count that differs from what its sender sends fails init at every rank.
#[test]
fn mismatched_counts_fail_at_every_rank() {
    testing::job(3)
        .timeout(Duration::from_secs(60))
        .run(|u| {
            let w = u.world();
            let me = w.rank();
            let mut s = shape("uniform", me, w.size());
            if me == 1 {
                s.recvcounts[0] -= 1;
            }
            let err = plan(
                w,
                AlltoallvVariant::Fence,
                &s,
                recv_buffer("vec", s.recv_len)?,
            )
            .expect_err("init must fail");
            match (me, err) {
                (1, Error::InvalidArgument(msg)) => assert!(msg.contains("rank 0"), "{msg}"),
                (1, e) => panic!("rank 1: {e}"),
                (_, Error::PeerFailed { .. }) => {}
                (_, e) => panic!("rank {me}: {e}"),
            }
            // The communicator is still usable afterwards.
            let s = shape("uniform", me, w.size());
            let mut p = plan(
                w,
                AlltoallvVariant::Lock,
                &s,
                recv_buffer("vec", s.recv_len)?,
            )?;
            fill_send(&s, p.send_mut()?, 3, me);
            p.start()?.wait()?;
            assert_eq!(p.recv()?.to_vec(), expected(&s, 3, me));
            p.free()?;
            Ok(())
        })
        .assert_success();
}

/// Mismatched plans (erroneous): rank 0 builds a lock plan, the others a fence plan. Some
/// ranks get errors and leave; nobody may wait forever: every call of rank 0 returns (an
/// error naming an exited peer is fine) within a few seconds. (The hang this scenario
/// could end in — a `free` waiting for peers whose failed collective had the same sequence
/// number — is pinned down deterministically in `collectives.rs`.)
#[test]
fn mismatched_plans_never_leave_a_rank_waiting_for_exited_peers() {
    testing::job(3)
        .timeout(Duration::from_secs(30))
        .run(|u| {
            let w = u.world();
            let me = w.rank();
            let s = shape("uniform", me, w.size());
            let variant = if me == 0 {
                AlltoallvVariant::Lock
            } else {
                AlltoallvVariant::Fence
            };
            let started = std::time::Instant::now();
            let outcome =
                plan(w, variant, &s, recv_buffer("vec", s.recv_len)?).and_then(|mut p| {
                    let run = p.start().and_then(|r| r.wait());
                    let freed = p.free();
                    run.and(freed)
                });
            if me == 0 {
                // Whatever the outcome, it came: peers that exited were noticed.
                assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "rank 0 took {:?} ({outcome:?})",
                    started.elapsed()
                );
            }
            drop(outcome);
            Ok(())
        })
        .assert_success();
}
