//! osbench end to end: every benchmark runs on 2 ranks (launched like `osrun -n 2`), moves
//! and validates data, and writes JSON that follows the schema and readable SVG plots.

mod common;

use std::time::Duration;

use onesided::launch::{launch, LaunchSpec, Output};

fn run_osbench(ranks: usize, args: &[&str]) -> (String, String) {
    common::run_osbench(ranks, 1, args)
}

#[test]
fn every_benchmark_runs_and_writes_schema_json_and_plots() {
    let dir = std::env::temp_dir().join(format!("osbench-test-{}", std::process::id()));
    let json = dir.join("results.json");
    let plots = dir.join("plots");
    std::fs::create_dir_all(&dir).unwrap();
    let (stdout, _) = run_osbench(
        2,
        &[
            "all",
            "--sizes",
            "8,4K",
            "--time-ms",
            "1",
            "--warmup",
            "2",
            "--create-bytes",
            "64K",
            "--busy-ms",
            "20",
            "--json",
            json.to_str().unwrap(),
            "--plot",
            plots.to_str().unwrap(),
        ],
    );
    for bench in [
        "put-latency",
        "get-latency",
        "acc-latency",
        "get-acc-latency",
        "fop-latency",
        "cas-latency",
        "put-bw",
        "get-bw",
        "bibw",
        "msg-rate",
        "overlap",
        "sync-latency",
        "win-create",
        "sync-patterns",
        "transactions",
        "nb-issue",
        "thread-flush",
        "progress",
        "order-flag",
        "notify-latency",
        "alltoallv",
    ] {
        assert!(
            stdout.contains(&format!("== {bench} ==")),
            "no table for {bench}:\n{stdout}"
        );
    }
    let text = std::fs::read_to_string(&json).unwrap();
    let records: serde_json::Value = serde_json::from_str(&text).unwrap();
    let records = records.as_array().expect("a JSON array");
    assert!(records.len() > 100, "{} records", records.len());
    let keys = [
        "bench", "impl", "window", "sync", "bytes", "ranks", "metric", "value", "unit",
    ];
    // Optional fields DESIGN.md allows (consumers ignore them when unknown).
    let optional = ["threads", "delay_us", "role", "stat", "pattern", "pending"];
    for r in records {
        let o = r.as_object().expect("object");
        for k in o.keys() {
            assert!(
                keys.contains(&k.as_str()) || optional.contains(&k.as_str()),
                "unknown field {k} in {r}"
            );
        }
        for k in keys {
            assert!(o.contains_key(k), "{k} missing in {r}");
        }
        assert!(o["bytes"].is_u64() && o["ranks"].is_u64(), "{r}");
        assert!(o["value"].is_f64() || o["value"].is_u64(), "{r}");
        assert_eq!(o["impl"], "onesided");
    }
    let has = |bench: &str, window: &str, sync: &str, metric: &str| {
        records.iter().any(|r| {
            r["bench"] == bench
                && r["window"] == window
                && r["sync"] == sync
                && r["metric"] == metric
        })
    };
    for window in ["allocate", "create", "create-allocmem", "dynamic", "shared"] {
        for sync in ["flush", "lock", "lock_all", "fence", "pscw"] {
            assert!(
                has("put-latency", window, sync, "latency"),
                "{window} {sync}"
            );
            assert!(
                has("put-latency", window, sync, "model_a"),
                "{window} {sync}"
            );
            assert!(
                has("put-latency", window, sync, "model_b"),
                "{window} {sync}"
            );
        }
        assert!(has("win-create", window, "none", "create_time"));
        assert!(has("win-create", window, "none", "rss_delta"));
    }
    // Seed 004 patterns that need 2 processes (late-post and late-unlock need 3), both
    // styles, and the close call while the peer is 50 ms late.
    for sync in ["late-complete", "early-fence", "wait-at-fence"] {
        for metric in ["blocking", "nonblocking"] {
            assert!(
                has("sync-patterns", "allocate", sync, metric),
                "{sync} {metric}"
            );
        }
    }
    assert!(has(
        "sync-patterns",
        "allocate",
        "late-complete",
        "nonblocking-close-call"
    ));
    for sync in ["uniform", "hotspot"] {
        for metric in ["blocking", "nonblocking", "nonblocking-aaar"] {
            assert!(
                has("transactions", "allocate", sync, metric),
                "{sync} {metric}"
            );
        }
    }
    // Issue rate behind 10, 1000 and 10000 queued epochs (validated counts).
    for pending in [10u64, 1000, 10_000] {
        assert!(
            records.iter().any(|r| r["bench"] == "nb-issue"
                && r["metric"] == "calls-per-s"
                && r["pending"] == pending
                && r["value"].as_f64().is_some_and(|v| v > 0.0)),
            "nb-issue {pending}"
        );
    }
    // Seed 000 Figs. 4 and 12: memory-handle windows in the latency tables, and the cycle.
    for bench in ["put-latency", "get-latency", "acc-latency"] {
        for sync in ["flush", "lock"] {
            assert!(has(bench, "memhandle", sync, "latency"), "{bench} {sync}");
        }
    }
    assert!(has("put-latency", "memhandle", "flush", "create-put-free"));
    // Seed 000 Figs. 8-9: every way of sharing, 1 to 8 threads, every window kind.
    for window in ["allocate", "create", "create-allocmem", "dynamic", "shared"] {
        for metric in [
            "process-scope",
            "thread-scope",
            "mutex",
            "process-scope-ordered",
        ] {
            for threads in [1u64, 2, 4, 8] {
                assert!(
                    records.iter().any(|r| r["bench"] == "thread-flush"
                        && r["window"] == window
                        && r["metric"] == metric
                        && r["threads"] == threads),
                    "thread-flush {window} {metric} {threads}"
                );
            }
        }
    }
    // Seed 000 Fig. 5: attentive and busy target, every window kind.
    for window in ["allocate", "create", "create-allocmem", "dynamic", "shared"] {
        for delay in [0.0, 20_000.0] {
            assert!(
                records.iter().any(|r| r["bench"] == "progress"
                    && r["window"] == window
                    && r["metric"] == "latency"
                    && r["delay_us"].as_f64() == Some(delay)
                    && r["value"].as_f64().is_some_and(|v| v > 0.0)),
                "progress {window} {delay}"
            );
        }
    }
    // Seed 000 Figs. 10-11 and notified RMA against flush + flag.
    for window in ["allocate", "create"] {
        for metric in ["put-flush-flag", "put-flag-unordered", "put-flag-ordered"] {
            assert!(
                has("order-flag", window, "flush", metric),
                "{window} {metric}"
            );
        }
        for metric in ["flush-flag", "notify"] {
            assert!(
                has("notify-latency", window, "lock_all", metric),
                "{window} {metric}"
            );
        }
    }
    // Seed 001: every plan, its init cost and break-even, the baselines, every pattern.
    for pattern in ["uniform", "powerlaw", "laplace3d"] {
        let rec = |metric: &str| {
            records.iter().find(|r| {
                r["bench"] == "alltoallv" && r["pattern"] == pattern && r["metric"] == metric
            })
        };
        for variant in ["fence", "hierarchical", "lock", "auto"] {
            let t = rec(&format!("persistent-{variant}")).expect("persistent time");
            assert!(t["value"].as_f64().unwrap() > 0.0, "{t}");
            assert!(
                rec(&format!("init-{variant}")).is_some(),
                "{pattern} init-{variant}"
            );
            let n = rec(&format!("breakeven-{variant}")).expect("break-even");
            assert!(
                (n["unit"] == "iterations" && n["value"].as_f64().unwrap() >= 1.0)
                    || (n["unit"] == "never" && n["value"].as_f64() == Some(0.0)),
                "{n}"
            );
        }
        assert!(rec("rma-oneshot").is_some(), "{pattern} rma-oneshot");
        assert!(rec("two-sided").is_some(), "{pattern} two-sided");
    }
    for call in [
        "lock_shared",
        "lock_exclusive",
        "unlock",
        "lock_all",
        "flush",
        "sync",
        "fence",
    ] {
        assert!(has("sync-latency", "allocate", call, "latency"), "{call}");
    }
    let svgs: Vec<_> = std::fs::read_dir(&plots)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(svgs.len() >= 10, "{svgs:?}");
    for svg in svgs {
        let s = std::fs::read_to_string(&svg).unwrap();
        assert!(s.starts_with("<svg"), "{}", svg.display());
        // Axes are labelled with what they show.
        assert!(
            ["message size", "processes", "neighbours", "threads"]
                .iter()
                .any(|axis| s.contains(axis)),
            "{}",
            svg.display()
        );
        assert!(
            s.contains("[us]")
                || s.contains("[MB/s]")
                || s.contains("[%]")
                || s.contains("[KiB]")
                || s.contains("[tx/s]")
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The seed 004 benchmarks on 4 ranks: every pattern (late-post and late-unlock need 3
/// processes) in both styles, and every reorder scenario of Figs. 7–11 (aaar-lock needs 4)
/// with its flag off and on, victim and origin records.
#[test]
fn sync_patterns_on_four_ranks_cover_every_pattern_and_reorder_scenario() {
    let dir = std::env::temp_dir().join(format!("osbench-sp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("sp.json");
    run_osbench(
        4,
        &[
            "sync-patterns",
            "--iters",
            "3",
            "--json",
            json.to_str().unwrap(),
        ],
    );
    let text = std::fs::read_to_string(&json).unwrap();
    let records: serde_json::Value = serde_json::from_str(&text).unwrap();
    let records = records.as_array().expect("a JSON array");
    let has = |sync: &str, metric: &str, role: &str| {
        records.iter().any(|r| {
            r["bench"] == "sync-patterns"
                && r["sync"] == sync
                && r["metric"] == metric
                && r["role"] == role
                && r["value"].as_f64().is_some_and(|v| v > 0.0)
        })
    };
    for (sync, role) in [
        ("late-post", "origin"),
        ("late-complete", "target"),
        ("early-fence", "target"),
        ("wait-at-fence", "target"),
        ("late-unlock", "origin"),
    ] {
        for metric in ["blocking", "nonblocking"] {
            assert!(has(sync, metric, role), "{sync} {metric}");
        }
    }
    for sync in [
        "reorder-aaar-pscw",
        "reorder-aaar-lock",
        "reorder-aaer",
        "reorder-eaer",
        "reorder-eaar",
    ] {
        for metric in ["reorder-off", "reorder-on"] {
            for role in ["victim", "origin"] {
                assert!(has(sync, metric, role), "{sync} {metric} {role}");
            }
        }
    }
    // What the progress thread buys while the origin computes: measured without, then with.
    for metric in ["off", "on"] {
        assert!(has("progress-thread", metric, "target"), "{metric}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `alltoallv --matrix FILE`: the sparsity of a Matrix Market file (written here) defines
/// an irregular pattern named after the file, on 3 ranks.
#[test]
fn alltoallv_takes_its_pattern_from_a_matrix_file() {
    let dir = std::env::temp_dir().join(format!("osbench-a2a-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let matrix = dir.join("band.mtx");
    // A 30x30 band matrix: each row touches its neighbours up to 4 columns away.
    let mut text = String::from("%%MatrixMarket matrix coordinate real general\n");
    let entries: Vec<(usize, usize)> = (1..=30usize)
        .flat_map(|i| (i.saturating_sub(4).max(1)..=(i + 4).min(30)).map(move |j| (i, j)))
        .collect();
    text += &format!("30 30 {}\n", entries.len());
    for (i, j) in &entries {
        text += &format!("{i} {j} 1.0\n");
    }
    std::fs::write(&matrix, text).unwrap();
    let json = dir.join("a2a.json");
    run_osbench(
        3,
        &[
            "alltoallv",
            "--sizes",
            "1K",
            "--time-ms",
            "1",
            "--matrix",
            matrix.to_str().unwrap(),
            "--json",
            json.to_str().unwrap(),
        ],
    );
    let records: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let records = records.as_array().unwrap();
    for metric in [
        "persistent-fence",
        "persistent-lock",
        "rma-oneshot",
        "two-sided",
    ] {
        assert!(
            records.iter().any(|r| r["pattern"] == "band.mtx"
                && r["metric"] == metric
                && r["ranks"] == 3
                && r["value"].as_f64().is_some_and(|v| v > 0.0)),
            "{metric}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn one_process_is_an_error_not_a_hang() {
    let mut spec = LaunchSpec::new(1, env!("CARGO_BIN_EXE_osbench"));
    spec.args = vec!["put-latency".into()];
    spec.timeout = Some(Duration::from_secs(60));
    spec.output = Output::Capture;
    let report = launch(&spec).expect("launch");
    assert!(report.failure.is_some());
    let err = String::from_utf8_lossy(&report.output[0].stderr).into_owned();
    assert!(err.contains("at least 2 processes"), "{err}");
}

/// `thread-flush --mix` (seed 000's thread scope where it pays): every scope beside 1 and 2
/// streaming threads on both default window kinds, the streamed megabytes checked by the
/// benchmark itself (it fails on a wrong word), and the plot drawn.
#[test]
fn thread_flush_mix_reports_every_scope_and_the_streams() {
    let dir = std::env::temp_dir().join(format!("osbench-mix-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("mix.json");
    let plots = dir.join("plots");
    run_osbench(
        2,
        &[
            "thread-flush",
            "--mix",
            "--streams",
            "1,2",
            "--time-ms",
            "30",
            "--json",
            json.to_str().unwrap(),
            "--plot",
            plots.to_str().unwrap(),
        ],
    );
    let records: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let value = |window: &str, metric: &str, pattern: &str, unit: &str| {
        records
            .iter()
            .find(|r| {
                r["bench"] == "thread-flush"
                    && r["sync"] == "mix"
                    && r["window"] == window
                    && r["metric"] == metric
                    && r["pattern"] == pattern
                    && r["unit"] == unit
            })
            .and_then(|r| r["value"].as_f64())
    };
    for window in ["allocate", "create"] {
        let alone = value(window, "no-streams", "no streams", "us");
        assert!(alone.is_some_and(|v| v > 0.0), "{window}: {records:?}");
        for pattern in [
            "1 stream of 4 x 1 MiB in flight",
            "2 streams of 4 x 1 MiB in flight",
        ] {
            for metric in ["process-scope", "thread-scope"] {
                assert!(
                    value(window, metric, pattern, "us").is_some_and(|v| v > 0.0),
                    "{window} {metric} {pattern}"
                );
                assert!(
                    value(window, metric, pattern, "MB/s").is_some_and(|v| v > 0.0),
                    "{window} {metric} {pattern} streams"
                );
            }
        }
        let svg =
            std::fs::read_to_string(plots.join(format!("thread-flush-mix_{window}.svg"))).unwrap();
        assert!(svg.contains("streaming threads") && svg.contains("thread-scope"));
    }
    // The mix leaves the other thread-flush cells alone.
    assert!(records
        .iter()
        .all(|r| r["sync"] == "mix" && r["threads"].is_null()));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sync_latency_reports_single_call_medians_with_p50() {
    let dir = std::env::temp_dir().join(format!("osbench-sync-p50-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("sync.json");
    run_osbench(
        2,
        &[
            "sync-latency",
            "--p50",
            "--time-ms",
            "5",
            "--json",
            json.to_str().unwrap(),
        ],
    );
    let records: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let value = |sync: &str, metric: &str| {
        records
            .iter()
            .find(|r| {
                r["bench"] == "sync-latency"
                    && r["impl"] == "onesided"
                    && r["sync"] == sync
                    && r["metric"] == metric
            })
            .and_then(|r| r["value"].as_f64())
    };
    for call in [
        "lock_shared",
        "lock_exclusive",
        "unlock",
        "lock_all",
        "unlock_all",
        "fence",
    ] {
        let mean = value(call, "latency").unwrap_or_else(|| panic!("{call}: no mean"));
        let p50 = value(call, "latency-p50").unwrap_or_else(|| panic!("{call}: no p50"));
        // A median of times that are never negative is at most twice their mean (Markov);
        // the clock's cost is subtracted from both, and the loop's mean is of the same
        // calls: a margin of 1 us.
        assert!(
            p50 >= 0.0 && p50 <= 2.0 * mean + 1.0,
            "{call}: p50 {p50} us, mean {mean} us"
        );
    }
    // A fence of two processes waits for the other's signal: never free.
    assert!(value("fence", "latency-p50").is_some_and(|v| v > 0.0));
    let _ = std::fs::remove_dir_all(&dir);
}
