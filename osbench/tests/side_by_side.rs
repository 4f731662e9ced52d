//! osbench under the host `mpiexec` (feature `mpi`): every benchmark runs through onesided
//! and through the host MPI in the same job, and the JSON holds both and the ratios.
//!
//! `ONESIDED_MPIEXEC` names the launcher and its options (default `mpiexec`; Open MPI as
//! root: `mpiexec.openmpi --allow-run-as-root --oversubscribe --bind-to none`).
#![cfg(feature = "mpi")]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn every_benchmark_side_by_side_under_mpiexec() {
    let dir = std::env::temp_dir().join(format!("osbench-mpi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("results.json");
    let launcher = std::env::var("ONESIDED_MPIEXEC").unwrap_or_else(|_| "mpiexec".into());
    let mut words = launcher.split_whitespace();
    let child_dir = dir.clone();
    let mut child = Command::new(words.next().unwrap())
        .args(words)
        .args(["-n", "2", env!("CARGO_BIN_EXE_osbench")])
        .args(["all", "--sizes", "8,4K", "--time-ms", "1", "--warmup", "2"])
        .args(["--create-bytes", "64K", "--busy-ms", "20", "--json"])
        .arg(&json)
        // Files, not pipes: the tables are larger than a pipe buffer, and nobody reads a
        // pipe while the test waits.
        .stdout(Stdio::from(
            std::fs::File::create(dir.join("stdout")).unwrap(),
        ))
        .stderr(Stdio::from(
            std::fs::File::create(dir.join("stderr")).unwrap(),
        ))
        .spawn()
        .expect("mpiexec (set ONESIDED_MPIEXEC)");
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > Duration::from_secs(600) {
            let _ = child.kill();
            panic!("osbench under {launcher} timed out");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = std::fs::read_to_string(child_dir.join("stdout")).unwrap();
    let stderr = std::fs::read_to_string(child_dir.join("stderr")).unwrap();
    assert!(status.success(), "{stdout}\n{stderr}");
    let records: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let records = records.as_array().unwrap();
    for r in records {
        assert!(r["value"].is_number(), "not a number: {r}");
    }
    let host = records
        .iter()
        .map(|r| r["impl"].as_str().unwrap().to_owned())
        .find(|i| i != "onesided")
        .expect("a host-MPI implementation in the results");
    assert!(host == "mpich" || host == "openmpi", "{host}");
    assert!(stdout.contains(&format!("x vs {host}")), "{stdout}");
    let value = |imp: &str, bench: &str, window: &str, sync: &str, metric: &str| {
        records
            .iter()
            .find(|r| {
                r["impl"] == imp
                    && r["bench"] == bench
                    && r["window"] == window
                    && r["sync"] == sync
                    && r["bytes"] == 8
                    && r["metric"] == metric
            })
            .and_then(|r| r["value"].as_f64())
    };
    for window in ["allocate", "create", "create-allocmem", "dynamic", "shared"] {
        for imp in ["onesided", host.as_str()] {
            let v = value(imp, "put-latency", window, "flush", "latency");
            assert!(v.is_some_and(|v| v > 0.0), "{imp} {window}: {v:?}");
        }
        assert!(value(
            &host,
            "put-latency",
            window,
            "flush",
            "speedup_of_onesided_latency"
        )
        .is_some());
    }
    // Seed 001: onesided's plans and the host's MPI_Alltoallv in the same job, the host's
    // persistent MPI_Alltoallv_init (Open MPI 4.1: MPIX_Alltoallv_init), and where each plan
    // overtakes the host's two-sided exchange.
    let alltoallv = |imp: &str, metric: &str| {
        records.iter().any(|r| {
            r["impl"] == imp
                && r["bench"] == "alltoallv"
                && r["pattern"] == "uniform"
                && r["metric"] == metric
                && r["value"].as_f64().is_some_and(|v| v > 0.0)
        })
    };
    for metric in ["persistent-fence", "persistent-lock", "two-sided"] {
        assert!(alltoallv("onesided", metric), "onesided {metric}");
    }
    assert!(alltoallv(&host, "two-sided"), "{host} two-sided");
    assert!(
        alltoallv(&host, "two-sided-persistent"),
        "{host} two-sided-persistent"
    );
    let crossover = format!("crossover-fence-vs-{host}");
    assert!(
        records.iter().any(|r| r["impl"] == "onesided"
            && r["metric"] == crossover.as_str()
            && (r["unit"] == "bytes" || r["unit"] == "never")),
        "{crossover}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
