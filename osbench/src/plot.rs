//! SVG plots of the results (`--plot DIR`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use plotters::element::DashedPathElement;
use plotters::prelude::*;

use crate::report::Record;

/// One line of a plot.
struct Series {
    label: String,
    onesided: bool,
    /// Lines of the same variant (window kind, or implementation) share a color; onesided
    /// is drawn solid with circles, the host MPI dashed with triangles.
    color: usize,
    points: Vec<(f64, f64)>,
}

/// Axis scaling.
#[derive(Clone, Copy, PartialEq)]
enum Scale {
    Linear,
    Log,
}

struct PlotSpec<'a> {
    title: String,
    x_label: &'a str,
    y_label: String,
    x_scale: Scale,
    y_scale: Scale,
    x_bytes: bool,
}

const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

fn bytes_label(v: f64) -> String {
    let b = v.round() as u64;
    if b >= 1 << 20 {
        format!("{}MiB", b >> 20)
    } else if b >= 1 << 10 {
        format!("{}KiB", b >> 10)
    } else {
        format!("{b}B")
    }
}

/// Tick labels without float noise: 0.005, 0.25, 3.5, 120.
fn tick_label(v: f64) -> String {
    let a = v.abs();
    let s = if a == 0.0 {
        "0".to_string()
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.1}")
    } else if a >= 0.001 {
        format!("{v:.4}")
    } else {
        return format!("{v:.0e}");
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

fn range(values: impl Iterator<Item = f64>, scale: Scale) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| v.is_finite() && (scale == Scale::Linear || *v > 0.0)) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    match scale {
        // Whole decades, so that the axis always carries labelled ticks.
        Scale::Log => (
            10f64.powf(lo.log10().floor()),
            10f64.powf((hi * 1.01).log10().ceil()),
        ),
        Scale::Linear => {
            let lo = lo.min(0.0);
            let hi = if hi <= lo { lo + 1.0 } else { hi * 1.1 };
            (lo, hi)
        }
    }
}

fn draw(path: &Path, spec: &PlotSpec, series: &[Series]) -> Result<(), String> {
    let root = SVGBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let (mut x0, mut x1) = range(
        series.iter().flat_map(|s| s.points.iter().map(|p| p.0)),
        spec.x_scale,
    );
    if !spec.x_bytes {
        // Counts: from 0 to one past the largest, so that single points sit inside.
        x0 = 0.0;
        x1 = (x1 / 1.1).ceil() + 1.0;
    }
    let (y0, y1) = range(
        series.iter().flat_map(|s| s.points.iter().map(|p| p.1)),
        spec.y_scale,
    );
    let mut builder = ChartBuilder::on(&root);
    builder
        .caption(&spec.title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(80);
    // The four scale combinations have different coordinate types.
    macro_rules! body {
        ($chart:expr) => {{
            let mut chart = $chart.map_err(|e| e.to_string())?;
            let x_fmt = |v: &f64| {
                if spec.x_bytes {
                    bytes_label(*v)
                } else if v.fract() == 0.0 {
                    format!("{v}")
                } else {
                    // Process and neighbour counts are integers.
                    String::new()
                }
            };
            chart
                .configure_mesh()
                .x_desc(spec.x_label)
                .y_desc(spec.y_label.as_str())
                .x_label_formatter(&x_fmt)
                .y_label_formatter(&|v: &f64| tick_label(*v))
                .label_style(("sans-serif", 14))
                .axis_desc_style(("sans-serif", 16))
                .light_line_style(WHITE.mix(0.0))
                .draw()
                .map_err(|e| e.to_string())?;
            for s in series {
                let color = PALETTE[s.color % PALETTE.len()];
                let style = ShapeStyle {
                    color: color.to_rgba(),
                    filled: true,
                    stroke_width: 2,
                };
                let pts = s.points.clone();
                if s.onesided {
                    chart
                        .draw_series(LineSeries::new(pts.clone(), style))
                        .map_err(|e| e.to_string())?
                        .label(s.label.clone())
                        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], style));
                } else {
                    chart
                        .draw_series(DashedLineSeries::new(pts.clone(), 6, 4, style))
                        .map_err(|e| e.to_string())?
                        .label(s.label.clone())
                        .legend(move |(x, y)| {
                            DashedPathElement::new(vec![(x, y), (x + 24, y)], 6, 4, style)
                        });
                }
                if s.onesided {
                    chart
                        .draw_series(pts.iter().map(|&p| Circle::new(p, 4, style)))
                        .map_err(|e| e.to_string())?;
                } else {
                    chart
                        .draw_series(pts.iter().map(|&p| TriangleMarker::new(p, 5, style)))
                        .map_err(|e| e.to_string())?;
                }
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .label_font(("sans-serif", 13))
                .draw()
                .map_err(|e| e.to_string())?;
        }};
    }
    match (spec.x_scale, spec.y_scale) {
        (Scale::Log, Scale::Log) => body!(builder.build_cartesian_2d(
            (x0..x1)
                .log_scale()
                .base(if spec.x_bytes { 4.0 } else { 10.0 }),
            (y0..y1).log_scale()
        )),
        (Scale::Log, Scale::Linear) => body!(builder.build_cartesian_2d(
            (x0..x1)
                .log_scale()
                .base(if spec.x_bytes { 4.0 } else { 10.0 }),
            y0..y1
        )),
        (Scale::Linear, Scale::Log) => {
            body!(builder.build_cartesian_2d(x0..x1, (y0..y1).log_scale()))
        }
        (Scale::Linear, Scale::Linear) => body!(builder.build_cartesian_2d(x0..x1, y0..y1)),
    }
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}

