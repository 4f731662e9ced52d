//! `osrun` — start a onesided job on this node.
//!
//! ```text
//! osrun -n 4 [--timeout 60] [--prefix] target/release/examples/ring [ARGS...]
//! ```
//!
//! Starts N ranks of PROGRAM that find each other through the `local` bootstrap. The exit
//! status is non-zero when any rank fails; the first rank that panics, exits non-zero or is
//! killed takes the whole job down (named in a message on stderr), and no shared-memory
//! segment of the job remains in /dev/shm afterwards.
//!
//! `--nodes K` splits the ranks over K virtual nodes: each has its own shared memory, and
//! windows reach the other nodes through the network (feature `ofi`). With
//! `--node-wrapper WRAPPER`, `osrun` starts one agent per node as `WRAPPER NODE osrun ...`
//! (the wrapper can put the node in its own network and mount namespaces); the agent starts
//! the node's ranks and relays their exits to the other nodes.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use onesided::launch::{launch, LaunchSpec, Output};

/// Launch a onesided job of N ranks on this node.
#[derive(Debug, Parser)]
#[command(name = "osrun", version, about, long_about = None)]
struct Args {
    /// Number of ranks.
    #[arg(short = 'n', long = "np", value_name = "N")]
    ranks: usize,

    /// Split the ranks over K virtual nodes of this machine (consecutive blocks): windows
    /// reach ranks of other virtual nodes through the network, as across real nodes.
    #[arg(long, value_name = "K", default_value_t = 1)]
    nodes: usize,

    /// With --nodes K: start each node's ranks through `WRAPPER NODE OSRUN ARGS...`, which
    /// sets the node up (e.g. its own network and mount namespace) and executes the rest;
    /// that node's agent creates the node's shared memory and relays exits. Collectives
    /// cross nodes through a Unix socket under $TMPDIR, data through the network.
    #[arg(long, value_name = "WRAPPER")]
    node_wrapper: Option<PathBuf>,

    /// (Internal) Run as the agent of this node of a job started with --node-wrapper.
    #[arg(long, value_name = "NODE", hide = true, requires_all = ["hub", "job"])]
    agent_node: Option<usize>,

    /// (Internal) The job's hub (with --agent-node).
    #[arg(long, value_name = "ADDR", hide = true)]
    hub: Option<String>,

    /// (Internal) The job id (with --agent-node).
    #[arg(long, value_name = "ID", hide = true)]
    job: Option<String>,

    /// Fail the job (exit status 124) when it runs longer than S seconds.
    #[arg(long, value_name = "S")]
    timeout: Option<f64>,

    /// Refuse jobs of more ranks than this (the boot segment grows with the square of the
    /// rank count).
    #[arg(long, value_name = "N", default_value_t = onesided::launch::DEFAULT_MAX_RANKS)]
    max_ranks: usize,

    /// Prefix every output line with `[rank] `.
    #[arg(short = 'p', long)]
    prefix: bool,

    /// Program every rank runs.
    #[arg(value_name = "PROGRAM")]
    program: PathBuf,

    /// Arguments of the program.
    #[arg(
        value_name = "ARGS",
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    args: Vec<OsString>,
}

fn main() {
    let args = Args::parse();
    if args.ranks == 0 {
        eprintln!("osrun: -n must be at least 1");
        std::process::exit(2);
    }
    if args.nodes == 0 || args.nodes > args.ranks {
        eprintln!(
            "osrun: --nodes must be between 1 and the number of ranks ({}), not {}",
            args.ranks, args.nodes
        );
        std::process::exit(2);
    }
    let interrupt = Arc::new(AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        if let Err(e) = signal_hook::flag::register(sig, Arc::clone(&interrupt)) {
            eprintln!("osrun: cannot handle signal {sig}: {e}");
        }
    }
    let mut spec = LaunchSpec::new(args.ranks, args.program);
    spec.args = args.args;
    spec.max_ranks = args.max_ranks;
    spec.nodes = args.nodes;
    spec.timeout = match args.timeout.map(|s| (s, Duration::try_from_secs_f64(s))) {
        Some((s, Ok(t))) if s > 0.0 => Some(t),
        Some((s, _)) => {
            eprintln!(
                "osrun: --timeout must be a positive number of seconds up to {}, not {s}",
                Duration::MAX.as_secs()
            );
            std::process::exit(2);
        }
        None => None,
    };
    spec.output = if args.prefix {
        Output::Prefixed
    } else {
        Output::Inherit
    };
    spec.interrupt = Some(interrupt);
    if let (Some(node), Some(hub), Some(job)) = (args.agent_node, &args.hub, &args.job) {
        match onesided::launch::run_node(&spec, job, node, hub) {
            Ok(report) => std::process::exit(report.exit_code()),
            Err(e) => {
                eprintln!("osrun (agent of node {node}): {e}");
                std::process::exit(1);
            }
        }
    }
    if let Some(wrapper) = args.node_wrapper {
        let agent = match std::env::current_exe() {
            Ok(exe) => exe,
            Err(e) => {
                eprintln!("osrun: cannot find its own executable for the node agents: {e}");
                std::process::exit(1);
            }
        };
        spec.node_agents = Some(onesided::launch::NodeAgents { wrapper, agent });
    }
    match launch(&spec) {
        Ok(report) => std::process::exit(report.exit_code()),
        Err(e) => {
            eprintln!("osrun: {e}");
            std::process::exit(1);
        }
    }
}
