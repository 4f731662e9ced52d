//! Accumulates and atomics across nodes (the network layer): onesided's operations and element
//! types in libfabric's names, and which of them a provider applies natively.
//!
//! `fi_query_atomic` answers per (kind, operation, type) whether the provider has it and
//! how many elements one call may carry ([`crate::transport::network::AtomicTable`]); where it
//! has none, the window falls back to element-wise atomics (a compare-and-swap loop over
//! the network), never mixing the two on one element. On `tcp;ofi_rxm` and `shm` every
//! pair onesided uses is native, and the target's progress applies them with CPU atomics:
//! they mix safely with node-local CPU atomics on the same word (tested below, every
//! operation and type). NIC atomics (verbs, cxi, efa) do not: on those a window that spans
//! nodes sends every atomic through the network, node-local ones included.

use crate::error::{Error, Result};
use crate::ops::{AccElement, ElemType, Op};
use crate::transport::network::{self, AtomicKind, AtomicTable, Fabric, NetOp, NetType, Remote};

/// libfabric's operation for `op` (`no_op` is an atomic read: fetching only); `None` for
/// MINLOC/MAXLOC, which libfabric lacks.
pub(crate) fn net_op(op: Op) -> Option<NetOp> {
    Some(match op {
        Op::Sum => NetOp::Sum,
        Op::Prod => NetOp::Prod,
        Op::Max => NetOp::Max,
        Op::Min => NetOp::Min,
        Op::Band => NetOp::Band,
        Op::Bor => NetOp::Bor,
        Op::Bxor => NetOp::Bxor,
        Op::Land => NetOp::Land,
        Op::Lor => NetOp::Lor,
        Op::Lxor => NetOp::Lxor,
        Op::Replace => NetOp::Write,
        Op::NoOp => NetOp::Read,
        Op::MinLoc | Op::MaxLoc => return None,
    })
}

/// libfabric's type for `ty`; `None` for the types of [`crate::elements`], which stay on
/// one node.
pub(crate) fn net_type(ty: ElemType) -> Option<NetType> {
    Some(match ty {
        ElemType::I8 => NetType::I8,
        ElemType::I16 => NetType::I16,
        ElemType::I32 => NetType::I32,
        ElemType::I64 => NetType::I64,
        ElemType::U8 => NetType::U8,
        ElemType::U16 => NetType::U16,
        ElemType::U32 => NetType::U32,
        ElemType::U64 => NetType::U64,
        ElemType::F32 => NetType::F32,
        ElemType::F64 => NetType::F64,
        _ => return None,
    })
}

/// Both of `net_op` and `net_type`, or the error of an accumulate the network cannot carry.
fn net_pair(op: Op, ty: ElemType) -> Result<(NetOp, NetType)> {
    match (net_op(op), net_type(ty)) {
        (Some(o), Some(t)) => Ok((o, t)),
        _ => Err(Error::Unsupported(format!(
            "{} of {} across nodes",
            op.name(),
            ty.name()
        ))),
    }
}

/// The atomic kinds a call needs for `op`: accumulate (no result), fetch (get_accumulate,
/// fetch_and_op) and, for compare_and_swap, compare.
#[cfg_attr(not(all(test, feature = "net")), allow(dead_code))]
fn kinds(op: Op) -> &'static [AtomicKind] {
    match op {
        // An accumulate with no_op moves nothing: only its fetching form reaches the target.
        Op::NoOp => &[AtomicKind::Fetch],
        _ => &[AtomicKind::Write, AtomicKind::Fetch],
    }
}

/// Applies `op` with `origin` to consecutive elements at `at` through the network, the
/// previous values into `result` if given; complete (at the target, results in place)
/// when it returns. Native atomics in runs as long as the provider allows; where it has
/// none for this operation and type, an element-wise compare-and-swap loop.
pub(crate) fn accumulate<E: AccElement>(
    op: Op,
    origin: &[E],
    result: Option<&mut [E]>,
    at: Remote,
) -> Result<()> {
    accumulate_with(
        &*network::endpoint()?,
        network::atomic_table()?,
        op,
        origin,
        result,
        at,
    )
}

