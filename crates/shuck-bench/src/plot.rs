//! Plots in the style of Bernat's benchmark: attempted/successful/failed TPS over time, and latency over time
//! on a log scale with the verdict's mean-latency limit drawn in. SVG and PNG of each.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::report::{BenchReport, StepReport};
use crate::stats::LatencySummary;
use crate::BenchError;

pub(crate) const SIZE: (u32, u32) = (900, 500);

/// Label, colour, line width and the figure drawn.
type TpsSeries = (&'static str, RGBColor, u32, fn(&StepReport) -> f64);
type LatencySeries = (&'static str, RGBColor, fn(&LatencySummary) -> f64);
const FONT_PATHS: [&str; 3] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
];

/// plotters' ab_glyph backend draws text with a font registered from bytes; we load a system
/// TrueType font once rather than ship one.
pub(crate) fn font() -> Result<(), BenchError> {
    static FONT: OnceLock<Result<(), String>> = OnceLock::new();
    FONT.get_or_init(|| {
        let mut tried: Vec<String> = Vec::new();
        let env = std::env::var("SHUCK_BENCH_FONT").ok();
        for p in env.iter().map(String::as_str).chain(FONT_PATHS) {
            tried.push(p.to_string());
            if let Ok(bytes) = std::fs::read(p) {
                // Registered fonts live as long as the process: leaking the one copy is the way.
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return Ok(());
                }
            }
        }
        Err(tried.join(", "))
    })
    .clone()
    .map_err(|tried| BenchError::NoFont { tried })
}

/// A plot that can be drawn on any plotters backend, so one description gives the SVG and the PNG.
pub(crate) trait Figure {
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<(), String>;
}

/// Writes `<name>.svg` and `<name>.png` of `fig` into `dir`, adding their paths to `out`.
pub(crate) fn write_svg_and_png(
    fig: &impl Figure,
    dir: &Path,
    name: &str,
    out: &mut Vec<PathBuf>,
) -> Result<(), BenchError> {
    let svg = dir.join(format!("{name}.svg"));
    {
        let area = SVGBackend::new(&svg, SIZE).into_drawing_area();
        present(fig.draw(&area), &area, &svg)?;
    }
    out.push(svg);
    let png = dir.join(format!("{name}.png"));
    {
        let area = BitMapBackend::new(&png, SIZE).into_drawing_area();
        present(fig.draw(&area), &area, &png)?;
    }
    out.push(png);
    Ok(())
}

fn present<DB: DrawingBackend>(
    drawn: Result<(), String>,
    area: &DrawingArea<DB, Shift>,
    path: &Path,
) -> Result<(), BenchError> {
    drawn
        .and_then(|()| area.present().map_err(|e| e.to_string()))
        .map_err(|reason| BenchError::Plot {
            path: path.to_path_buf(),
            reason,
        })
}

/// One run's TPS (attempted, successful, failed) or latency over time.
struct RunPlot<'a> {
    report: &'a BenchReport,
    title: &'a str,
    tps: bool,
}

impl Figure for RunPlot<'_> {
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<(), String> {
        if self.tps {
            draw_tps(self.report, self.title, area)
        } else {
            draw_latency(self.report, self.title, area)
        }
    }
}

/// Writes tps.svg, tps.png, latency.svg, latency.png into `dir`; returns their paths.
pub fn write_all(r: &BenchReport, dir: &Path, title: &str) -> Result<Vec<PathBuf>, BenchError> {
    font()?;
    let mut out = Vec::new();
    for (name, tps) in [("tps", true), ("latency", false)] {
        let fig = RunPlot {
            report: r,
            title,
            tps,
        };
        write_svg_and_png(&fig, dir, name, &mut out)?;
    }
    Ok(out)
}

/// Each step's figures are drawn at its middle.
fn mid(s: &StepReport) -> f64 {
    s.start_s + s.duration_s / 2.0
}

fn x_max(r: &BenchReport) -> f64 {
    r.steps
        .last()
        .map_or(1.0, |s| s.start_s + s.duration_s)
        .max(1.0)
}

fn draw_tps<DB: DrawingBackend>(
    r: &BenchReport,
    title: &str,
    area: &DrawingArea<DB, Shift>,
) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    area.fill(&WHITE).map_err(e)?;
    let y_max = r
        .steps
        .iter()
        .map(|s| s.attempted_tps.max(s.successful_tps))
        .fold(1.0, f64::max)
        * 1.1;
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("{title}: transactions per second"),
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..x_max(r), 0.0..y_max)
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc("TPS")
        .draw()
        .map_err(e)?;
    // Attempted is drawn wide and pale so that successful, on top, shows where they coincide.
    let series: [TpsSeries; 3] = [
        ("attempted", RGBColor(120, 160, 255), 6, |s| s.attempted_tps),
        ("successful", RGBColor(0, 150, 0), 2, |s| s.successful_tps),
        ("failed", RED, 2, |s| s.failed_tps),
    ];
    for (label, color, width, f) in series {
        chart
            .draw_series(LineSeries::new(
                r.steps.iter().map(|s| (mid(s), f(s))),
                color.stroke_width(width),
            ))
            .map_err(e)?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(width))
            });
    }
    if let Some(best) = r.verdict.best_step.and_then(|i| r.steps.get(i)) {
        let x = mid(best);
        let grey = RGBColor(90, 90, 90).stroke_width(2);
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(x, 0.0), (x, y_max)],
                grey,
            )))
            .map_err(e)?
            .label(format!("verdict {:.0} TPS", best.successful_tps))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], grey));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(e)?;
    Ok(())
}

fn draw_latency<DB: DrawingBackend>(
    r: &BenchReport,
    title: &str,
    area: &DrawingArea<DB, Shift>,
) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    area.fill(&WHITE).map_err(e)?;
    // A log axis cannot show zero: floor at 10 µs.
    let floor = 0.01;
    let lat: Vec<_> = r
        .steps
        .iter()
        .filter_map(|s| s.latency_ms.map(|l| (mid(s), l)))
        .collect();
    let y_max = lat
        .iter()
        .map(|(_, l)| l.max)
        .fold(r.verdict.thresholds.max_mean_ms * 2.0, f64::max)
        * 1.5;
    let y_min = lat
        .iter()
        .map(|(_, l)| l.p50.min(l.mean))
        .fold(f64::INFINITY, f64::min)
        .clamp(floor, 1.0)
        / 2.0;
    let mut chart = ChartBuilder::on(area)
        .caption(format!("{title}: latency"), ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..x_max(r), (y_min..y_max).log_scale())
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc("latency (ms, log)")
        .draw()
        .map_err(e)?;
    let series: [LatencySeries; 4] = [
        ("mean", BLUE, |l| l.mean),
        ("p50", RGBColor(0, 150, 0), |l| l.p50),
        ("p99", RGBColor(230, 140, 0), |l| l.p99),
        ("max", RED, |l| l.max),
    ];
    for (label, color, f) in series {
        chart
            .draw_series(LineSeries::new(
                lat.iter().map(|(x, l)| (*x, f(l).max(floor))),
                color.stroke_width(2),
            ))
            .map_err(e)?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    let limit = r.verdict.thresholds.max_mean_ms;
    chart
        .draw_series(std::iter::once(PathElement::new(
            vec![(0.0, limit), (x_max(r), limit)],
            BLACK.mix(0.5),
        )))
        .map_err(e)?
        .label(format!("mean limit {limit} ms"))
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.mix(0.5)));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(e)?;
    Ok(())
}
