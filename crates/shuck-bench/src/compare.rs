//! `shuck bench compare`: several ramps (one per server) side by side: a Markdown table of the
//! verdicts, and successful TPS and mean latency against the offered rate, one line per server.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::plot::{font, write_svg_and_png, Figure};
use crate::report::BenchReport;
use crate::BenchError;

/// Reads `NAME=FILE` pairs.
pub fn load(pairs: &[String]) -> Result<Vec<(String, BenchReport)>, BenchError> {
    pairs
        .iter()
        .map(|p| {
            let (name, file) = p.split_once('=').ok_or_else(|| BenchError::Option {
                flag: "NAME=FILE",
                reason: format!("{p:?}: expected a name, '=', and a results.json"),
            })?;
            let path = PathBuf::from(file);
            let text = std::fs::read_to_string(&path).map_err(|source| BenchError::Read {
                path: path.clone(),
                source,
            })?;
            let r = serde_json::from_str(&text).map_err(|e| BenchError::BadFile {
                path,
                reason: format!("not a shuck bench JSON ({e})"),
            })?;
            Ok((name.to_string(), r))
        })
        .collect()
}

pub fn table(runs: &[(String, BenchReport)]) -> String {
    let mut o = String::from(
        "| server | verdict: max TPS | at offered rate | mean latency there | peak TPS | resumed |\n|---|---:|---:|---:|---:|---:|\n",
    );
    for (name, r) in runs {
        let v = &r.verdict;
        let f =
            |x: Option<f64>, unit: &str| x.map_or_else(|| "—".into(), |x| format!("{x:.0}{unit}"));
        let _ = writeln!(
            o,
            "| {name} | {} | {} | {} | {:.0} | {:.0}% |",
            v.max_tps.map_or_else(
                || "none passed".into(),
                |x| if v.at_ceiling {
                    format!("≥ {x:.0} (the ramp's ceiling)")
                } else {
                    format!("{x:.0}")
                }
            ),
            f(v.offered_rate, "/s"),
            v.mean_ms
                .map_or_else(|| "—".into(), |m| format!("{m:.1} ms")),
            r.totals.peak_successful_tps,
            100.0 * r.totals.resumption_ratio
        );
    }
    o
}

const COLORS: [RGBColor; 6] = [
    RGBColor(0, 90, 200),
    RGBColor(220, 50, 32),
    RGBColor(0, 150, 60),
    RGBColor(150, 60, 180),
    RGBColor(230, 140, 0),
    RGBColor(90, 90, 90),
];

/// Writes compare-tps and compare-latency, SVG and PNG.
pub fn plots(
    runs: &[(String, BenchReport)],
    dir: &Path,
    title: &str,
) -> Result<Vec<PathBuf>, BenchError> {
    font()?;
    std::fs::create_dir_all(dir).map_err(|source| BenchError::Write {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut out = Vec::new();
    for (name, tps) in [("compare-tps", true), ("compare-latency", false)] {
        write_svg_and_png(&ComparePlot { runs, title, tps }, dir, name, &mut out)?;
    }
    Ok(out)
}

/// Every run's TPS or latency against the offered rate, one line each.
struct ComparePlot<'a> {
    runs: &'a [(String, BenchReport)],
    title: &'a str,
    tps: bool,
}

impl Figure for ComparePlot<'_> {
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<(), String> {
        draw(self.runs, self.title, self.tps, area)
    }
}

fn draw<DB: DrawingBackend>(
    runs: &[(String, BenchReport)],
    title: &str,
    tps: bool,
    area: &DrawingArea<DB, Shift>,
) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    area.fill(&WHITE).map_err(e)?;
    // Offered rate on x for ramps; closed-loop runs have none and are drawn by step number.
    let x_of = |r: &BenchReport, i: usize| r.steps[i].offered_rate.unwrap_or(i as f64);
    let x_max = runs
        .iter()
        .flat_map(|(_, r)| (0..r.steps.len()).map(move |i| x_of(r, i)))
        .fold(1.0, f64::max)
        * 1.05;
    let mut chart = ChartBuilder::on(area);
    chart.margin(12).x_label_area_size(40).y_label_area_size(60);
    if tps {
        let y_max = runs
            .iter()
            .flat_map(|(_, r)| {
                r.steps
                    .iter()
                    .map(|s| s.attempted_tps.max(s.successful_tps))
            })
            .fold(1.0, f64::max)
            * 1.1;
        let mut c = chart
            .caption(format!("{title}: successful TPS"), ("sans-serif", 20))
            .build_cartesian_2d(0.0..x_max, 0.0..y_max)
            .map_err(e)?;
        c.configure_mesh()
            .x_desc("offered rate (connections/s)")
            .y_desc("successful TPS")
            .draw()
            .map_err(e)?;
        for (k, (name, r)) in runs.iter().enumerate() {
            let color = COLORS[k % COLORS.len()];
            c.draw_series(LineSeries::new(
                r.steps
                    .iter()
                    .enumerate()
                    .map(|(i, s)| (x_of(r, i), s.successful_tps)),
                color.stroke_width(2),
            ))
            .map_err(e)?
            .label(name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        }
        c.configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(e)?;
    } else {
        let floor = 0.01;
        let means: Vec<f64> = runs
            .iter()
            .flat_map(|(_, r)| r.steps.iter().filter_map(|s| s.latency_ms.map(|l| l.mean)))
            .collect();
        let limit = runs
            .first()
            .map_or(100.0, |(_, r)| r.verdict.thresholds.max_mean_ms);
        let y_max = means.iter().copied().fold(limit * 2.0, f64::max) * 1.5;
        let y_min = means
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min)
            .clamp(floor, 1.0)
            / 2.0;
        let mut c = chart
            .caption(format!("{title}: mean latency"), ("sans-serif", 20))
            .build_cartesian_2d(0.0..x_max, (y_min..y_max).log_scale())
            .map_err(e)?;
        c.configure_mesh()
            .x_desc("offered rate (connections/s)")
            .y_desc("mean latency (ms, log)")
            .draw()
            .map_err(e)?;
        for (k, (name, r)) in runs.iter().enumerate() {
            let color = COLORS[k % COLORS.len()];
            c.draw_series(LineSeries::new(
                r.steps
                    .iter()
                    .enumerate()
                    .filter_map(|(i, s)| s.latency_ms.map(|l| (x_of(r, i), l.mean.max(floor)))),
                color.stroke_width(2),
            ))
            .map_err(e)?
            .label(name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        }
        c.draw_series(std::iter::once(PathElement::new(
            vec![(0.0, limit), (x_max, limit)],
            BLACK.mix(0.5),
        )))
        .map_err(e)?
        .label(format!("limit {limit} ms"))
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.mix(0.5)));
        c.configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(e)?;
    }
    Ok(())
}