/// Whether the endpoint's provider does `kind` of `op` (`None`: compare-and-swap, on the
/// element's bits) on `ty` natively — an intrinsic accumulate across nodes — rather than
/// through the element-wise fallback.
pub(crate) fn native(kind: AtomicKind, op: Option<Op>, ty: ElemType) -> Result<bool> {
    let table = network::atomic_table()?;
    Ok(match op {
        // An accumulate with no_op moves nothing: only its fetching form reaches the target.
        Some(Op::NoOp) if kind == AtomicKind::Write => true,
        Some(op) => match (net_op(op), net_type(ty)) {
            (Some(o), Some(t)) => table.count(kind, o, t).is_some(),
            _ => false,
        },
        None => net_type(ty).is_some_and(|t| {
            table
                .count(kind, NetOp::CompareSwap, bits_type(t.size()))
                .is_some()
        }),
    })
}

/// [`accumulate`] without a result, *issued*: where the provider has the operation
/// natively and delivers one endpoint's atomics to a peer in order (MPI's accumulate
/// ordering then holds while they are in flight: [`Fabric::orders_atomics`]), posted with a
/// copy of `origin` and complete at the target by the next flush of the endpoint; otherwise
/// (and for long runs) waited for as [`accumulate`] does.
pub(crate) fn issue_accumulate<E: AccElement>(op: Op, origin: &[E], at: Remote) -> Result<()> {
    let (nic, table) = (network::endpoint()?, network::atomic_table()?);
    let bytes = std::mem::size_of_val(origin);
    let ((nop, ty), size) = (net_pair(op, E::TYPE)?, std::mem::size_of::<E>());
    let max = match table.count(AtomicKind::Write, nop, ty) {
        Some(max) if op != Op::NoOp && bytes <= network::COPY_MAX && nic.orders_atomics() => max,
        _ => return accumulate_with(&*nic, table, op, origin, None, at),
    };
    if nic.held_bytes() + bytes > network::HELD_MAX {
        nic.flush(&mut || Ok(()))?;
    }
    for (i, run) in origin.chunks(max).enumerate() {
        let here = Remote {
            addr: at.addr + (i * max * size) as u64,
            ..at
        };
        nic.atomic_copied(nop, ty, bytemuck::cast_slice(run), here)?;
    }
    Ok(())
}

/// [`accumulate`] on `nic` with its `table`.
pub(crate) fn accumulate_with<E: AccElement>(
    nic: &dyn Fabric,
    table: &AtomicTable,
    op: Op,
    origin: &[E],
    mut result: Option<&mut [E]>,
    at: Remote,
) -> Result<()> {
    if op == Op::NoOp && result.is_none() {
        return Ok(());
    }
    let kind = if result.is_some() {
        AtomicKind::Fetch
    } else {
        AtomicKind::Write
    };
    let ((nop, ty), size) = (net_pair(op, E::TYPE)?, std::mem::size_of::<E>());
    let Some(max) = table.count(kind, nop, ty) else {
        return elementwise(nic, table, op, origin, result, at);
    };
    let mut i = 0;
    while i < origin.len() {
        let n = (origin.len() - i).min(max);
        let out = match result.as_deref_mut() {
            Some(r) => r[i..].as_mut_ptr().cast::<u8>(),
            None => std::ptr::null_mut(),
        };
        let here = Remote {
            addr: at.addr + (i * size) as u64,
            ..at
        };
        // SAFETY: `n` elements of `origin` (and `result`) from `i`, borrowed until the
        // flush below.
        unsafe {
            nic.atomic(
                kind,
                nop,
                ty,
                n,
                origin[i..].as_ptr().cast(),
                std::ptr::null(),
                out,
                None,
                here,
            )?;
        }
        i += n;
    }
    nic.flush(&mut || Ok(()))
}

