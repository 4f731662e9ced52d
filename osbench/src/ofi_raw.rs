//! `ofi-raw` (feature `ofi`): the limit of the network path — the latency, bandwidth and
//! message-rate benchmarks' operations written directly against libfabric's sys layer,
//! with nothing of onesided between the loop and the provider. It runs on the same
//! provider and address as onesided's endpoint ([`onesided::network`]), the same kind of
//! endpoint (RDM, `FI_DELIVERY_COMPLETE`, selective completion, completion counters), the
//! same completion mechanism (a flush waits until the counters reach the posted counts,
//! reading the completion queue meanwhile) and the same progress arrangement: a thread per
//! process serving the endpoint in onesided's mode (`ONESIDED_PROGRESS`: `spin`, `yield`,
//! `block`), and every thread that waits inside onesided polling it meanwhile
//! while the baseline runs ([`onesided::add_wait_hook`]), as those waits poll onesided's
//! endpoint.
//!
//! What it leaves out is what onesided adds: epochs and their checks, window lookup, the
//! copy that makes a short put locally complete at once, and locks. Transfers go from
//! the caller's buffer, which the benchmarks keep unchanged until the flush; only the
//! `flush` synchronization exists (`lock`/`unlock` around a flush loop only mark where it
//! starts and ends), on `allocate` windows.

use std::ffi::{CStr, CString};
use std::os::raw::{c_int, c_void};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use onesided::Comm;
use onesided_ofi_sys as sys;

use crate::backend::{BResult, Backend, BenchError, BenchWin, Elem, SyncMode, WinKind};

/// The implementation name in records (DESIGN.md).
pub const NAME: &str = "ofi-raw";

/// The benchmarks `ofi-raw` runs.
pub fn runs(bench: &str) -> bool {
    bench.ends_with("-latency") && bench != "sync-latency" && bench != "notify-latency"
        || matches!(bench, "put-bw" | "get-bw" | "bibw" | "msg-rate")
}

fn fail(call: &str, rc: i64) -> BenchError {
    // SAFETY: fi_strerror returns a static string for any code.
    let text = unsafe { CStr::from_ptr(sys::fi_strerror((-rc) as c_int)) };
    BenchError(format!("{NAME}: {call}: {} ({rc})", text.to_string_lossy()))
}

fn check(call: &str, rc: impl Into<i64>) -> BResult<()> {
    let rc = rc.into();
    if rc < 0 {
        Err(fail(call, rc))
    } else {
        Ok(())
    }
}

/// One endpoint with its counters and its serving thread (dropped in field order after
/// the thread stopped).
struct Endpoint {
    ep: *mut sys::fid_ep,
    cq: *mut sys::fid_cq,
    write_cntr: *mut sys::fid_cntr,
    read_cntr: *mut sys::fid_cntr,
    av: *mut sys::fid_av,
    domain: *mut sys::fid_domain,
    fabric: *mut sys::fid_fabric,
    info: *mut sys::fi_info,
    mr_mode: u64,
    waitable: bool,
    writes: AtomicU64,
    reads: AtomicU64,
    /// Requested keys of registrations (providers without FI_MR_PROV_KEY).
    next_key: AtomicU64,
    stop: AtomicBool,
    server: Mutex<Option<JoinHandle<()>>>,
    /// Nanoseconds from `start` to the last read of the queue by a waiting application
    /// thread: the progress thread stands aside while they poll, as onesided's does
    /// (`HANDOVER`).
    polled_at: AtomicU64,
    start: std::time::Instant,
    /// The progress thread is in a blocking read, which a poller ends (onesided's
    /// `PollDuty::blocked`).
    blocked: AtomicBool,
}

/// How long the progress thread stands aside after an application thread read the queue,
/// and its first nap meanwhile (onesided's value).
const HANDOVER: std::time::Duration = std::time::Duration::from_micros(200);

/// Its longest nap: naps double while the pollers keep polling (onesided's value).
const LONGEST_NAP: std::time::Duration = std::time::Duration::from_micros(800);

// SAFETY: the domain is opened FI_THREAD_SAFE; our own fields are atomics or a mutex; the
// pointers are owned handles closed on drop.
unsafe impl Send for Endpoint {}
// SAFETY: as for Send.
unsafe impl Sync for Endpoint {}

