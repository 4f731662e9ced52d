//! `osbench`: the RMA benchmark suite of onesided.
//!
//! Under `osrun` it measures onesided; built with `--features mpi` and started by
//! `mpiexec`, every benchmark runs twice in the same job — through onesided and through the
//! host MPI's own RMA — and the table shows onesided's speedup.
//!
//! ```text
//! target/release/osrun -n 2 target/release/osbench put-latency --sizes 8,4096
//! mpiexec -n 2 target/mpich/release/osbench all --json results.json --plot plots
//! ```

mod alltoallv;
mod backend;
mod bench;
mod memhandle;
#[cfg(feature = "mpi")]
mod mpi_backend;
#[cfg(feature = "ofi")]
mod ofi_raw;
mod os_backend;
mod patterns;
mod plot;
mod progress;
mod report;
mod signal;
mod threads;

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use backend::{BResult, Backend, BenchError, SyncMode, WinKind};
use bench::{CommOp, Params};
use os_backend::OsBackend;
use report::Record;

/// Benchmarks (`osbench --help` lists them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Bench {
    /// Latency of MPI_Put.
    PutLatency,
    /// Latency of MPI_Get.
    GetLatency,
    /// Latency of MPI_Accumulate (sum of u64).
    AccLatency,
    /// Latency of MPI_Get_accumulate (sum of u64).
    GetAccLatency,
    /// Latency of MPI_Fetch_and_op (sum of one u64).
    FopLatency,
    /// Latency of MPI_Compare_and_swap (one u64).
    CasLatency,
    /// Put bandwidth, 64 puts per synchronization.
    PutBw,
    /// Get bandwidth, 64 gets per synchronization.
    GetBw,
    /// Bidirectional put bandwidth (ranks 0 and 1 put to each other).
    Bibw,
    /// Message rate: 1000 puts of 8 bytes, then one flush.
    MsgRate,
    /// Overlap of computation with a put (\[Gerstenberger13\] §3.1.1).
    Overlap,
    /// Synchronization calls: lock, unlock, lock_all, flush, sync; fence vs processes;
    /// PSCW vs neighbours.
    SyncLatency,
    /// Window creation time and memory per process vs processes, for every window kind.
    WinCreate,
    /// Seed 004's inefficiency patterns, blocking vs nonblocking epochs (onesided only).
    SyncPatterns,
    /// Lock transactions (seed 004 Fig. 12), blocking vs nonblocking (onesided only).
    Transactions,
    /// Rate of nonblocking calls (ilock, accumulate, iunlock) issued behind 10, 1000 and
    /// 10000 epochs queued behind a held lock (onesided only).
    NbIssue,
    /// Put/get/accumulate latency through memory-handle windows, and the whole handle
    /// cycle per put (seed 000 Figs. 4 and 12; onesided only)
    Memhandle,
    /// Threads each doing put+flush: process vs thread scope vs a mutex (seed 000 Figs. 8-9)
    ThreadFlush,
    /// Put+flush while the target is busy outside the library vs attentive (seed 000 Fig. 5)
    Progress,
    /// Put then flag: with a flush between, with mpi_win_order, with neither (seed 000
    /// Figs. 10-11)
    OrderFlag,
    /// Ping-pong latency: put_notify + wait_notify vs put, flush, flag, flush
    NotifyLatency,
    /// Persistent RMA alltoallv plans vs one-shot RMA and two-sided alltoallv (seed 001)
    Alltoallv,
    /// Everything above.
    All,
}

