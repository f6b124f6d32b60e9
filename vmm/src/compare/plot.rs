//! `compare --plot`: an SVG with the distributions side by side, drawn with
//! plotters: empirical CDFs of CPU 0's loop-exit time and of the skew, one
//! line per variant. The x axes show the body of the distributions (up to
//! 1.25 times the largest 90th percentile); how many rounds lie beyond is in
//! the legend, and the maxima are in the table.

use std::path::Path;

use plotters::prelude::*;

use crate::stats::percentile_sorted;

use super::{CompareReport, MeasuredRound, Metric};

/// Line colours, readable on white (the tab10 palette's first four).
const COLORS: [RGBColor; 4] = [
    RGBColor(214, 39, 40),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
];

/// Width and height of the SVG, pixels.
pub const SIZE: (u32, u32) = (1200, 480);

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}

/// Draws the CDFs of `report`'s variants into the SVG file `path`.
pub fn draw_plot(
    path: &Path,
    report: &CompareReport,
    rounds: &[MeasuredRound],
) -> Result<(), String> {
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let title = format!(
        "tsc-rendezvous compare: {} vCPU(s), {} rounds per variant, seed {} ({} host)",
        report.vcpus,
        report.rounds_per_variant,
        report.seed,
        report.host.kvm_flavor.name()
    );
    let root = root
        .titled(&title, ("sans-serif", 20))
        .map_err(|e| e.to_string())?;
    let panels = root.split_evenly((1, 2));
    let metrics = [Metric::Cpu0ExitLatencyCycles, Metric::SkewCycles];
    for (area, metric) in panels.iter().zip(metrics) {
        // The x axis shows the body of the distributions: up to 1.25 times
        // the largest 90th percentile. Rounds beyond it (delayed by the host
        // scheduler, often 1000 times longer) still count in the CDF, whose
        // curve then ends below 1; the legend says how many.
        let series: Vec<(String, Vec<f64>)> = report
            .variants
            .iter()
            .map(|v| (v.clone(), sorted(metric.values(rounds, v))))
            .filter(|(_, s)| !s.is_empty())
            .collect();
        let lo = series
            .iter()
            .map(|(_, s)| s[0])
            .fold(f64::INFINITY, f64::min);
        let max = series
            .iter()
            .map(|(_, s)| s[s.len() - 1])
            .fold(f64::NEG_INFINITY, f64::max);
        let p90 = series
            .iter()
            .map(|(_, s)| percentile_sorted(s, 90.0))
            .fold(f64::NEG_INFINITY, f64::max);
        let hi = (p90 + (p90 - lo) * 0.25).min(max);
        let (lo, hi) = if lo.is_finite() && hi > lo {
            (lo, hi)
        } else if lo.is_finite() {
            (lo - 1.0, lo + 1.0)
        } else {
            (0.0, 1.0)
        };
        let mut chart = ChartBuilder::on(area)
            .caption(metric.title(), ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(60)
            .build_cartesian_2d(lo..hi, 0.0..1.0)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc(metric.title())
            .y_desc("fraction of rounds <= x (CDF)")
            .x_label_formatter(&|x| format!("{x:.0}"))
            .draw()
            .map_err(|e| e.to_string())?;
        for (i, (name, s)) in series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()].to_rgba();
            let n = s.len() as f64;
            let points = s
                .iter()
                .enumerate()
                .take_while(|(_, &x)| x <= hi)
                .map(|(k, &x)| (x, (k + 1) as f64 / n));
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(2)))
                .map_err(|e| e.to_string())?
                .label(format!(
                    "{name} (n = {}, {} beyond the axis)",
                    s.len(),
                    s.iter().filter(|&&x| x > hi).count()
                ))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|e| e.to_string())?;
    }
    root.present().map_err(|e| e.to_string())
}