/// The unsigned integer type of `size` bytes: compare-and-swap on any element's bits.
fn bits_type(size: usize) -> NetType {
    match size {
        1 => NetType::U8,
        2 => NetType::U16,
        4 => NetType::U32,
        _ => NetType::U64,
    }
}

/// One compare atomic (or an atomic read when `compare` is `None`) on the element at `at`,
/// waited for: the element's previous value.
fn swap_element<E: AccElement>(
    nic: &dyn Fabric,
    ty: NetType,
    compare: Option<E>,
    value: E,
    at: Remote,
) -> Result<E> {
    let mut before = E::zeroed();
    let (kind, op) = match compare {
        Some(_) => (AtomicKind::Compare, NetOp::CompareSwap),
        None => (AtomicKind::Fetch, NetOp::Read),
    };
    let compare = compare.unwrap_or(value);
    // SAFETY: the locals live across the flush.
    unsafe {
        nic.atomic(
            kind,
            op,
            ty,
            1,
            (&value as *const E).cast(),
            (&compare as *const E).cast(),
            (&mut before as *mut E).cast(),
            None,
            at,
        )?;
    }
    nic.flush(&mut || Ok(()))?;
    Ok(before)
}

/// The fallback for an operation the provider lacks: per element, read, combine, and
/// compare-and-swap the result in (on the element's bits), until no one came between.
fn elementwise<E: AccElement>(
    nic: &dyn Fabric,
    table: &AtomicTable,
    op: Op,
    origin: &[E],
    mut result: Option<&mut [E]>,
    at: Remote,
) -> Result<()> {
    let size = std::mem::size_of::<E>();
    let bits = bits_type(size);
    let native = |kind, op| table.count(kind, op, bits).is_some();
    if !native(AtomicKind::Compare, NetOp::CompareSwap) || !native(AtomicKind::Fetch, NetOp::Read) {
        return Err(Error::Unsupported(format!(
            "the network provider has neither {} on {:?} nor compare-and-swap on {size}-byte words",
            op.name(),
            E::TYPE
        )));
    }
    for (i, &v) in origin.iter().enumerate() {
        let here = Remote {
            addr: at.addr + (i * size) as u64,
            ..at
        };
        let mut now = swap_element(nic, bits, None, E::zeroed(), here)?;
        loop {
            let next = E::combine(op, now, v);
            let before = swap_element(nic, bits, Some(now), next, here)?;
            if bytemuck::bytes_of(&before) == bytemuck::bytes_of(&now) {
                break;
            }
            now = before;
        }
        if let Some(r) = result.as_deref_mut() {
            r[i] = now;
        }
    }
    Ok(())
}

/// Compare-and-swap of the element at `at` through the network: its previous value.
pub(crate) fn compare_swap<E: AccElement>(compare: E, value: E, at: Remote) -> Result<E> {
    swap_element(
        &*network::endpoint()?,
        bits_type(std::mem::size_of::<E>()),
        Some(compare),
        value,
        at,
    )
}

/// The (kind, operation, type) triples onesided needs that `table` lacks: each is served by
/// the element-wise fallback.
#[cfg_attr(not(all(test, feature = "net")), allow(dead_code))]
pub(crate) fn missing(table: &AtomicTable) -> Vec<(AtomicKind, Op, ElemType)> {
    let mut out = Vec::new();
    for &ty in ElemType::NATIVE {
        let Some(nty) = net_type(ty) else { continue };
        for op in Op::ALL.into_iter().filter(|op| op.valid_for(ty)) {
            let Some(nop) = net_op(op) else { continue };
            for &kind in kinds(op) {
                if table.count(kind, nop, nty).is_none() {
                    out.push((kind, op, ty));
                }
            }
        }
        if ty.is_integer()
            && table
                .count(AtomicKind::Compare, NetOp::CompareSwap, nty)
                .is_none()
        {
            out.push((AtomicKind::Compare, Op::Replace, ty));
        }
    }
    out
}