/// Turns a pointer-returning libfabric constructor into a checked handle.
unsafe fn make<T>(call: &str, f: impl FnOnce(*mut *mut T) -> c_int) -> BResult<*mut T> {
    let mut out: *mut T = ptr::null_mut();
    check(call, f(&mut out))?;
    Ok(out)
}

impl Endpoint {
    /// Opens `provider` at `node`, served in progress mode `mode`.
    fn open(provider: &str, node: &str, mode: &str) -> BResult<Arc<Endpoint>> {
        let mode = mode.to_owned();
        let waitable = mode == "block";
        let bad = |_| BenchError(format!("{NAME}: a NUL in {provider:?} or {node:?}"));
        let prov = CString::new(provider).map_err(bad)?;
        let node_c = CString::new(node).map_err(bad)?;
        // SAFETY: every call gets valid arguments; each object is closed in Drop (the
        // endpoint is returned only once all are open; on an error path they leak, and the
        // process ends with the benchmark's error).
        unsafe {
            let hints = sys::fi_allocinfo();
            if hints.is_null() {
                return Err(BenchError(format!("{NAME}: fi_allocinfo failed")));
            }
            (*hints).caps = u64::from(sys::FI_RMA | sys::FI_ATOMIC)
                | u64::from(sys::FI_READ | sys::FI_WRITE)
                | u64::from(sys::FI_REMOTE_READ | sys::FI_REMOTE_WRITE);
            (*hints).mode = sys::FI_CONTEXT | sys::FI_CONTEXT2;
            (*(*hints).ep_attr).type_ = sys::fi_ep_type_FI_EP_RDM;
            (*(*hints).tx_attr).op_flags = u64::from(sys::FI_DELIVERY_COMPLETE);
            let d = (*hints).domain_attr;
            (*d).mr_mode = (sys::FI_MR_LOCAL
                | sys::FI_MR_VIRT_ADDR
                | sys::FI_MR_ALLOCATED
                | sys::FI_MR_PROV_KEY
                | sys::FI_MR_ENDPOINT) as c_int;
            (*d).threading = sys::fi_threading_FI_THREAD_SAFE;
            // fi_freeinfo frees the name with libc's free.
            (*(*hints).fabric_attr).prov_name = libc::strdup(prov.as_ptr());
            let mut info: *mut sys::fi_info = ptr::null_mut();
            let rc = sys::fi_getinfo(
                sys::FI_VERSION(1, 17),
                node_c.as_ptr(),
                ptr::null(),
                sys::FI_SOURCE,
                hints,
                &mut info,
            );
            sys::fi_freeinfo(hints);
            check("fi_getinfo", rc)?;
            if info.is_null() {
                return Err(BenchError(format!(
                    "{NAME}: no {provider} endpoint at {node}"
                )));
            }
            let fabric = make("fi_fabric", |o| {
                sys::fi_fabric((*info).fabric_attr, o, ptr::null_mut())
            })?;
            let domain = make("fi_domain", |o| {
                sys::fi_domain(fabric, info, o, ptr::null_mut())
            })?;
            let mut av_attr = sys::fi_av_attr {
                type_: sys::fi_av_type_FI_AV_TABLE,
                ..Default::default()
            };
            let av = make("fi_av_open", |o| {
                sys::fi_av_open(domain, &mut av_attr, o, ptr::null_mut())
            })?;
            let mut cq_attr = sys::fi_cq_attr {
                format: sys::fi_cq_format_FI_CQ_FORMAT_CONTEXT,
                wait_obj: if waitable {
                    sys::fi_wait_obj_FI_WAIT_UNSPEC
                } else {
                    sys::fi_wait_obj_FI_WAIT_NONE
                },
                ..Default::default()
            };
            let cq = make("fi_cq_open", |o| {
                sys::fi_cq_open(domain, &mut cq_attr, o, ptr::null_mut())
            })?;
            let counter = || {
                let mut attr = sys::fi_cntr_attr {
                    events: sys::fi_cntr_events_FI_CNTR_EVENTS_COMP,
                    wait_obj: sys::fi_wait_obj_FI_WAIT_NONE,
                    ..Default::default()
                };
                make("fi_cntr_open", |o| {
                    sys::fi_cntr_open(domain, &mut attr, o, ptr::null_mut())
                })
            };
            let (write_cntr, read_cntr) = (counter()?, counter()?);
            let ep = make("fi_endpoint", |o| {
                sys::fi_endpoint(domain, info, o, ptr::null_mut())
            })?;
            check("fi_ep_bind(av)", sys::fi_ep_bind(ep, &mut (*av).fid, 0))?;
            check(
                "fi_ep_bind(cq)",
                sys::fi_ep_bind(
                    ep,
                    &mut (*cq).fid,
                    u64::from(sys::FI_TRANSMIT | sys::FI_RECV) | sys::FI_SELECTIVE_COMPLETION,
                ),
            )?;
            check(
                "fi_ep_bind(cntr)",
                sys::fi_ep_bind(ep, &mut (*write_cntr).fid, u64::from(sys::FI_WRITE)),
            )?;
            check(
                "fi_ep_bind(cntr)",
                sys::fi_ep_bind(ep, &mut (*read_cntr).fid, u64::from(sys::FI_READ)),
            )?;
            check("fi_enable", sys::fi_enable(ep))?;
            let endpoint = Arc::new(Endpoint {
                ep,
                cq,
                write_cntr,
                read_cntr,
                av,
                domain,
                fabric,
                mr_mode: (*(*info).domain_attr).mr_mode as u64,
                info,
                waitable,
                writes: AtomicU64::new(0),
                reads: AtomicU64::new(0),
                next_key: AtomicU64::new(1),
                stop: AtomicBool::new(false),
                server: Mutex::new(None),
                polled_at: AtomicU64::new(0),
                start: std::time::Instant::now(),
                blocked: AtomicBool::new(false),
            });
            // `none`, as onesided's: no thread, only waiting application threads read the
            // queue (a blocking read of a queue without a wait object would crash).
            if mode != "none" {
                let served = Arc::clone(&endpoint);
                let server = std::thread::Builder::new()
                    .name("ofi-raw-nic".into())
                    .spawn(move || served.serve(&mode))
                    .map_err(|e| BenchError(format!("{NAME}: progress thread: {e}")))?;
                *endpoint.server.lock().unwrap() = Some(server);
            }
            Ok(endpoint)
        }
    }