/// The window kinds of the records `keep` selects, sorted, each once: one plot each.
fn windows_of(records: &[Record], keep: impl Fn(&Record) -> bool) -> Vec<&str> {
    let mut kinds: Vec<&str> = records
        .iter()
        .filter(|r| keep(r))
        .map(|r| r.window.as_str())
        .collect();
    kinds.sort_unstable();
    kinds.dedup();
    kinds
}

/// Lines by label; `variant` picks the color (the same for onesided and the host MPI).
fn series_of<'a>(
    records: impl Iterator<Item = &'a Record>,
    label: impl Fn(&Record) -> String,
    variant: impl Fn(&Record) -> String,
    x: impl Fn(&Record) -> f64,
) -> Vec<Series> {
    let records: Vec<&Record> = records.collect();
    let mut variants: Vec<String> = records.iter().map(|r| variant(r)).collect();
    variants.sort();
    variants.dedup();
    let mut by: BTreeMap<(bool, String), Series> = BTreeMap::new();
    for r in records {
        let l = label(r);
        let v = variant(r);
        // onesided first in the legend.
        let key = (r.imp != "onesided", l.clone());
        by.entry(key)
            .or_insert_with(|| Series {
                label: l,
                onesided: r.imp == "onesided",
                color: variants.iter().position(|x| *x == v).unwrap_or(0),
                points: Vec::new(),
            })
            .points
            .push((x(r), r.value));
    }
    by.into_values()
        .filter(|s| !s.points.is_empty())
        .map(|mut s| {
            s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
            s
        })
        .collect()
}

