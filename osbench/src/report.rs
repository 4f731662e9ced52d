//! Results: records (the JSON schema), performance models, and the table for people.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::backend::Backend;

/// One measurement, as written to `--json`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Record {
    /// Benchmark name (`put-latency`, …).
    pub bench: String,
    /// Implementation: `onesided`, `mpich`, `openmpi`.
    #[serde(rename = "impl")]
    pub imp: String,
    /// Window kind, or `none`.
    pub window: String,
    /// Synchronization mode or call, or `none`.
    pub sync: String,
    /// Message size in bytes (0 where it does not apply).
    pub bytes: u64,
    /// Processes in the measurement.
    pub ranks: u64,
    /// What was measured (`latency`, `bandwidth`, `model_a`, …).
    pub metric: String,
    /// The value, in `unit`.
    pub value: f64,
    /// Unit of `value`.
    pub unit: String,
    /// PSCW neighbours (also encoded in `metric`); not part of the JSON schema.
    #[serde(skip)]
    pub neighbours: Option<usize>,
    /// Which process was measured (`target`, `origin`, `victim`), where it matters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// A delay injected by the benchmark, in microseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delay_us: Option<f64>,
    /// The statistic `value` is, when not the mean (`median`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stat: Option<String>,
    /// Threads per process that issued operations, where the benchmark varies it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threads: Option<u64>,
    /// The communication pattern (`alltoallv`: `uniform`, `powerlaw`, `laplace3d`, or a
    /// matrix file's name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// Epochs queued behind a held lock while the calls were issued (`nb-issue`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending: Option<u64>,
    /// The host MPI's version (`4.0.2`, `5.0.11`, …) on its own records: tells builds of one
    /// `impl` apart.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

impl Record {
    /// A record of `b`'s measurement over all its processes.
    #[allow(clippy::too_many_arguments)]
    pub fn new<B: Backend>(
        bench: &str,
        b: &B,
        window: &str,
        sync: &str,
        bytes: usize,
        metric: &str,
        value: f64,
        unit: &str,
    ) -> Record {
        let mut r = Record::onesided(
            bench,
            window,
            sync,
            bytes,
            b.comm().size(),
            metric,
            value,
            unit,
        );
        r.imp = b.name().into();
        r
    }

    /// A record of onesided alone (benchmarks the host MPI has no counterpart for).
    #[allow(clippy::too_many_arguments)]
    pub fn onesided(
        bench: &str,
        window: &str,
        sync: &str,
        bytes: usize,
        ranks: usize,
        metric: &str,
        value: f64,
        unit: &str,
    ) -> Record {
        Record {
            bench: bench.into(),
            imp: "onesided".into(),
            window: window.into(),
            sync: sync.into(),
            bytes: bytes as u64,
            ranks: ranks as u64,
            metric: metric.into(),
            value,
            unit: unit.into(),
            neighbours: None,
            role: None,
            delay_us: None,
            stat: None,
            threads: None,
            pattern: None,
            pending: None,
            version: None,
        }
    }

    /// The same record, naming the process that was measured.
    pub fn with_role(mut self, role: &str) -> Record {
        self.role = Some(role.into());
        self
    }

    /// The same record, with the delay the benchmark injected.
    pub fn with_delay_us(mut self, delay_us: f64) -> Record {
        self.delay_us = Some(delay_us);
        self
    }

    /// The same record for `ranks` processes.
    pub fn with_ranks(mut self, ranks: usize) -> Record {
        self.ranks = ranks as u64;
        self
    }

    /// The same record for a PSCW epoch with `k` neighbours.
    pub fn with_neighbours(mut self, k: usize) -> Record {
        self.neighbours = Some(k);
        self.metric = format!("{}_k{k}", self.metric);
        self
    }

    /// True when a larger value is better (rates, bandwidth, overlap).
    pub fn higher_is_better(&self) -> bool {
        matches!(
            self.metric.as_str(),
            "bandwidth" | "bandwidth-shared" | "rate" | "overlap"
        )
    }
}