impl Bench {
    fn name(self) -> &'static str {
        match self {
            Bench::PutLatency => "put-latency",
            Bench::GetLatency => "get-latency",
            Bench::AccLatency => "acc-latency",
            Bench::GetAccLatency => "get-acc-latency",
            Bench::FopLatency => "fop-latency",
            Bench::CasLatency => "cas-latency",
            Bench::PutBw => "put-bw",
            Bench::GetBw => "get-bw",
            Bench::Bibw => "bibw",
            Bench::MsgRate => "msg-rate",
            Bench::Overlap => "overlap",
            Bench::SyncLatency => "sync-latency",
            Bench::WinCreate => "win-create",
            Bench::SyncPatterns => "sync-patterns",
            Bench::Transactions => "transactions",
            Bench::NbIssue => "nb-issue",
            Bench::ThreadFlush => "thread-flush",
            Bench::Memhandle => "memhandle",
            Bench::Progress => "progress",
            Bench::OrderFlag => "order-flag",
            Bench::NotifyLatency => "notify-latency",
            Bench::Alltoallv => "alltoallv",
            Bench::All => "all",
        }
    }

    fn comm_op(self) -> Option<CommOp> {
        Some(match self {
            Bench::PutLatency => CommOp::Put,
            Bench::GetLatency => CommOp::Get,
            Bench::AccLatency => CommOp::Acc,
            Bench::GetAccLatency => CommOp::GetAcc,
            Bench::FopLatency => CommOp::Fop,
            Bench::CasLatency => CommOp::Cas,
            _ => return None,
        })
    }

    /// Benchmarks of features only onesided has (run once, also under mpiexec).
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    fn onesided_only(self) -> bool {
        matches!(
            self,
            Bench::SyncPatterns | Bench::Transactions | Bench::NbIssue | Bench::Memhandle
        )
    }

    const EVERY: [Bench; 22] = [
        Bench::PutLatency,
        Bench::GetLatency,
        Bench::AccLatency,
        Bench::GetAccLatency,
        Bench::FopLatency,
        Bench::CasLatency,
        Bench::PutBw,
        Bench::GetBw,
        Bench::Bibw,
        Bench::MsgRate,
        Bench::Overlap,
        Bench::SyncLatency,
        Bench::WinCreate,
        Bench::SyncPatterns,
        Bench::Transactions,
        Bench::NbIssue,
        Bench::ThreadFlush,
        Bench::Memhandle,
        Bench::Progress,
        Bench::OrderFlag,
        Bench::NotifyLatency,
        Bench::Alltoallv,
    ];
}

/// RMA benchmarks of onesided, side by side with the host MPI when started by mpiexec.
#[derive(Debug, Parser)]
#[command(name = "osbench", version)]
struct Cli {
    /// Benchmarks to run.
    #[arg(value_enum, default_value = "all", num_args = 1..)]
    bench: Vec<Bench>,
    /// Window kinds (comma-separated) [default: all kinds].
    #[arg(long, value_enum, value_delimiter = ',')]
    window: Vec<WinKind>,
    /// Synchronization modes (comma-separated) [default: all for latency, flush for
    /// bandwidth].
    #[arg(long, value_enum, value_delimiter = ',')]
    sync: Vec<SyncMode>,
    /// Message sizes in bytes (comma-separated; K and M suffixes) [default: powers of 2
    /// from 1 B to 4 MiB].
    #[arg(long, value_delimiter = ',', value_parser = parse_size)]
    sizes: Vec<usize>,
    /// Timed iterations per measurement (default: as many as fit in --time-ms).
    #[arg(long)]
    iters: Option<u64>,
    /// Time budget of one timed loop, in milliseconds.
    #[arg(long, default_value_t = 20)]
    time_ms: u64,
    /// Warm-up iterations before every timed loop (more where these take less than 2 ms).
    #[arg(long, default_value_t = 10)]
    warmup: u64,
    /// Rounds of the latency, bandwidth and message-rate benchmarks: each round measures every cell
    /// with 1/rounds of --time-ms, onesided and the host MPI taking turns, and the median
    /// round is reported (stat = median), so that a slow phase of a shared machine shifts
    /// one round of one implementation rather than a whole same-run ratio.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    rounds: u32,
    /// Window size of the win-create benchmark in bytes.
    #[arg(long, default_value = "1M", value_parser = parse_size)]
    create_bytes: usize,
    /// Threads per process of the thread-flush benchmark (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    threads: Vec<usize>,
    /// thread-flush: one thread's 8-byte put + flush beside threads that stream 1 MiB puts
    /// to the same target (4 in flight each, a flush after every 4), with process scope,
    /// with thread scope and with no streams [default windows: allocate, create].
    #[arg(long)]
    mix: bool,
    /// Streaming threads of `thread-flush --mix` (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
    streams: Vec<usize>,
    /// How long the target of the progress benchmark is busy outside the library, in
    /// milliseconds (origin operations: one per 10 µs of it unless --iters is given).
    #[arg(long, default_value_t = 1000)]
    busy_ms: u64,
    /// A Matrix Market file (coordinate format) whose sparsity adds an irregular pattern to
    /// the alltoallv benchmark (contiguous block rows per rank).
    #[arg(long, value_name = "FILE")]
    matrix: Option<PathBuf>,
    /// The latency benchmarks also time up to 1000 operations one by one and report their
    /// median (metric latency-p50), beside the loop average; sync-latency reports the median
    /// of its timed loop's lock, unlock, lock_all, unlock_all and fence calls
    #[arg(long)]
    p50: bool,
    /// The bandwidth benchmarks' puts come from a shared buffer the implementation may hold
    /// until the put completes (onesided: Window::put_shared, neither copied nor waited
    /// for; the others read the caller's buffer that late anyway): metric bandwidth-shared
    #[arg(long)]
    shared_buffers: bool,