#[cfg(all(test, feature = "net"))]
mod tests {
    //! Network atomics mixed with the target's CPU atomics on one word, for every operation
    //! and type, over every network of the build (the socket network; libfabric's
    //! providers, with the wire's atomics and with the provider's).

    use super::*;
    use crate::ops::AccElement;
    use crate::testing::Watchdog;
    use crate::transport::network::{test_atomic_networks, test_endpoint, Remote};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    /// Network atomics each side applies to the shared element (the same count locally).
    const EACH: usize = 20;

    /// Two endpoints: a target served by a thread, an origin that reaches it.
    struct Pair {
        target: Arc<dyn Fabric>,
        origin: Arc<dyn Fabric>,
        peer: u64,
        _server: Box<dyn std::any::Any>,
    }

    /// A thread that drives an endpoint's progress until dropped.
    struct Serving(Arc<AtomicBool>, Option<std::thread::JoinHandle<()>>);

    impl Serving {
        fn start(target: Arc<dyn Fabric>) -> Serving {
            let stop = Arc::new(AtomicBool::new(false));
            let stopped = Arc::clone(&stop);
            let thread = std::thread::spawn(move || {
                // Relaxed: a request to stop.
                while !stopped.load(Ordering::Relaxed) {
                    let _ = target.progress();
                    std::thread::yield_now();
                }
            });
            Serving(stop, Some(thread))
        }
    }

    impl Drop for Serving {
        fn drop(&mut self) {
            // Relaxed: see start.
            self.0.store(true, Ordering::Relaxed);
            if let Some(t) = self.1.take() {
                let _ = t.join();
            }
        }
    }

    /// Two endpoints of the network `which` ([`test_endpoint`]), the target served by a
    /// thread.
    fn pair(which: &str) -> Pair {
        let target = test_endpoint(which).unwrap();
        let origin = test_endpoint(which).unwrap();
        let peer = (origin.insert)(&target.fabric.name().unwrap()).unwrap();
        Pair {
            _server: Box::new(Serving::start(Arc::clone(&target.fabric))),
            target: target.fabric,
            origin: origin.fabric,
            peer,
        }
    }

    impl Pair {
        /// Registers `len` bytes at `at` of the target's memory: the registration and how
        /// the origin names them. The memory must outlive the registration and be touched
        /// only atomically meanwhile (CPU atomics at the target, the network's through its
        /// progress thread).
        fn expose(
            &self,
            at: *mut u8,
            len: usize,
        ) -> (crate::transport::network::Registration, Remote) {
            // SAFETY: the callers keep the memory alive and atomic (see above).
            let reg = unsafe { self.target.register(at, len) }.unwrap();
            let remote = Remote {
                peer: self.peer,
                addr: reg.remote_base,
                key: reg.key,
            };
            (reg, remote)
        }
    }

    /// Every operation and type onesided needs is native on every network that runs here
    /// (the socket network's table, and each libfabric provider's `fi_query_atomic`).
    #[test]
    fn every_operation_and_type_is_native_on_every_network() {
        let _watchdog = Watchdog::new("native atomics", 60);
        for which in test_atomic_networks() {
            let table = crate::transport::network::test_atomic_table(which).unwrap();
            let missing = missing(&table);
            assert!(missing.is_empty(), "{which} lacks {missing:?}");
        }
    }