/// Least-squares fit of `y = a·x + b` minimizing relative errors (weights 1/y²), so that
/// small and large sizes count alike. `None` for fewer than two distinct x.
pub fn fit_linear(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    let pts: Vec<(f64, f64, f64)> = points
        .iter()
        .filter(|(_, y)| *y > 0.0 && y.is_finite())
        .map(|&(x, y)| (x, y, 1.0 / (y * y)))
        .collect();
    let xs_distinct = pts
        .iter()
        .map(|p| p.0.to_bits())
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    if xs_distinct < 2 {
        return None;
    }
    let sw: f64 = pts.iter().map(|p| p.2).sum();
    let sx: f64 = pts.iter().map(|p| p.2 * p.0).sum();
    let sy: f64 = pts.iter().map(|p| p.2 * p.1).sum();
    let sxx: f64 = pts.iter().map(|p| p.2 * p.0 * p.0).sum();
    let sxy: f64 = pts.iter().map(|p| p.2 * p.0 * p.1).sum();
    let det = sw * sxx - sx * sx;
    if det.abs() < f64::MIN_POSITIVE {
        return None;
    }
    let a = (sw * sxy - sx * sy) / det;
    let b = (sxx * sy - sx * sxy) / det;
    Some((a, b))
}

/// The communication model of \[Gerstenberger13\], P(s) = a·s + b: `b` is the latency at the smallest
/// size (start-up cost), `a` the per-byte cost fitted through the other sizes (least squares
/// of P(s) − b = a·s, so the large sizes, where a·s dominates, decide it — the inverse of
/// the asymptotic bandwidth). `None` for fewer than two distinct sizes.
pub fn fit_size_model(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    let mut pts: Vec<(f64, f64)> = points
        .iter()
        .copied()
        .filter(|(x, y)| *x > 0.0 && y.is_finite())
        .collect();
    pts.sort_by(|p, q| p.0.total_cmp(&q.0));
    let (x0, b) = *pts.first()?;
    let rest: Vec<(f64, f64)> = pts.iter().copied().filter(|p| p.0 > x0).collect();
    if rest.is_empty() {
        return None;
    }
    let sxx: f64 = rest.iter().map(|(x, _)| x * x).sum();
    let sxy: f64 = rest.iter().map(|(x, y)| x * (y - b)).sum();
    Some((sxy / sxx, b))
}

fn model_record(template: &Record, metric: &str, value: f64, unit: &str) -> Record {
    Record {
        metric: metric.into(),
        value,
        unit: unit.into(),
        bytes: 0,
        neighbours: None,
        role: None,
        delay_us: None,
        ..template.clone()
    }
}

/// Performance models (\[Gerstenberger13\] §3): `P(s) = a·s + b` for every communication series
/// (bench, impl, window, sync) measured at two or more sizes ([`fit_size_model`]); `P(p) = a·log2(p) + b` for
/// fence; `P(k) = a·k + b` for PSCW; a constant for every other synchronization call.
pub fn models(records: &[Record]) -> Vec<Record> {
    let mut out = Vec::new();
    let mut series: BTreeMap<(String, String, String, String), Vec<&Record>> = BTreeMap::new();
    for r in records.iter().filter(|r| r.metric == "latency") {
        series
            .entry((
                r.bench.clone(),
                r.imp.clone(),
                r.window.clone(),
                r.sync.clone(),
            ))
            .or_default()
            .push(r);
    }
    for ((bench, _, _, sync), rs) in &series {
        let first = rs[0];
        if bench.ends_with("-latency") && bench != "sync-latency" {
            let pts: Vec<(f64, f64)> = rs.iter().map(|r| (r.bytes as f64, r.value)).collect();
            if let Some((a, b)) = fit_size_model(&pts) {
                out.push(model_record(first, "model_a", a, "us/B"));
                out.push(model_record(first, "model_b", b, "us"));
            } else {
                out.push(model_record(first, "model_a", 0.0, "us/B"));
                out.push(model_record(first, "model_b", first.value, "us"));
            }
        } else if bench == "sync-latency" && sync == "fence" {
            let pts: Vec<(f64, f64)> = rs
                .iter()
                .map(|r| ((r.ranks as f64).log2(), r.value))
                .collect();
            match fit_linear(&pts) {
                Some((a, b)) => {
                    out.push(model_record(first, "model_a", a, "us/log2(p)"));
                    out.push(model_record(first, "model_b", b, "us"));
                }
                None => out.push(model_record(first, "model_b", first.value, "us")),
            }
        } else if bench == "sync-latency" {
            out.push(model_record(first, "model_b", first.value, "us"));
        }
    }
    // PSCW epochs by neighbour count.
    let mut pscw: BTreeMap<String, Vec<&Record>> = BTreeMap::new();
    for r in records.iter().filter(|r| r.neighbours.is_some()) {
        pscw.entry(r.imp.clone()).or_default().push(r);
    }
    for rs in pscw.values() {
        let pts: Vec<(f64, f64)> = rs
            .iter()
            .map(|r| (r.neighbours.unwrap_or(0) as f64, r.value))
            .collect();
        let template = Record {
            metric: String::new(),
            ..rs[0].clone()
        };
        match fit_linear(&pts) {
            Some((a, b)) => {
                out.push(model_record(&template, "model_a", a, "us/neighbour"));
                out.push(model_record(&template, "model_b", b, "us"));
            }
            None => out.push(model_record(&template, "model_b", rs[0].value, "us")),
        }
    }
    out
}

