//! osbench across two virtual nodes (feature `ofi`): the transfer benchmarks run through
//! onesided and through the raw libfabric baseline (`ofi-raw`) in the same job, each
//! validating the data it moves, and the header names the provider and progress mode.
//! `cargo test -p osbench --features ofi --test across_nodes`.
#![cfg(feature = "ofi")]

mod common;

#[test]
fn transfers_run_beside_the_raw_baseline() {
    let dir = std::env::temp_dir().join(format!("osbench-nodes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("results.json");
    let (stdout, _) = common::run_osbench(
        2,
        2,
        &[
            "put-latency",
            "get-latency",
            "acc-latency",
            "get-acc-latency",
            "fop-latency",
            "cas-latency",
            "put-bw",
            "msg-rate",
            "--window",
            "allocate",
            "--sync",
            "flush,fence",
            "--sizes",
            "8,96K",
            "--time-ms",
            "20",
            "--rounds",
            "2",
            "--json",
            json.to_str().unwrap(),
        ],
    );
    assert!(
        stdout.contains("implementations: onesided, ofi-raw"),
        "{stdout}"
    );
    assert!(
        stdout.contains("network: tcp;ofi_rxm at 127.0.0.1, progress thread block"),
        "{stdout}"
    );
    let records: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let cells = |imp: &str, bench: &str, sync: &str| {
        records
            .iter()
            .filter(|r| r["impl"] == imp && r["bench"] == bench && r["sync"] == sync)
            .filter(|r| {
                r["metric"] == "latency" || r["metric"] == "bandwidth" || r["metric"] == "rate"
            })
            .count()
    };
    for bench in ["put-latency", "get-latency", "put-bw"] {
        assert_eq!(cells("onesided", bench, "flush"), 2, "{bench}");
        assert_eq!(cells("ofi-raw", bench, "flush"), 2, "{bench}");
        // Only onesided has fence.
        assert_eq!(cells("onesided", bench, "fence"), 2, "{bench}");
        assert_eq!(cells("ofi-raw", bench, "fence"), 0, "{bench}");
    }
    for bench in ["acc-latency", "get-acc-latency"] {
        assert_eq!(cells("ofi-raw", bench, "flush"), 2, "{bench}");
    }
    for bench in ["fop-latency", "cas-latency"] {
        assert_eq!(cells("ofi-raw", bench, "flush"), 1, "{bench}");
    }
    assert_eq!(cells("ofi-raw", "msg-rate", "lock_all"), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `thread-flush --mix` across two nodes: the small-flush thread beside a thread streaming
/// 1 MiB puts (sent from their buffers, `put_shared`), each scope; the benchmark reads every
/// streamed block back through the network and fails on a wrong word.
#[test]
fn thread_flush_mix_moves_and_checks_megabytes_across_nodes() {
    let dir = std::env::temp_dir().join(format!("osbench-mix-nodes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("mix.json");
    common::run_osbench(
        2,
        2,
        &[
            "thread-flush",
            "--mix",
            "--window",
            "allocate",
            "--streams",
            "1",
            "--time-ms",
            "30",
            "--json",
            json.to_str().unwrap(),
        ],
    );
    let records: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    for metric in ["no-streams", "process-scope", "thread-scope"] {
        assert!(
            records.iter().any(|r| r["impl"] == "onesided"
                && r["sync"] == "mix"
                && r["metric"] == metric
                && r["unit"] == "us"
                && r["value"].as_f64().is_some_and(|v| v > 0.0)),
            "{metric}: {records:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