/// A grouped bar chart: one group per category, one bar per series in each, values on a
/// linear axis from 0 and written above each bar.
fn draw_bars(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    categories: &[String],
    series: &[(String, Vec<f64>)],
) -> Result<(), String> {
    let root = SVGBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let top = series
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.15;
    let n = categories.len();
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(80)
        .build_cartesian_2d(-0.5f64..n as f64 - 0.5, 0f64..top)
        .map_err(|e| e.to_string())?;
    let x_fmt = |v: &f64| {
        let i = v.round();
        if (v - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < n {
            categories[i as usize].clone()
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .x_labels(n.max(1) * 2 + 1)
        .x_label_formatter(&x_fmt)
        .x_desc(x_label)
        .y_desc(y_label)
        .y_label_formatter(&|v: &f64| tick_label(*v))
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 16))
        .disable_x_mesh()
        .draw()
        .map_err(|e| e.to_string())?;
    let width = 0.8 / series.len().max(1) as f64;
    for (k, (label, values)) in series.iter().enumerate() {
        let color = PALETTE[k % PALETTE.len()];
        let x = |i: usize| i as f64 - 0.4 + k as f64 * width;
        chart
            .draw_series(values.iter().enumerate().map(|(i, &v)| {
                Rectangle::new([(x(i), 0.0), (x(i) + width * 0.9, v)], color.filled())
            }))
            .map_err(|e| e.to_string())?
            .label(label.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 16, y + 5)], color.filled()));
        chart
            .draw_series(values.iter().enumerate().map(|(i, &v)| {
                Text::new(
                    tick_label(v),
                    (x(i), v + top * 0.01),
                    ("sans-serif", 12).into_font(),
                )
            }))
            .map_err(|e| e.to_string())?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}

/// Bar charts of the benchmarks that compare variants rather than sizes: `sync-patterns`
/// (blocking vs nonblocking, µs per pattern) and `transactions` (tx/s per pattern and
/// process count).
fn plot_variants(records: &[Record], dir: &Path, written: &mut Vec<PathBuf>) -> Result<(), String> {
    type Category = fn(&Record) -> String;
    type Pick = fn(&Record) -> bool;
    let charts: [(&str, &str, &str, &str, &str, Pick, Category); 3] = [
        (
            "sync-patterns",
            "sync-patterns",
            "sync-patterns: the measured process's time (1 MiB put per epoch, 2 ms delay)",
            "pattern (late-post and late-unlock on 3 processes, the others on 2)",
            "time [us]",
            |r| r.metric == "blocking" || r.metric == "nonblocking",
            |r| r.sync.clone(),
        ),
        (
            "sync-patterns",
            "sync-patterns_reorder",
            "reorder flags (seed 004 Figs. 7-11): the victim epoch, nonblocking epochs",
            "scenario (processes: aaar-lock 4, the others 3)",
            "time [us]",
            |r| r.metric.starts_with("reorder-") && r.role.as_deref() == Some("victim"),
            |r| r.sync.trim_start_matches("reorder-").to_string(),
        ),
        (
            "transactions",
            "transactions",
            "transactions: exclusive-lock updates over all processes",
            "pattern and processes",
            "throughput [tx/s]",
            |_| true,
            |r| format!("{} {}p", r.sync, r.ranks),
        ),
    ];
    for (bench, file, title, x_label, y_label, pick, category) in charts {
        let rs: Vec<&Record> = records
            .iter()
            .filter(|r| r.bench == bench && pick(r))
            .collect();
        if rs.is_empty() {
            continue;
        }
        let mut categories: Vec<String> = Vec::new();
        let mut metrics: Vec<String> = Vec::new();
        for r in &rs {
            let c = category(r);
            if !categories.contains(&c) {
                categories.push(c);
            }
            if !metrics.contains(&r.metric) {
                metrics.push(r.metric.clone());
            }
        }
        let series: Vec<(String, Vec<f64>)> = metrics
            .iter()
            .map(|m| {
                let values = categories
                    .iter()
                    .map(|c| {
                        rs.iter()
                            .find(|r| &r.metric == m && &category(r) == c)
                            .map_or(0.0, |r| r.value)
                    })
                    .collect();
                (m.clone(), values)
            })
            .collect();
        let path = dir.join(format!("{file}.svg"));
        draw_bars(&path, title, x_label, y_label, &categories, &series)?;
        written.push(path);
    }
    Ok(())
}