    /// The operands of the test for `op`, as i64 (cast to the element type): chosen so that
    /// a lost update changes the final value where the operation allows (sum of ones,
    /// products of an odd number, parities of xors), and the start value.
    fn operands(op: Op, float: bool) -> (i64, Vec<i64>) {
        let n = 2 * EACH as i64;
        match op {
            Op::Sum => (0, vec![1; n as usize]),
            Op::Prod => (1, vec![if float { 2 } else { 3 }; n as usize]),
            Op::Max => (0, (1..=n).collect()),
            Op::Min => (100, (0..n).map(|i| 99 - i).collect()),
            Op::Band => (-1, (0..n).map(|i| !(1 << (i % 7))).collect()),
            Op::Bor => (0, (0..n).map(|i| 1 << (i % 7)).collect()),
            Op::Bxor => (0, (0..n).map(|i| (i * 37 + 11) % 100).collect()),
            Op::Land => (1, (0..n).map(|i| i64::from(i != n - 1)).collect()),
            Op::Lor => (0, (0..n).map(|i| i64::from(i == n - 1)).collect()),
            Op::Lxor => (0, vec![1; n as usize]),
            Op::Replace => (0, (1..=n).collect()),
            Op::NoOp => (7, vec![0; n as usize]),
            Op::MinLoc | Op::MaxLoc => unreachable!("pairs do not cross the network"),
        }
    }

    /// One element of `T` at the target, updated at once by the target's own CPU atomics
    /// (`EACH` of them, in a thread of the target process) and by the origin's network
    /// atomics (`EACH`, half fetching, each completed): the final value is exactly the
    /// serial result of all of them (any order: every operation but replace commutes; a
    /// replace leaves one of the written values).
    fn mixed<T: AccElement + std::fmt::Debug>(p: &Pair, cast: impl Fn(i64) -> T) {
        let ty = net_type(T::TYPE).expect("a type the network carries");
        for op in Op::ALL.into_iter().filter(|op| op.valid_for(T::TYPE)) {
            let float = !T::TYPE.is_integer();
            let (start, values) = operands(op, float);
            let values: Vec<T> = values.into_iter().map(&cast).collect();
            let mut cell = vec![cast(start); 1];
            let mut results = vec![cast(0); EACH];
            let cell_ptr = cell.as_mut_ptr();
            let (reg, at) = p.expose(cell_ptr.cast(), std::mem::size_of::<T>());
            let cell_addr = cell_ptr as usize;
            std::thread::scope(|s| {
                let local = &values[EACH..];
                s.spawn(move || {
                    for &v in local {
                        // SAFETY: the element is live and every access to it is atomic.
                        unsafe { T::apply_op(cell_addr as *mut T, op, v) };
                    }
                });
                for (i, v) in values[..EACH].iter().enumerate() {
                    let kind = if op == Op::NoOp || i % 2 == 1 {
                        AtomicKind::Fetch
                    } else {
                        AtomicKind::Write
                    };
                    // SAFETY: one element each; the operand and the result stay untouched
                    // until the flush below.
                    unsafe {
                        p.origin
                            .atomic(
                                kind,
                                net_op(op).expect("an operation the network carries"),
                                ty,
                                1,
                                (v as *const T).cast(),
                                std::ptr::null(),
                                results.as_mut_ptr().add(i).cast(),
                                None,
                                at,
                            )
                            .unwrap();
                    }
                    p.origin.flush(&mut || Ok(())).unwrap();
                }
            });
            drop(reg);
            let got = cell[0];
            if op == Op::Replace {
                assert!(values.contains(&got), "{ty:?} replace left {got:?}");
            } else {
                let want = values
                    .iter()
                    .fold(cast(start), |a, &v| T::combine(op, a, v));
                assert_eq!(got, want, "{ty:?} {op:?}: a lost or doubled update");
            }
        }
        // compare_and_swap on integers: both sides increment by CAS loops.
        if T::TYPE.is_integer() {
            let mut cell = vec![cast(0); 1];
            let cell_ptr = cell.as_mut_ptr();
            let (reg, at) = p.expose(cell_ptr.cast(), std::mem::size_of::<T>());
            let cell_addr = cell_ptr as usize;
            let one = cast(1);
            std::thread::scope(|s| {
                s.spawn(move || {
                    for _ in 0..EACH {
                        let ptr = cell_addr as *mut T;
                        loop {
                            // SAFETY: as above.
                            let now = unsafe { T::fetch_op(ptr, Op::NoOp, one) };
                            let next = T::combine(Op::Sum, now, one);
                            // SAFETY: as above.
                            if unsafe { T::compare_swap(ptr, now, next) } == now {
                                break;
                            }
                        }
                    }
                });
                for _ in 0..EACH {
                    // The network's read and compare-and-swap, as the fallback uses them.
                    let mut now = swap_element(&*p.origin, ty, None, cast(0), at).unwrap();
                    loop {
                        let next = T::combine(Op::Sum, now, one);
                        let before = swap_element(&*p.origin, ty, Some(now), next, at).unwrap();
                        if before == now {
                            break;
                        }
                        now = before;
                    }
                }
            });
            drop(reg);
            assert_eq!(cell[0], cast(2 * EACH as i64), "{ty:?} compare_and_swap");
        }
    }

