//! Helpers of the osbench end-to-end tests.

use std::time::Duration;

use onesided::launch::{launch, LaunchSpec, Output};

/// Runs osbench with `args` on `ranks` ranks over `nodes` virtual nodes (as `osrun -n ranks
/// --nodes nodes` would) and returns rank 0's stdout and stderr; panics with every rank's
/// output unless the job succeeds.
pub fn run_osbench(ranks: usize, nodes: usize, args: &[&str]) -> (String, String) {
    let mut spec = LaunchSpec::new(ranks, env!("CARGO_BIN_EXE_osbench"));
    spec.args = args.iter().map(|a| a.into()).collect();
    spec.nodes = nodes;
    spec.timeout = Some(Duration::from_secs(300));
    spec.output = Output::Capture;
    let report = launch(&spec).expect("launch");
    let out = |rank: usize, err: bool| {
        report
            .output
            .get(rank)
            .map(|o| String::from_utf8_lossy(if err { &o.stderr } else { &o.stdout }).into_owned())
            .unwrap_or_default()
    };
    assert!(
        report.failure.is_none(),
        "osbench failed: {:?}\nstdout:\n{}\nstderr:\n{}{}",
        report.failure,
        out(0, false),
        out(0, true),
        out(1, true)
    );
    (out(0, false), out(0, true))
}