    /// Measure only onesided, also under mpiexec.
    #[arg(long)]
    onesided_only: bool,
    /// Write every measurement and model as JSON records to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write SVG plots into DIR.
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
}

fn parse_size(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let (num, mul) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        _ => (s, 1),
    };
    let n: usize = num.parse().map_err(|_| format!("not a size: {s:?}"))?;
    if n == 0 {
        return Err("sizes must be positive".into());
    }
    Ok(n * mul)
}

/// One unit of work: a benchmark for one window kind (or for all, where it has no kinds).
#[derive(Debug, Clone, Copy)]
struct Step {
    bench: Bench,
    window: Option<WinKind>,
}

fn plan(cli: &Cli) -> Vec<Step> {
    let benches: Vec<Bench> = if cli.bench.contains(&Bench::All) {
        Bench::EVERY.to_vec()
    } else {
        cli.bench.clone()
    };
    let windows = if cli.window.is_empty() {
        WinKind::ALL.to_vec()
    } else {
        cli.window.clone()
    };
    let mut steps = Vec::new();
    for bench in benches {
        match bench {
            Bench::SyncLatency
            | Bench::WinCreate
            | Bench::SyncPatterns
            | Bench::Transactions
            | Bench::NbIssue
            | Bench::ThreadFlush
            | Bench::Memhandle
            | Bench::Progress
            | Bench::OrderFlag
            | Bench::NotifyLatency
            | Bench::Alltoallv => steps.push(Step {
                bench,
                window: None,
            }),
            _ => steps.extend(windows.iter().map(|&w| Step {
                bench,
                window: Some(w),
            })),
        }
    }
    steps
}

fn params(cli: &Cli, step: &Step) -> Params {
    let sizes = if cli.sizes.is_empty() {
        (0..=22).map(|k| 1usize << k).collect()
    } else {
        let mut s = cli.sizes.clone();
        s.sort_unstable();
        s.dedup();
        s
    };
    let syncs = if !cli.sync.is_empty() {
        cli.sync.clone()
    } else if step.bench.comm_op().is_some() {
        SyncMode::ALL.to_vec()
    } else {
        vec![SyncMode::Flush]
    };
    Params {
        sizes,
        iters: cli.iters,
        budget: Duration::from_millis(cli.time_ms.max(1)),
        warmup: cli.warmup,
        windows: match step.window {
            Some(w) => vec![w],
            // The mix's windows: memory the library allocates, and the program's own.
            None if cli.window.is_empty() && cli.mix && step.bench == Bench::ThreadFlush => {
                vec![WinKind::Allocate, WinKind::Create]
            }
            None if cli.window.is_empty() => WinKind::ALL.to_vec(),
            None => cli.window.clone(),
        },
        syncs,
        create_bytes: cli.create_bytes,
        threads: cli.threads.iter().copied().filter(|&t| t > 0).collect(),
        mix: cli.mix,
        streams: cli.streams.iter().copied().filter(|&t| t > 0).collect(),
        busy: Duration::from_millis(cli.busy_ms),
        matrix: cli.matrix.clone(),
        rounds: cli.rounds,
        p50: cli.p50,
        shared_buffers: cli.shared_buffers,
    }
}