    fn every_type(p: &Pair) {
        mixed::<i8>(p, |v| v as i8);
        mixed::<u8>(p, |v| v as u8);
        mixed::<i16>(p, |v| v as i16);
        mixed::<u16>(p, |v| v as u16);
        mixed::<i32>(p, |v| v as i32);
        mixed::<u32>(p, |v| v as u32);
        mixed::<i64>(p, |v| v);
        mixed::<u64>(p, |v| v as u64);
        mixed::<f32>(p, |v| v as f32);
        mixed::<f64>(p, |v| v as f64);
    }

    /// A provider without the operation: the element-wise compare-and-swap loop, racing
    /// the target's own CPU atomics on the same elements, still counts every update (sum
    /// on u64; prod on f64 through the bits), and a provider without compare-and-swap is an
    /// error, not a wrong answer.
    #[test]
    fn the_elementwise_fallback_counts_every_update() {
        let _watchdog = Watchdog::new("elementwise fallback", 60);
        for which in crate::transport::network::test_networks() {
            elementwise_fallback_over(&pair(which));
        }
    }

    fn elementwise_fallback_over(p: &Pair) {
        let table = AtomicTable::only(&[
            (AtomicKind::Compare, NetOp::CompareSwap, NetType::U64, 1),
            (AtomicKind::Fetch, NetOp::Read, NetType::U64, 1),
        ]);
        let mut cells = vec![0u64, 1f64.to_bits()];
        let base = cells.as_mut_ptr();
        let (reg, at) = p.expose(base.cast(), 16);
        let addr = base as usize;
        std::thread::scope(|s| {
            s.spawn(move || {
                for _ in 0..EACH {
                    // SAFETY: as above.
                    unsafe {
                        u64::apply_op(addr as *mut u64, Op::Sum, 1);
                        f64::apply_op((addr as *mut f64).add(1), Op::Prod, 2.0);
                    }
                }
            });
            for _ in 0..EACH {
                let mut before = [0u64];
                accumulate_with(&*p.origin, &table, Op::Sum, &[1u64], Some(&mut before), at)
                    .unwrap();
                let second = Remote {
                    addr: at.addr + 8,
                    ..at
                };
                accumulate_with(&*p.origin, &table, Op::Prod, &[2.0f64], None, second).unwrap();
            }
        });
        drop(reg);
        assert_eq!(cells[0], 2 * EACH as u64);
        assert_eq!(f64::from_bits(cells[1]), 2f64.powi(2 * EACH as i32));
        let none = AtomicTable::only(&[]);
        assert!(matches!(
            accumulate_with(&*p.origin, &none, Op::Sum, &[1u64], None, at),
            Err(Error::Unsupported(_))
        ));
    }

    /// On every network that runs here: the socket network; libfabric's `tcp;ofi_rxm`
    /// with the wire's atomics and with the provider's; `udp;ofi_rxd` and `shm` with the
    /// wire's.
    #[test]
    fn cpu_and_network_atomics_mix_on_one_word() {
        let _watchdog = Watchdog::new("mixed atomics", 300);
        for which in test_atomic_networks() {
            every_type(&pair(which));
        }
    }
}