/// How many times better onesided is than `other` (time: other/onesided; rate: the
/// inverse).
pub fn speedup(onesided: &Record, other: &Record) -> f64 {
    if onesided.higher_is_better() {
        onesided.value / other.value
    } else {
        other.value / onesided.value
    }
}

/// The row key of a record in the table: everything but the implementation and value.
fn row_key(r: &Record) -> (String, String, String, u64, u64, String) {
    (
        r.bench.clone(),
        r.window.clone(),
        r.sync.clone(),
        r.bytes,
        r.ranks,
        // Records that name the measured process, or the threads that issued the
        // operations, show it next to the metric.
        {
            let metric = match &r.pattern {
                Some(pattern) => format!("{} [{pattern}]", r.metric),
                None => r.metric.clone(),
            };
            let metric = match r.pending {
                Some(p) => format!("{metric} ({p} pending)"),
                None => metric,
            };
            match (&r.role, r.threads, r.delay_us) {
                (Some(role), _, _) => format!("{metric} ({role})"),
                (None, Some(t), None) => format!("{metric} ({t} thr)"),
                // thread-flush with the target away from the library.
                (None, Some(t), Some(_)) => format!("{metric} ({t} thr, target away)"),
                // A delay that varies between rows (progress: how long the target was away).
                (None, None, Some(d)) => format!("{metric} (delay {} ms)", d / 1000.0),
                (None, None, None) => metric,
            }
        },
    )
}

/// Ratio records (metric `speedup_of_onesided`) for every host-MPI record with an onesided
/// counterpart.
pub fn ratios(records: &[Record]) -> Vec<Record> {
    let ours: BTreeMap<_, &Record> = records
        .iter()
        .filter(|r| r.imp == "onesided" && !r.metric.starts_with("model"))
        .map(|r| (row_key(r), r))
        .collect();
    records
        .iter()
        .filter(|r| r.imp != "onesided" && !r.metric.starts_with("model"))
        .filter_map(|r| {
            let o = ours.get(&row_key(r))?;
            let value = speedup(o, r);
            // A ratio of overlaps is no speedup; a zero on either side has no ratio.
            (r.metric != "overlap" && value.is_finite() && value > 0.0).then(|| Record {
                metric: format!("speedup_of_onesided_{}", r.metric),
                value,
                unit: "x".into(),
                ..r.clone()
            })
        })
        .collect()
}