/// Writes every plot the records allow into `dir`; returns the files written.
pub fn plot_all(records: &[Record], dir: &Path) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut written = Vec::new();
    // Versus message size: one plot per (bench, sync, metric), a line per (impl, window).
    let mut groups: BTreeMap<(String, String, String), Vec<&Record>> = BTreeMap::new();
    for r in records.iter().filter(|r| {
        matches!(r.metric.as_str(), "latency" | "bandwidth" | "overlap")
            && r.bench != "sync-latency"
            && r.bytes > 0
    }) {
        groups
            .entry((r.bench.clone(), r.sync.clone(), r.metric.clone()))
            .or_default()
            .push(r);
    }
    for ((bench, sync, metric), rs) in groups {
        let sizes: std::collections::BTreeSet<u64> = rs.iter().map(|r| r.bytes).collect();
        if sizes.len() < 2 {
            continue;
        }
        let unit = rs[0].unit.clone();
        let series = series_of(
            rs.into_iter(),
            |r| format!("{} {}", r.imp, r.window),
            |r| r.window.clone(),
            |r| r.bytes as f64,
        );
        let path = dir.join(format!("{bench}_{sync}.svg"));
        let spec = PlotSpec {
            title: format!("{bench} ({sync} synchronization)"),
            x_label: "message size",
            y_label: format!("{metric} [{unit}]"),
            x_scale: Scale::Log,
            y_scale: if metric == "overlap" {
                Scale::Linear
            } else {
                Scale::Log
            },
            x_bytes: true,
        };
        draw(&path, &spec, &series)?;
        written.push(path);
    }
    // Synchronization latency versus process count (fence) and neighbours (PSCW): one line
    // per implementation.
    type Pick = fn(&Record) -> bool;
    type Count = fn(&Record) -> f64;
    let versus: [(Pick, Count, &str, &str, &str); 2] = [
        (
            |r| r.bench == "sync-latency" && r.sync == "fence" && r.metric == "latency",
            |r| r.ranks as f64,
            "sync-latency_fence.svg",
            "fence latency vs processes",
            "processes",
        ),
        (
            |r| r.neighbours.is_some(),
            |r| r.neighbours.unwrap_or(0) as f64,
            "sync-latency_pscw.svg",
            "PSCW epoch (post, start, complete, wait) vs ring neighbours",
            "neighbours k",
        ),
    ];
    for (pick, count, file, title, x_label) in versus {
        let rs: Vec<&Record> = records.iter().filter(|r| pick(r)).collect();
        if rs.is_empty() {
            continue;
        }
        let series = series_of(rs.into_iter(), |r| r.imp.clone(), |r| r.imp.clone(), count);
        let path = dir.join(file);
        draw(
            &path,
            &PlotSpec {
                title: title.into(),
                x_label,
                y_label: "latency [us]".into(),
                x_scale: Scale::Linear,
                y_scale: Scale::Log,
                x_bytes: false,
            },
            &series,
        )?;
        written.push(path);
    }
    // Window creation versus process count.
    for (metric, what) in [
        ("create_time", "window creation time"),
        ("rss_delta", "memory per process"),
    ] {
        let rs: Vec<&Record> = records
            .iter()
            .filter(|r| r.bench == "win-create" && r.metric == metric)
            .collect();
        if rs.is_empty() {
            continue;
        }
        let unit = rs[0].unit.clone();
        let bytes = bytes_label(rs[0].bytes as f64);
        let series = series_of(
            rs.into_iter(),
            |r| format!("{} {}", r.imp, r.window),
            |r| r.window.clone(),
            |r| r.ranks as f64,
        );
        let path = dir.join(format!("win-create_{metric}.svg"));
        draw(
            &path,
            &PlotSpec {
                title: format!("{what} ({bytes} window) vs processes"),
                x_label: "processes",
                y_label: format!("{metric} [{unit}]"),
                x_scale: Scale::Linear,
                y_scale: if metric == "rss_delta" {
                    Scale::Linear
                } else {
                    Scale::Log
                },
                x_bytes: false,
            },
            &series,
        )?;
        written.push(path);
    }
    // Threads doing put+flush (seed 000 Figs. 8-9): per window kind, a line per
    // implementation and way of sharing the window.
    for kind in windows_of(records, |r| r.bench == "thread-flush" && r.sync != "mix") {
        let rs = records.iter().filter(|r| {
            r.bench == "thread-flush" && r.sync != "mix" && r.window == kind && r.threads.is_some()
        });
        let series = series_of(
            rs,
            |r| format!("{} {}", r.imp, r.metric),
            |r| r.metric.clone(),
            |r| r.threads.unwrap_or(0) as f64,
        );
        let path = dir.join(format!("thread-flush_{kind}.svg"));
        draw(
            &path,
            &PlotSpec {
                title: format!("8-byte put + flush per thread ({kind} window) vs threads"),
                x_label: "threads per process",
                y_label: "latency [us]".into(),
                x_scale: Scale::Log,
                y_scale: Scale::Log,
                x_bytes: false,
            },
            &series,
        )?;
        written.push(path);
    }
    // thread-flush --mix: the small-flush thread's put + flush vs the streaming threads
    // beside it, a line per implementation and scope (both start at its time alone).
    for kind in windows_of(records, |r| r.bench == "thread-flush" && r.sync == "mix") {
        let small: Vec<&Record> = records
            .iter()
            .filter(|r| {
                r.bench == "thread-flush"
                    && r.sync == "mix"
                    && r.window == kind
                    && r.unit == "us"
                    && r.role.as_deref() != Some("p99")
            })
            .collect();
        let streams_of = |r: &Record| {
            r.pattern
                .as_deref()
                .and_then(|p| p.split_whitespace().next()?.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        // Each scope's line starts at the no-streams point of its implementation.
        let mut points: Vec<Record> = Vec::new();
        for r in &small {
            if r.metric == "no-streams" {
                for scope in ["process-scope", "thread-scope"] {
                    if small
                        .iter()
                        .any(|o| o.imp == r.imp && o.metric == scope && o.role == r.role)
                    {
                        let mut p = (*r).clone();
                        p.metric = scope.into();
                        points.push(p);
                    }
                }
            } else {
                points.push((*r).clone());
            }
        }
        // The mean (what the thread sees over its loop) and the median operation.
        let label = |r: &Record| match &r.role {
            Some(role) => format!("{} {} {role}", r.imp, r.metric),
            None => format!("{} {} mean", r.imp, r.metric),
        };
        // A colour per line.
        let series = series_of(points.iter(), label, label, streams_of);
        let path = dir.join(format!("thread-flush-mix_{kind}.svg"));
        draw(
            &path,
            &PlotSpec {
                title: format!(
                    "8-byte put + flush beside threads streaming 1 MiB puts ({kind} window)"
                ),
                x_label: "streaming threads (4 puts of 1 MiB in flight each)",
                y_label: "latency of the small thread [us]".into(),
                x_scale: Scale::Linear,
                y_scale: Scale::Log,
                x_bytes: false,
            },
            &series,
        )?;
        written.push(path);
    }
    // Seed 001: time per exchange vs bytes per pair, a line per implementation and
    // variant, one plot per pattern and process count.
    let mut cases: Vec<(String, u64)> = records
        .iter()
        .filter(|r| r.bench == "alltoallv")
        .filter_map(|r| Some((r.pattern.clone()?, r.ranks)))
        .collect();
    cases.sort();
    cases.dedup();
    for (pattern, ranks) in cases {
        let rs = records.iter().filter(|r| {
            r.bench == "alltoallv"
                && r.pattern.as_deref() == Some(pattern.as_str())
                && r.ranks == ranks
                && r.unit == "us"
                && !r.metric.starts_with("init-")
        });
        let series = series_of(
            rs,
            |r| format!("{} {}", r.imp, r.metric),
            |r| r.metric.clone(),
            |r| r.bytes as f64,
        );
        let file: String = pattern
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let path = dir.join(format!("alltoallv_{file}_{ranks}.svg"));
        draw(
            &path,
            &PlotSpec {
                title: format!("alltoallv ({pattern}, {ranks} processes): time per exchange"),
                x_label: "message size per pair",
                y_label: "time [us]".into(),
                x_scale: Scale::Log,
                y_scale: Scale::Log,
                x_bytes: true,
            },
            &series,
        )?;
        written.push(path);
    }
    plot_variants(records, dir, &mut written)?;
    Ok(written)
}