/// The parameters of one round: the time budget split between the rounds.
fn round_params(p: &Params) -> Params {
    Params {
        budget: (p.budget / p.rounds).max(Duration::from_millis(1)),
        ..p.clone()
    }
}

/// True for the benchmarks measured in rounds (see `--rounds`).
fn in_rounds(bench: Bench) -> bool {
    bench.comm_op().is_some()
        || matches!(
            bench,
            Bench::MsgRate | Bench::PutBw | Bench::GetBw | Bench::Bibw
        )
}

/// One record per cell from several rounds of the same step: the median value of each
/// cell (records of every round come in the same order). A cell missing from some round
/// keeps the first round's value.
fn median_of_rounds(mut rounds: Vec<Vec<Record>>) -> Vec<Record> {
    if rounds.len() < 2 {
        return rounds.pop().unwrap_or_default();
    }
    let same = |a: &Record, b: &Record| {
        (
            &a.bench, &a.imp, &a.window, &a.sync, a.bytes, a.ranks, &a.metric,
        ) == (
            &b.bench, &b.imp, &b.window, &b.sync, b.bytes, b.ranks, &b.metric,
        )
    };
    let mut merged = rounds[0].clone();
    for (i, rec) in merged.iter_mut().enumerate() {
        let mut values: Vec<f64> = rounds
            .iter()
            .filter_map(|r| r.get(i))
            .filter(|r| same(r, rec))
            .map(|r| r.value)
            .collect();
        if values.len() == rounds.len() {
            rec.value = bench::median(&mut values);
            rec.stat = Some("median".into());
        }
    }
    merged
}

fn run_step<B: Backend>(b: &B, step: &Step, p: &Params, out: &mut Vec<Record>) -> BResult<()> {
    match step.bench {
        bench if bench.comm_op().is_some() => {
            bench::latency(b, bench.comm_op().expect("comm op"), p, out)
        }
        Bench::PutBw | Bench::GetBw | Bench::Bibw => bench::bandwidth(b, step.bench.name(), p, out),
        Bench::MsgRate => bench::msg_rate(b, p, out),
        Bench::Overlap => bench::overlap(b, p, out),
        Bench::SyncLatency => bench::sync_latency(b, p, out),
        Bench::WinCreate => bench::win_create(b, p, out),
        Bench::SyncPatterns => patterns::sync_patterns(b.comm(), p, out),
        Bench::Transactions => patterns::transactions(b.comm(), p, out),
        Bench::NbIssue => patterns::nb_issue(b.comm(), p, out),
        Bench::ThreadFlush if p.mix => threads::thread_flush_mix(b, p, out),
        Bench::ThreadFlush => threads::thread_flush(b, p, out),
        Bench::Memhandle => memhandle::memhandle(b.comm(), p, out),
        Bench::Progress => progress::progress(b, p, out),
        Bench::OrderFlag => signal::order_flag(b, p, out),
        Bench::NotifyLatency => signal::notify_latency(b, p, out),
        Bench::Alltoallv => alltoallv::alltoallv(b, p, out),
        _ => Ok(()),
    }
}

/// The implementations measured in this job: onesided always; the host MPI when started
/// by `mpiexec` (feature `mpi`); the raw libfabric baseline when the job spans nodes
/// (feature `ofi`).
struct Impls {
    ours: OsBackend,
    #[cfg(feature = "mpi")]
    host: Option<mpi_backend::MpiBackend>,
    #[cfg(feature = "ofi")]
    raw: Option<ofi_raw::OfiRaw>,
}

impl Impls {
    fn onesided(ours: OsBackend) -> Impls {
        Impls {
            ours,
            #[cfg(feature = "mpi")]
            host: None,
            #[cfg(feature = "ofi")]
            raw: None,
        }
    }