/// Where each of onesided's persistent alltoallv plans starts to beat a two-sided
/// alltoallv (seed 001's crossover), for the `uniform` pattern of `osbench alltoallv`: per
/// process count, plan and implementation `X` whose `two-sided` exchange was measured in the
/// same run, a record `crossover-<plan>-vs-<X>` holding the smallest size (bytes per pair)
/// from which the plan is faster at every larger size measured. When the plan is faster at
/// every size, that is the smallest size measured (the crossover lies at or below it); when
/// it is slower at the largest size, the unit is `never` and the value 0.
pub fn alltoallv_crossovers(records: &[Record]) -> Vec<Record> {
    let uniform = |r: &&Record| r.bench == "alltoallv" && r.pattern.as_deref() == Some("uniform");
    // (ranks, impl) -> bytes -> two-sided µs.
    let mut baselines: BTreeMap<(u64, String), BTreeMap<u64, f64>> = BTreeMap::new();
    // (ranks, plan) -> bytes -> the plan's record.
    let mut plans: BTreeMap<(u64, String), BTreeMap<u64, &Record>> = BTreeMap::new();
    for r in records.iter().filter(uniform) {
        if r.metric == "two-sided" {
            baselines
                .entry((r.ranks, r.imp.clone()))
                .or_default()
                .insert(r.bytes, r.value);
        } else if let Some(plan) = r.metric.strip_prefix("persistent-") {
            plans
                .entry((r.ranks, plan.to_owned()))
                .or_default()
                .insert(r.bytes, r);
        }
    }
    let mut out = Vec::new();
    for ((ranks, plan), by_size) in &plans {
        let Some(any) = by_size.values().next() else {
            continue;
        };
        for ((_, imp), base) in baselines.iter().filter(|((n, _), _)| n == ranks) {
            // Sizes both measured, largest first: walk down while the plan stays ahead.
            let mut crossover = None;
            for (&bytes, r) in by_size.iter().rev() {
                match base.get(&bytes) {
                    Some(&t) if r.value < t => crossover = Some(bytes),
                    Some(_) => break,
                    None => {}
                }
            }
            out.push(Record {
                metric: format!("crossover-{plan}-vs-{imp}"),
                bytes: 0,
                value: crossover.unwrap_or(0) as f64,
                unit: if crossover.is_some() {
                    "bytes"
                } else {
                    "never"
                }
                .into(),
                ..(*any).clone()
            });
        }
    }
    out
}

/// The headline rows: 8-byte latency of every call with flush synchronization, bandwidth at
/// the largest size, message rate, every synchronization call, and window creation at the
/// smallest process count.
pub fn summary(records: &[Record]) -> Vec<Record> {
    let largest = |bench: &str| {
        records
            .iter()
            .filter(|r| r.bench == bench)
            .map(|r| r.bytes)
            .max()
            .unwrap_or(0)
    };
    let fewest_ranks = records
        .iter()
        .filter(|r| r.bench == "win-create")
        .map(|r| r.ranks)
        .min()
        .unwrap_or(0);
    let sync_ranks = records
        .iter()
        .filter(|r| r.bench == "sync-latency")
        .map(|r| r.ranks)
        .max()
        .unwrap_or(0);
    records
        .iter()
        .filter(|r| match r.bench.as_str() {
            "sync-latency" => r.metric.starts_with("latency") && r.ranks == sync_ranks,
            "win-create" => r.metric == "create_time" && r.ranks == fewest_ranks,
            "msg-rate" => r.metric == "rate",
            "overlap" => false,
            b if b.ends_with("-bw") || b == "bibw" => {
                r.metric == "bandwidth" && r.sync == "flush" && r.bytes == largest(b)
            }
            _ => r.metric == "latency" && r.sync == "flush" && r.bytes == 8,
        })
        .cloned()
        .collect()
}

fn human_bytes(b: u64) -> String {
    match b {
        0 => "-".into(),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}K", b >> 10),
        b => b.to_string(),
    }
}

fn human_value(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else if v.abs() >= 0.01 {
        format!("{v:.3}")
    } else {
        format!("{v:.2e}")
    }
}