    /// Marks that a waiting application thread reads the queue now.
    fn app_polled(&self) {
        let now = (self.start.elapsed().as_nanos() as u64).max(1);
        // SeqCst with the progress thread's store of `blocked` and load of `polled_at`:
        // one of the two sees the other (onesided's PollDuty::app_polled); a steady poller
        // (reads < 10 µs apart) wakes it, as onesided's does.
        let before = self.polled_at.swap(now, Ordering::SeqCst);
        if now.saturating_sub(before) < 10_000
            && self.blocked.load(Ordering::SeqCst)
            && self.blocked.swap(false, Ordering::SeqCst)
        {
            // SAFETY: a live waitable queue (blocked is only set in block mode).
            unsafe { sys::fi_cq_signal(self.cq) };
        }
    }

    /// Whether an application thread read the queue within the last HANDOVER.
    fn app_polls(&self) -> bool {
        // SeqCst: see app_polled.
        let at = self.polled_at.load(Ordering::SeqCst);
        at != 0 && self.start.elapsed().as_nanos() as u64 <= at + HANDOVER.as_nanos() as u64
    }

    /// The progress thread: onesided's three modes, standing aside while an application
    /// thread polls.
    fn serve(&self, mode: &str) {
        let mut nap = HANDOVER;
        // Relaxed: a request to end.
        while !self.stop.load(Ordering::Relaxed) {
            if self.app_polls() {
                std::thread::sleep(nap);
                nap = (nap * 2).min(LONGEST_NAP);
                continue;
            }
            nap = HANDOVER;
            match mode {
                "spin" => self.progress(),
                "yield" => {
                    self.progress();
                    std::thread::yield_now();
                }
                _ => {
                    // SeqCst: see app_polled.
                    self.blocked.store(true, Ordering::SeqCst);
                    if !self.app_polls() {
                        let mut entries = [sys::fi_cq_entry::default(); 16];
                        // SAFETY: a live waitable queue; 16 entries of its format.
                        unsafe {
                            sys::fi_cq_sread(
                                self.cq,
                                entries.as_mut_ptr().cast(),
                                16,
                                ptr::null(),
                                100,
                            )
                        };
                    }
                    // Relaxed: only this thread sets it.
                    self.blocked.store(false, Ordering::Relaxed);
                }
            }
        }
    }