    /// Adds the raw network baseline when `world` spans nodes and a planned benchmark runs
    /// it (collective). Only then, and only while the baseline itself runs, is its endpoint
    /// polled by every wait inside onesided (so that a target waiting in the harness
    /// answers it): system calls that would slow onesided's own measurements
    /// ([`ofi_raw::OfiRaw::served_while_waiting`]).
    #[cfg(feature = "ofi")]
    fn with_raw_baseline(mut self, cli: &Cli) -> BResult<Impls> {
        let world = self.ours.comm();
        let spans = (0..world.size())
            .map(|r| world.node_of(r))
            .collect::<Result<Vec<_>, _>>()?
            .windows(2)
            .any(|w| w[0] != w[1]);
        let raw_runs = plan(cli)
            .iter()
            .any(|step| ofi_raw::runs(step.bench.name()));
        if spans && raw_runs && !cli.onesided_only {
            self.raw = Some(ofi_raw::OfiRaw::new(world.clone())?);
        }
        Ok(self)
    }

    fn names(&self) -> Vec<String> {
        #[allow(unused_mut)]
        let mut names = vec![self.ours.name().to_owned()];
        #[cfg(feature = "mpi")]
        if let Some(m) = &self.host {
            names.push(m.name().to_owned());
        }
        #[cfg(feature = "ofi")]
        if let Some(r) = &self.raw {
            names.push(r.name().to_owned());
        }
        names
    }

    /// Runs `step` for every implementation: in `--rounds` turns for the benchmarks measured
    /// in rounds (each implementation in turn per round, the median cell reported), once
    /// otherwise. Ticks once per implementation name, also for one the step skips.
    fn run(&self, step: &Step, p: &Params, out: &mut Vec<Record>, tick: &dyn Fn()) -> BResult<()> {
        type Runner<'a> = Box<dyn Fn(&Params, &mut Vec<Record>) -> BResult<()> + 'a>;
        let ours = &self.ours;
        #[allow(unused_mut)] // without features `mpi` and `ofi`, onesided alone
        let mut runners: Vec<Runner<'_>> = vec![Box::new(move |p, v| run_step(ours, step, p, v))];
        #[cfg(feature = "mpi")]
        if let Some(m) = &self.host {
            if !step.bench.onesided_only() {
                runners.push(Box::new(move |p, v| run_step(m, step, p, v)));
            }
        }
        #[cfg(feature = "ofi")]
        if let Some(r) = &self.raw {
            if ofi_raw::runs(step.bench.name()) {
                runners.push(Box::new(move |p, v| {
                    let _served = r.served_while_waiting();
                    run_step(r, step, p, v)
                }));
            }
        }
        let (rounds, per_round) = if in_rounds(step.bench) {
            (p.rounds, round_params(p))
        } else {
            (1, p.clone())
        };
        let mut results: Vec<Vec<Vec<Record>>> = runners.iter().map(|_| Vec::new()).collect();
        for _ in 0..rounds {
            for (runner, rounds_of) in runners.iter().zip(&mut results) {
                let mut v = Vec::new();
                runner(&per_round, &mut v)?;
                rounds_of.push(v);
            }
        }
        for rounds_of in results {
            out.extend(median_of_rounds(rounds_of));
            tick();
        }
        for _ in runners.len()..self.names().len() {
            tick();
        }
        Ok(())
    }
}