/// The table for people: one block per benchmark, one row per configuration, one column
/// per implementation, and onesided's speedup over each other implementation.
pub fn table(records: &[Record], impls: &[String]) -> String {
    let mut out = String::new();
    let mut benches: Vec<&str> = Vec::new();
    for r in records {
        if !benches.contains(&r.bench.as_str()) {
            benches.push(&r.bench);
        }
    }
    for bench in benches {
        let mut rows: Vec<(String, String, String, u64, u64, String)> = Vec::new();
        let mut cells: BTreeMap<(_, String), &Record> = BTreeMap::new();
        for r in records
            .iter()
            .filter(|r| r.bench == bench && !r.metric.starts_with("speedup"))
        {
            let k = row_key(r);
            if !rows.contains(&k) {
                rows.push(k.clone());
            }
            cells.insert((k, r.imp.clone()), r);
        }
        let mut header = vec![
            "window".to_string(),
            "sync".into(),
            "bytes".into(),
            "ranks".into(),
            "metric".into(),
            "unit".into(),
        ];
        header.extend(impls.iter().cloned());
        for other in impls.iter().filter(|i| *i != "onesided") {
            header.push(format!("x vs {other}"));
        }
        let mut lines = vec![header];
        for k in &rows {
            let unit = impls
                .iter()
                .find_map(|i| cells.get(&(k.clone(), i.clone())).map(|r| r.unit.clone()))
                .unwrap_or_default();
            let mut line = vec![
                k.1.clone(),
                k.2.clone(),
                human_bytes(k.3),
                k.4.to_string(),
                k.5.clone(),
                unit,
            ];
            for i in impls {
                line.push(
                    cells
                        .get(&(k.clone(), i.clone()))
                        .map(|r| human_value(r.value))
                        .unwrap_or_else(|| "-".into()),
                );
            }
            let ours = cells.get(&(k.clone(), "onesided".to_string()));
            for other in impls.iter().filter(|i| *i != "onesided") {
                let theirs = cells.get(&(k.clone(), other.clone()));
                let ratio = match (ours, theirs) {
                    (Some(o), Some(t)) if !k.5.starts_with("model") && k.5 != "overlap" => {
                        Some(speedup(o, t))
                    }
                    _ => None,
                };
                line.push(match ratio {
                    Some(x) if x.is_finite() && x > 0.0 => format!("{x:.2}"),
                    _ => "-".into(),
                });
            }
            lines.push(line);
        }
        let widths: Vec<usize> = (0..lines[0].len())
            .map(|c| lines.iter().map(|l| l[c].len()).max().unwrap_or(0))
            .collect();
        let _ = writeln!(out, "\n== {bench} ==");
        for (n, l) in lines.iter().enumerate() {
            let cols: Vec<String> = l
                .iter()
                .zip(&widths)
                .enumerate()
                .map(|(c, (s, w))| {
                    if c < 2 || c == 4 || c == 5 {
                        format!("{s:<w$}")
                    } else {
                        format!("{s:>w$}")
                    }
                })
                .collect();
            let _ = writeln!(out, "{}", cols.join("  ").trim_end());
            if n == 0 {
                let total: usize = widths.iter().sum::<usize>() + 2 * (widths.len() - 1);
                let _ = writeln!(out, "{}", "-".repeat(total));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_recovers_a_line() {
        let pts: Vec<(f64, f64)> = [1.0, 8.0, 64.0, 4096.0, 65536.0]
            .iter()
            .map(|&s| (s, 0.16e-3 * s + 1.0))
            .collect();
        let (a, b) = fit_linear(&pts).unwrap();
        assert!((a - 0.16e-3).abs() < 1e-9, "{a}");
        assert!((b - 1.0).abs() < 1e-9, "{b}");
        assert!(fit_linear(&[(8.0, 1.0), (8.0, 2.0)]).is_none());
    }

    fn rec(imp: &str, bench: &str, sync: &str, bytes: u64, ranks: u64, value: f64) -> Record {
        Record {
            bench: bench.into(),
            imp: imp.into(),
            window: "allocate".into(),
            sync: sync.into(),
            bytes,
            ranks,
            metric: "latency".into(),
            value,
            unit: "us".into(),
            neighbours: None,
            role: None,
            delay_us: None,
            stat: None,
            threads: None,
            pattern: None,
            pending: None,
            version: None,
        }
    }

    #[test]
    fn crossover_is_where_a_plan_stays_ahead() {
        let a2a = |imp: &str, metric: &str, bytes: u64, value: f64| Record {
            bench: "alltoallv".into(),
            metric: metric.into(),
            pattern: Some("uniform".into()),
            ..rec(imp, "alltoallv", "none", bytes, 2, value)
        };
        let records = vec![
            a2a("mpich", "two-sided", 1024, 1.0),
            a2a("mpich", "two-sided", 32768, 10.0),
            a2a("mpich", "two-sided", 262144, 50.0),
            a2a("onesided", "two-sided", 1024, 0.1),
            a2a("onesided", "two-sided", 32768, 0.1),
            a2a("onesided", "two-sided", 262144, 0.1),
            // Behind at 1 KiB, ahead from 32 KiB on.
            a2a("onesided", "persistent-fence", 1024, 2.0),
            a2a("onesided", "persistent-fence", 32768, 3.0),
            a2a("onesided", "persistent-fence", 262144, 20.0),
            a2a("onesided", "persistent-lock", 1024, 0.5),
            a2a("onesided", "persistent-lock", 32768, 30.0),
            a2a("onesided", "persistent-lock", 262144, 40.0),
        ];
        let got: BTreeMap<String, (f64, String)> = alltoallv_crossovers(&records)
            .into_iter()
            .map(|r| (r.metric, (r.value, r.unit)))
            .collect();
        let want = |v: f64, u: &str| (v, u.to_owned());
        assert_eq!(got["crossover-fence-vs-mpich"], want(32768.0, "bytes"));
        // Ahead at 1 KiB and 256 KiB but behind at 32 KiB: only the top stretch counts.
        assert_eq!(got["crossover-lock-vs-mpich"], want(262144.0, "bytes"));
        assert_eq!(got["crossover-fence-vs-onesided"], want(0.0, "never"));
        assert_eq!(got.len(), 4);
    }

    #[test]
    fn size_model_is_start_up_plus_per_byte_cost() {
        // 1 µs start-up, 0.16 ns/B (foMPI's put model).
        let pts: Vec<(f64, f64)> = [1.0, 8.0, 64.0, 4096.0, 65536.0, 4194304.0]
            .iter()
            .map(|&s| (s, 0.16e-3 * s + 1.0))
            .collect();
        let (a, b) = fit_size_model(&pts).unwrap();
        assert!((a - 0.16e-3).abs() < 1e-9, "{a}");
        assert!((b - 1.00016).abs() < 1e-9, "{b}");
        assert!(fit_size_model(&[(8.0, 1.0)]).is_none());
    }

    #[test]
    fn models_per_series() {
        let mut rs = Vec::new();
        for s in [8u64, 64, 512] {
            rs.push(rec(
                "onesided",
                "put-latency",
                "flush",
                s,
                2,
                0.001 * s as f64 + 0.5,
            ));
        }
        rs.push(rec("onesided", "sync-latency", "lock_shared", 0, 2, 0.04));
        for p in [2u64, 4, 8] {
            rs.push(rec(
                "onesided",
                "sync-latency",
                "fence",
                0,
                p,
                0.3 * (p as f64).log2(),
            ));
        }
        let m = models(&rs);
        let get = |bench: &str, sync: &str, metric: &str| {
            m.iter()
                .find(|r| r.bench == bench && r.sync == sync && r.metric == metric)
                .map(|r| r.value)
                .unwrap()
        };
        // b: the 8-byte latency; a: the slope through the larger sizes, relative to b.
        let a = 0.001 * (64.0 * 56.0 + 512.0 * 504.0) / (64.0 * 64.0 + 512.0 * 512.0);
        assert!((get("put-latency", "flush", "model_a") - a).abs() < 1e-12);
        assert!((get("put-latency", "flush", "model_b") - 0.508).abs() < 1e-12);
        assert!((get("sync-latency", "lock_shared", "model_b") - 0.04).abs() < 1e-12);
        assert!((get("sync-latency", "fence", "model_a") - 0.3).abs() < 1e-9);
    }

    #[test]
    fn ratios_and_table() {
        let rs = vec![
            rec("onesided", "put-latency", "flush", 8, 2, 0.01),
            rec("mpich", "put-latency", "flush", 8, 2, 0.5),
        ];
        let r = ratios(&rs);
        assert_eq!(r.len(), 1);
        assert!((r[0].value - 50.0).abs() < 1e-9);
        // No ratio where one side measured zero (it would be infinite, null in JSON).
        let zero = vec![
            rec("onesided", "put-latency", "flush", 8, 2, 0.0),
            rec("mpich", "put-latency", "flush", 8, 2, 0.5),
        ];
        assert!(ratios(&zero).is_empty());
        let t = table(&rs, &["onesided".into(), "mpich".into()]);
        assert!(t.contains("x vs mpich"), "{t}");
        assert!(t.contains("50.00"), "{t}");
        let json = serde_json::to_value(&rs[0]).unwrap();
        let keys: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.as_str())
            .collect();
        assert_eq!(
            keys.len(),
            9,
            "bench impl window sync bytes ranks metric value unit: {keys:?}"
        );
        assert_eq!(json["impl"], "onesided");
    }
}