    /// Reads the completion queue once (drives the provider; no entries are asked for).
    fn progress(&self) {
        let mut entries = [sys::fi_cq_entry::default(); 16];
        // SAFETY: a live queue; 16 entries of its format.
        unsafe { sys::fi_cq_read(self.cq, entries.as_mut_ptr().cast(), 16) };
    }

    /// Waits until every posted operation completed (the counters reach the posted counts),
    /// reading the queue meanwhile: spinning a little, then yielding.
    fn flush(&self) -> BResult<()> {
        let mut spins = 0u32;
        loop {
            // SAFETY: live counters.
            let (w, r, errors) = unsafe {
                (
                    sys::fi_cntr_read(self.write_cntr),
                    sys::fi_cntr_read(self.read_cntr),
                    sys::fi_cntr_readerr(self.write_cntr) + sys::fi_cntr_readerr(self.read_cntr),
                )
            };
            if errors > 0 {
                return Err(BenchError(format!("{NAME}: {errors} operations failed")));
            }
            // Relaxed: only this thread posts.
            if w >= self.writes.load(Ordering::Relaxed) && r >= self.reads.load(Ordering::Relaxed) {
                return Ok(());
            }
            self.app_polled();
            self.progress();
            spins += 1;
            if spins > 64 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// Posts with `post` until the provider takes it, driving progress in between.
    fn post(&self, call: &str, read: bool, mut post: impl FnMut() -> isize) -> BResult<()> {
        loop {
            let rc = post();
            if rc >= 0 {
                // Relaxed: only this thread posts and flushes.
                if read { &self.reads } else { &self.writes }.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
            if rc != -(sys::FI_EAGAIN as isize) {
                return Err(fail(call, rc as i64));
            }
            self.progress();
        }
    }

    fn name(&self) -> BResult<Vec<u8>> {
        let mut buf = vec![0u8; 256];
        let mut len = buf.len();
        // SAFETY: buf holds len bytes.
        check("fi_getname", unsafe {
            sys::fi_getname(&mut (*self.ep).fid, buf.as_mut_ptr().cast(), &mut len)
        })?;
        buf.truncate(len);
        Ok(buf)
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        // Relaxed: the join orders the rest.
        self.stop.store(true, Ordering::Relaxed);
        if self.waitable {
            // SAFETY: a live waitable queue.
            unsafe { sys::fi_cq_signal(self.cq) };
        }
        if let Some(t) = self.server.lock().unwrap().take() {
            let _ = t.join();
        }
        // SAFETY: each handle is live and closed once, the endpoint before what it is
        // bound to.
        unsafe {
            sys::fi_close(&mut (*self.ep).fid);
            sys::fi_close(&mut (*self.write_cntr).fid);
            sys::fi_close(&mut (*self.read_cntr).fid);
            sys::fi_close(&mut (*self.cq).fid);
            sys::fi_close(&mut (*self.av).fid);
            sys::fi_close(&mut (*self.domain).fid);
            sys::fi_close(&mut (*self.fabric).fid);
            sys::fi_freeinfo(self.info);
        }
    }
}

/// The raw baseline over a communicator (the bootstrap exchanges endpoint names and keys).
pub struct OfiRaw {
    comm: Comm,
    ep: Arc<Endpoint>,
    /// Peers' addresses in the address vector, by rank of `comm`.
    peers: Vec<sys::fi_addr_t>,
}

impl OfiRaw {
    /// Opens an endpoint on the provider and address onesided's endpoint uses, served in
    /// its progress mode, and connects every rank of `comm` (collective).
    pub fn new(comm: Comm) -> BResult<OfiRaw> {
        // A window across the nodes opens onesided's endpoint (the provider is its choice).
        onesided::Window::<u64>::allocate(&comm, 1)?.free()?;
        let net = onesided::network()
            .ok_or_else(|| BenchError(format!("{NAME}: onesided opened no network endpoint")))?;
        let ep = Endpoint::open(&net.provider, &net.address, net.progress)?;
        let peers = Self::connect(&comm, &ep)?;
        Ok(OfiRaw { comm, ep, peers })
    }

    /// Makes every wait inside onesided poll this endpoint too while the hook lives, as
    /// they poll onesided's own: a target waiting in the harness then answers both alike.
    /// Held only while this baseline runs (`Impls::run`): each poll of the hook is a
    /// system call more in every wait of onesided's, which onesided's own rounds need not
    /// pay. (Most of what onesided's cells lost in jobs with the baseline was the progress
    /// thread's hand-over after the baseline's rounds, which the warm-up now absorbs:
    /// `bench::WARMUP_MIN`.)
    pub fn served_while_waiting(&self) -> onesided::WaitHook {
        let polled = Arc::clone(&self.ep);
        onesided::add_wait_hook(Arc::new(move || {
            polled.app_polled();
            polled.progress()
        }))
    }

    fn connect(comm: &Comm, ep: &Endpoint) -> BResult<Vec<sys::fi_addr_t>> {
        let names = comm.allgatherv(&ep.name()?)?;
        names
            .iter()
            .map(|name| {
                let mut addr: sys::fi_addr_t = sys::FI_ADDR_UNSPEC;
                // SAFETY: one address of the provider's format; one entry out.
                let rc = unsafe {
                    sys::fi_av_insert(
                        ep.av,
                        name.as_ptr().cast(),
                        1,
                        &mut addr,
                        0,
                        ptr::null_mut(),
                    )
                };
                if rc == 1 {
                    Ok(addr)
                } else {
                    Err(fail("fi_av_insert", i64::from(rc.min(-1))))
                }
            })
            .collect()
    }
}

/// Where a peer's window memory is: address of element 0 and key.
#[derive(Clone, Copy)]
struct Area {
    peer: sys::fi_addr_t,
    addr: u64,
    key: u64,
}

/// An `allocate` window: registered memory of this process and every rank's area.
pub struct RawWin<T: Elem> {
    ep: Arc<Endpoint>,
    comm: Comm,
    mem: Box<[T]>,
    mr: *mut sys::fid_mr,
    areas: Vec<Area>,
    /// The most elements one sum atomic may carry: without and with a result.
    max_count: [usize; 2],
}

// SAFETY: the registration is an owned handle of a thread-safe domain; the memory is ours.
unsafe impl<T: Elem> Sync for RawWin<T> {}

impl<T: Elem> RawWin<T> {
    fn at(&self, target: usize, elem: usize) -> Area {
        let a = self.areas[target];
        Area {
            addr: a.addr + (elem * std::mem::size_of::<T>()) as u64,
            ..a
        }
    }

    fn datatype() -> sys::fi_datatype {
        if T::WIDE {
            sys::fi_datatype_FI_UINT64
        } else {
            sys::fi_datatype_FI_UINT8
        }
    }

    /// Posts an atomic of `op` on `n` elements at `to`, in as many calls as the provider's
    /// largest count needs: `fetch` receives the previous values (fetching and compare
    /// forms), `compare` makes it a compare-and-swap.
    fn atomic(
        &self,
        op: sys::fi_op,
        operand: *const T,
        compare: Option<*const T>,
        fetch: Option<*mut T>,
        n: usize,
        to: Area,
    ) -> BResult<()> {
        let max = self.max_count[usize::from(fetch.is_some())].max(1);
        let mut i = 0;
        while i < n {
            let k = (n - i).min(max);
            let here = Area {
                addr: to.addr + (i * std::mem::size_of::<T>()) as u64,
                ..to
            };
            // SAFETY (pointer arithmetic): `i < n` elements of buffers holding `n`.
            let (o, c, f) = unsafe {
                (
                    operand.add(i),
                    compare.map(|c| c.add(i)),
                    fetch.map(|f| f.add(i)),
                )
            };
            self.atomic_once(op, o, c, f, k, here)?;
            i += k;
        }
        Ok(())
    }

    /// One atomic call of [`RawWin::atomic`].
    fn atomic_once(
        &self,
        op: sys::fi_op,
        operand: *const T,
        compare: Option<*const T>,
        fetch: Option<*mut T>,
        n: usize,
        to: Area,
    ) -> BResult<()> {
        let ioc = |p: *const T| sys::fi_ioc {
            addr: p as *mut c_void,
            count: n,
        };
        let (operand, rma) = (
            ioc(operand),
            sys::fi_rma_ioc {
                addr: to.addr,
                count: n,
                key: to.key,
            },
        );
        let mut desc = [ptr::null_mut::<c_void>()];
        let msg = sys::fi_msg_atomic {
            msg_iov: &operand,
            desc: desc.as_mut_ptr(),
            iov_count: 1,
            addr: to.peer,
            rma_iov: &rma,
            rma_iov_count: 1,
            datatype: Self::datatype(),
            op,
            context: ptr::null_mut(),
            data: 0,
        };
        let flags = u64::from(sys::FI_DELIVERY_COMPLETE);
        let ep = self.ep.ep;
        // SAFETY: the message and buffers outlive the call; the benchmark keeps the
        // operand and result buffers until the flush.
        self.ep.post("fi_atomicmsg", fetch.is_some(), || unsafe {
            match (compare, fetch) {
                (None, None) => sys::fi_atomicmsg(ep, &msg, flags),
                (None, Some(r)) => {
                    let mut res = ioc(r);
                    sys::fi_fetch_atomicmsg(ep, &msg, &mut res, desc.as_mut_ptr(), 1, 0)
                }
                (Some(c), Some(r)) => {
                    let (cmp, mut res) = (ioc(c), ioc(r));
                    let mut cdesc = [ptr::null_mut::<c_void>()];
                    sys::fi_compare_atomicmsg(
                        ep,
                        &msg,
                        &cmp,
                        cdesc.as_mut_ptr(),
                        1,
                        &mut res,
                        desc.as_mut_ptr(),
                        1,
                        0,
                    )
                }
                (Some(_), None) => -(sys::FI_EINVAL as isize),
            }
        })
    }
}

impl<T: Elem> RawWin<T> {
    /// Posts a write of `len` bytes at `buf` to `to` (delivery complete), or a read into
    /// them (`read`), completed by the next flush.
    fn rma(&self, read: bool, buf: *mut c_void, len: usize, to: Area) -> BResult<()> {
        let iov = sys::iovec {
            iov_base: buf,
            iov_len: len,
        };
        let rma = sys::fi_rma_iov {
            addr: to.addr,
            len,
            key: to.key,
        };
        let mut desc = [ptr::null_mut::<c_void>()];
        let msg = sys::fi_msg_rma {
            msg_iov: &iov,
            desc: desc.as_mut_ptr(),
            iov_count: 1,
            addr: to.peer,
            rma_iov: &rma,
            rma_iov_count: 1,
            context: ptr::null_mut(),
            data: 0,
        };
        let ep = self.ep.ep;
        // SAFETY: msg lives across the call; the benchmark keeps the buffer unchanged (a
        // write) or unread (a read) until the flush.
        self.ep.post(
            if read { "fi_readmsg" } else { "fi_writemsg" },
            read,
            || unsafe {
                if read {
                    sys::fi_readmsg(ep, &msg, 0)
                } else {
                    sys::fi_writemsg(ep, &msg, u64::from(sys::FI_DELIVERY_COMPLETE))
                }
            },
        )
    }
}

fn unsupported<T>(what: &str) -> BResult<T> {
    Err(BenchError(format!("{NAME} has no {what}: flush only")))
}

impl<T: Elem> BenchWin<T> for RawWin<T> {
    type Group = ();

    fn group(&self, _ranks: &[usize]) -> BResult<()> {
        Ok(())
    }

    fn put(&self, src: &[T], target: usize, elem: usize) -> BResult<()> {
        let len = std::mem::size_of_val(src);
        self.rma(
            false,
            src.as_ptr().cast_mut().cast(),
            len,
            self.at(target, elem),
        )
    }

    fn get(&self, dst: &mut [T], target: usize, elem: usize) -> BResult<()> {
        let len = std::mem::size_of_val(dst);
        self.rma(true, dst.as_mut_ptr().cast(), len, self.at(target, elem))
    }

    fn acc_sum(&self, src: &[T], target: usize, elem: usize) -> BResult<()> {
        let to = self.at(target, elem);
        self.atomic(sys::fi_op_FI_SUM, src.as_ptr(), None, None, src.len(), to)
    }

    fn get_acc_sum(&self, src: &[T], result: &mut [T], target: usize, elem: usize) -> BResult<()> {
        let to = self.at(target, elem);
        let out = Some(result.as_mut_ptr());
        self.atomic(sys::fi_op_FI_SUM, src.as_ptr(), None, out, src.len(), to)
    }

    fn fetch_add(&self, value: &T, result: &mut T, target: usize, elem: usize) -> BResult<()> {
        let to = self.at(target, elem);
        self.atomic(sys::fi_op_FI_SUM, value, None, Some(result), 1, to)
    }

    fn cas(&self, new: &T, compare: &T, result: &mut T, target: usize, elem: usize) -> BResult<()> {
        let to = self.at(target, elem);
        let op = sys::fi_op_FI_CSWAP;
        self.atomic(op, new, Some(compare as *const T), Some(result), 1, to)
    }

    fn fence(&self) -> BResult<()> {
        unsupported("fence")
    }
    fn post(&self, _: &()) -> BResult<()> {
        unsupported("post")
    }
    fn start(&self, _: &()) -> BResult<()> {
        unsupported("start")
    }
    fn complete(&self) -> BResult<()> {
        unsupported("complete")
    }
    fn wait(&self) -> BResult<()> {
        unsupported("wait")
    }

    /// Marks the start of a flush loop: nothing to acquire.
    fn lock(&self, _exclusive: bool, _target: usize) -> BResult<()> {
        Ok(())
    }
    /// The end of a flush loop: everything completed.
    fn unlock(&self, _target: usize) -> BResult<()> {
        self.ep.flush()
    }
    fn lock_all(&self) -> BResult<()> {
        Ok(())
    }
    fn unlock_all(&self) -> BResult<()> {
        self.ep.flush()
    }

    fn flush(&self, _target: usize) -> BResult<()> {
        self.ep.flush()
    }

    fn sync(&self) -> BResult<()> {
        std::sync::atomic::fence(Ordering::SeqCst);
        Ok(())
    }

    fn read_local(&self, elem: usize, dst: &mut [T]) -> BResult<()> {
        let src = &self.mem[elem..elem + dst.len()];
        for (d, s) in dst.iter_mut().zip(src) {
            // SAFETY: our registered memory; peers' writes completed before the barrier
            // that precedes every read_local of the benchmarks.
            *d = unsafe { ptr::read_volatile(s) };
        }
        Ok(())
    }

    fn write_local(&self, elem: usize, src: &[T]) -> BResult<()> {
        let base = self.mem.as_ptr() as *mut T;
        for (i, &v) in src.iter().enumerate() {
            // SAFETY: our registered memory, written before the barrier that precedes the
            // peers' accesses.
            unsafe { ptr::write_volatile(base.add(elem + i), v) };
        }
        Ok(())
    }

    fn set_thread_scope(&self, _on: bool) -> BResult<bool> {
        Ok(false)
    }

    fn set_order(&self, _on: bool) -> BResult<bool> {
        Ok(false)
    }

    fn free(self) -> BResult<()> {
        self.ep.flush()?;
        self.comm.barrier()?;
        // SAFETY: a live registration, closed once; no peer accesses it after the barrier.
        check("fi_close(mr)", unsafe {
            sys::fi_close(&mut (*self.mr).fid)
        })
    }
}

impl Backend for OfiRaw {
    type Win<T: Elem> = RawWin<T>;

    fn name(&self) -> &str {
        NAME
    }

    fn comm(&self) -> &Comm {
        &self.comm
    }

    fn prefix(&self, ranks: usize) -> BResult<Option<Self>> {
        let me = self.comm.rank();
        let sub = self.comm.split((me < ranks).then_some(0), me)?;
        // Called while this baseline runs: its hook serves the part too.
        Ok(sub.map(|comm| OfiRaw {
            peers: self.peers[..comm.size()].to_vec(),
            comm,
            ep: Arc::clone(&self.ep),
        }))
    }

    type Mem<T: Elem> = ();

    fn memory<T: Elem>(&self, kind: WinKind, _len: usize) -> BResult<()> {
        match kind {
            WinKind::Allocate => Ok(()),
            _ => unsupported("window but allocate"),
        }
    }

    fn window_over<T: Elem>(&self, _kind: WinKind, len: usize, _mem: ()) -> BResult<RawWin<T>> {
        let mem = vec![T::default(); len.max(1)].into_boxed_slice();
        let bytes = std::mem::size_of_val(&mem[..]);
        let access =
            u64::from(sys::FI_READ | sys::FI_WRITE | sys::FI_REMOTE_READ | sys::FI_REMOTE_WRITE);
        let ep = &self.ep;
        // Relaxed: unique numbers only.
        let requested = ep.next_key.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the memory lives in the window, which closes the registration first.
        let mr = unsafe {
            make("fi_mr_reg", |o| {
                let p = mem.as_ptr().cast();
                sys::fi_mr_reg(
                    ep.domain,
                    p,
                    bytes,
                    access,
                    0,
                    requested,
                    0,
                    o,
                    ptr::null_mut(),
                )
            })?
        };
        // SAFETY: a live registration and endpoint.
        unsafe {
            if ep.mr_mode & u64::from(sys::FI_MR_ENDPOINT) != 0 {
                check("fi_mr_bind", sys::fi_mr_bind(mr, &mut (*ep.ep).fid, 0))?;
                check("fi_mr_enable", sys::fi_mr_enable(mr))?;
            }
        }
        // SAFETY: a live registration.
        let key = unsafe { sys::fi_mr_key(mr) };
        let base = if ep.mr_mode & u64::from(sys::FI_MR_VIRT_ADDR) != 0 {
            mem.as_ptr() as u64
        } else {
            0
        };
        let all = self.comm.allgather(&[base, key])?;
        let areas = (0..self.comm.size())
            .map(|r| Area {
                peer: self.peers[r],
                addr: all[2 * r],
                key: all[2 * r + 1],
            })
            .collect();
        let count = |flags: u64| {
            let mut attr = sys::fi_atomic_attr::default();
            // SAFETY: a live domain and a valid out-pointer.
            let rc = unsafe {
                sys::fi_query_atomic(
                    ep.domain,
                    RawWin::<T>::datatype(),
                    sys::fi_op_FI_SUM,
                    &mut attr,
                    flags,
                )
            };
            check("fi_query_atomic", rc).map(|()| attr.count)
        };
        let max_count = [count(0)?, count(sys::FI_FETCH_ATOMIC)?];
        self.comm.barrier()?;
        Ok(RawWin {
            ep: Arc::clone(ep),
            comm: self.comm.clone(),
            mem,
            mr,
            areas,
            max_count,
        })
    }

    fn threads_supported(&self) -> bool {
        false
    }

    fn library_barrier(&self) -> BResult<()> {
        Ok(self.comm.barrier()?)
    }

    fn alltoallv(
        &self,
        _send: &[u64],
        _sendcounts: &[usize],
        _sdispls: &[usize],
        _recv: &mut [u64],
        _recvcounts: &[usize],
        _rdispls: &[usize],
    ) -> BResult<()> {
        unsupported("alltoallv")
    }

    fn known_defect(&self, bench: &str, kind: WinKind) -> Option<&'static str> {
        if !runs(bench) {
            Some("the raw baseline measures transfers only")
        } else if kind != WinKind::Allocate {
            Some("the raw baseline has allocate windows only")
        } else {
            None
        }
    }

    fn supports_sync(&self, sync: SyncMode) -> bool {
        sync == SyncMode::Flush
    }
}