fn run(cli: &Cli, impls: &Impls) -> BResult<()> {
    let world = impls.ours.comm().clone();
    let me = world.rank();
    if world.size() < 2 {
        return Err(BenchError(
            "osbench needs at least 2 processes (osrun -n 2 osbench …)".into(),
        ));
    }
    let steps = plan(cli);
    let names = impls.names();
    let total = (steps.len() * names.len()) as u64;
    let tty = std::io::stderr().is_terminal();
    let bar = if me == 0 && tty {
        let b = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        b.set_style(
            ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} {msg}")
                .expect("template")
                .progress_chars("=> "),
        );
        b
    } else {
        ProgressBar::hidden()
    };
    let mut records = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        let label = format!(
            "{}{}",
            step.bench.name(),
            step.window
                .map(|w| format!(" {}", w.name()))
                .unwrap_or_default()
        );
        bar.set_message(label.clone());
        if me == 0 && !tty {
            eprintln!("[{}/{}] {label}", i + 1, steps.len());
        }
        let p = params(cli, step);
        impls.run(step, &p, &mut records, &|| bar.inc(1))?;
    }
    bar.finish_and_clear();
    world.barrier()?;
    if me != 0 {
        return Ok(());
    }
    let mut models = report::models(&records);
    models.extend(report::alltoallv_crossovers(&records));
    let ratios = report::ratios(&records);
    let mut shown = records.clone();
    shown.extend(models.iter().cloned());
    let stdout = std::io::stdout();
    let mut o = stdout.lock();
    let _ = writeln!(
        o,
        "osbench: {} processes; implementations: {}",
        world.size(),
        names.join(", ")
    );
    #[cfg(feature = "ofi")]
    if let Some(net) = onesided::network() {
        let _ = writeln!(
            o,
            "network: {} at {}, progress thread {} (ONESIDED_PROVIDER, ONESIDED_NET_ADDR or \
             ONESIDED_IFACE, ONESIDED_PROGRESS); ofi-raw on the same",
            net.provider, net.address, net.progress
        );
    }
    let summary = report::summary(&records);
    if !summary.is_empty() {
        let _ = writeln!(o, "\n######## Summary ########");
        let _ = write!(o, "{}", report::table(&summary, &names));
        let _ = writeln!(o, "\n######## All results ########");
    }
    let _ = write!(o, "{}", report::table(&shown, &names));
    let _ = writeln!(
        o,
        "\nmodel_a/model_b: P(s) = a*s + b per communication call (b: latency at the \
         smallest size, a: per-byte cost fitted over the larger sizes, in us/B), \
         P(p) = a*log2(p) + b for fence, P(k) = a*k + b for PSCW, constants (b) for the \
         other synchronization calls; crossover-<plan>-vs-<impl>: smallest bytes per pair \
         from which onesided's persistent alltoallv plan beats <impl>'s two-sided \
         alltoallv at every larger size (uniform pattern); 'x vs' columns: how many times \
         faster onesided is."
    );
    let mut all = shown;
    all.extend(ratios);
    // The host MPI's records say which build of it they measured (`impl` names the family).
    #[cfg(feature = "mpi")]
    if let Some(version) = mpi_backend::library_version() {
        let host = mpi_backend::library_name();
        for r in all.iter_mut().filter(|r| r.imp == host) {
            r.version = Some(version.clone());
        }
    }
    if let Some(path) = &cli.json {
        let mut text = String::from("[\n");
        for (i, r) in all.iter().enumerate() {
            let line = serde_json::to_string(r).map_err(|e| BenchError(e.to_string()))?;
            text.push_str(&line);
            text.push_str(if i + 1 < all.len() { ",\n" } else { "\n" });
        }
        text.push_str("]\n");
        std::fs::write(path, text).map_err(|e| BenchError(format!("{}: {e}", path.display())))?;
        let _ = writeln!(o, "wrote {} records to {}", all.len(), path.display());
    }
    if let Some(dir) = &cli.plot {
        let files = plot::plot_all(&all, dir).map_err(BenchError)?;
        let _ = writeln!(o, "wrote {} plots to {}", files.len(), dir.display());
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = start(&cli);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("osbench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The implementations of a job that onesided's own launcher started.
fn own_job(cli: &Cli, world: &onesided::Comm) -> BResult<Impls> {
    let impls = Impls::onesided(OsBackend::new(world.clone()));
    #[cfg(feature = "ofi")]
    let impls = impls.with_raw_baseline(cli)?;
    let _ = cli;
    Ok(impls)
}

#[cfg(not(feature = "mpi"))]
fn start(cli: &Cli) -> BResult<()> {
    let u = onesided::init()?;
    run(cli, &own_job(cli, u.world())?)
}

#[cfg(feature = "mpi")]
fn start(cli: &Cli) -> BResult<()> {
    use onesided::mpi;
    if !onesided::bootstrap::mpi::launched_by_mpi() {
        let u = onesided::init()?;
        return run(cli, &own_job(cli, u.world())?);
    }
    // Threads share windows only in thread-flush. MPI_THREAD_MULTIPLE makes some MPIs
    // slower on every call, so only a run that names thread-flush asks for it (`all` keeps
    // the host MPI at its single-threaded best and measures thread-flush for onesided).
    let wanted = if cli.bench.contains(&Bench::ThreadFlush) {
        mpi::Threading::Multiple
    } else {
        mpi::Threading::Serialized
    };
    let (mpi_universe, provided) = mpi::initialize_with_threading(wanted)
        .ok_or_else(|| BenchError("MPI is already initialized".into()))?;
    let world = mpi_universe.world();
    let u = onesided::init_mpi(&world)?;
    let ours = OsBackend::new(u.world().clone());
    let mut impls = Impls::onesided(ours);
    if !cli.onesided_only {
        impls.host = Some(mpi_backend::MpiBackend::new(
            &world,
            provided == mpi::Threading::Multiple,
        )?);
    }
    // Virtual nodes under mpiexec (ONESIDED_NODES): the raw network baseline beside.
    #[cfg(feature = "ofi")]
    let impls = impls.with_raw_baseline(cli)?;
    let result = run(cli, &impls);
    if let Err(e) = &result {
        // Windows of the failed benchmark are still open at other processes: finalizing
        // would hang or crash, so end the job the MPI way.
        use onesided::mpi::topology::Communicator;
        eprintln!("osbench: rank {}: {e}", world.rank());
        world.abort(1);
    }
    // Every MPI object is released before the universe finalizes MPI.
    drop(impls);
    drop(u);
    drop(mpi_universe);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_suffixes() {
        assert_eq!(parse_size("8"), Ok(8));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("4M"), Ok(4 << 20));
        assert!(parse_size("0").is_err());
        assert!(parse_size("x").is_err());
    }

    #[test]
    fn plan_expands_all_and_windows() {
        let cli = Cli::parse_from(["osbench", "all"]);
        let steps = plan(&cli);
        // 11 per-window benchmarks x 5 kinds + sync-latency, win-create, sync-patterns,
        // transactions, nb-issue, thread-flush, memhandle, progress, order-flag,
        // notify-latency, alltoallv.
        assert_eq!(steps.len(), 11 * 5 + 11);
        let cli = Cli::parse_from(["osbench", "put-latency", "--window", "allocate,dynamic"]);
        assert_eq!(plan(&cli).len(), 2);
        let p = params(&cli, &plan(&cli)[0]);
        assert_eq!(p.syncs.len(), 5);
        assert_eq!(p.sizes.first(), Some(&1));
        assert_eq!(p.sizes.last(), Some(&(4 << 20)));
        assert_eq!(p.rounds, 3);
        assert_eq!(
            round_params(&p).budget,
            Duration::from_nanos(20_000_000 / 3)
        );
    }

    #[test]
    fn rounds_report_the_median_of_each_cell() {
        let rec = |bytes: usize, value: f64| {
            Record::onesided(
                "put-latency",
                "allocate",
                "flush",
                bytes,
                2,
                "latency",
                value,
                "us",
            )
        };
        let rounds = vec![
            vec![rec(8, 5.0), rec(64, 1.0)],
            vec![rec(8, 1.0), rec(64, 2.0)],
            vec![rec(8, 2.0), rec(64, 9.0)],
        ];
        let merged = median_of_rounds(rounds);
        assert_eq!(merged.len(), 2);
        assert_eq!((merged[0].value, merged[1].value), (2.0, 2.0));
        assert_eq!(merged[0].stat.as_deref(), Some("median"));
        // A cell one round lacks keeps the first round's value, not a median of others.
        let uneven = median_of_rounds(vec![vec![rec(8, 5.0)], vec![rec(64, 1.0)], vec![]]);
        assert_eq!((uneven[0].value, uneven[0].stat.as_deref()), (5.0, None));
    }
}
