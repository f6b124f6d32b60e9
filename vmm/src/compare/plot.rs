//! `compare --plot`: an SVG with the distributions side by side, drawn with
//! plotters: empirical CDFs of CPU 0's loop-exit time and of the skew, one
//! line per variant. The x axes show the body of the distributions (they end
//! at 1.25 times the largest 90th percentile, [`x_range`]); how many rounds
//! lie beyond is in the legend ([`legend`]), and the maxima are in the table.
//! The curves come from each variant's bounded distribution ([`PlotData`]):
//! every value while they are kept, every histogram bin after.

use std::borrow::Cow;
use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::stats::distribution::Distribution;
#[cfg(test)]
use crate::stats::percentile_sorted;

use super::{CompareReport, Measured, MeasuredRound, Metric};

/// What a plot is drawn from: each variant's distribution of a metric.
pub trait PlotData {
    /// The distribution of `metric` over `variant`'s rounds (`None`: none).
    fn distribution(&self, variant: &str, metric: Metric) -> Option<Cow<'_, Distribution>>;
}

impl PlotData for Measured {
    fn distribution(&self, variant: &str, metric: Metric) -> Option<Cow<'_, Distribution>> {
        self.tallies
            .tally(variant)
            .map(|t| Cow::Borrowed(metric.of(t)))
    }
}

impl PlotData for [MeasuredRound] {
    fn distribution(&self, variant: &str, metric: Metric) -> Option<Cow<'_, Distribution>> {
        let mut d = Distribution::with_limit(usize::MAX);
        for x in metric.values(self, variant) {
            d.record(x);
        }
        Some(Cow::Owned(d))
    }
}

impl PlotData for Vec<MeasuredRound> {
    fn distribution(&self, variant: &str, metric: Metric) -> Option<Cow<'_, Distribution>> {
        self.as_slice().distribution(variant, metric)
    }
}

/// Line colours, readable on white (the tab10 palette's first four).
const COLORS: [RGBColor; 4] = [
    RGBColor(214, 39, 40),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
];

/// Width and height of the SVG, pixels.
pub const SIZE: (u32, u32) = (1200, 480);

#[cfg(test)]
/// The x range of a panel showing the sorted samples `series`: from the
/// smallest value to 1.25 times the largest 90th percentile (R's type 7), or
/// to the largest value when that is smaller. Rounds delayed by the host
/// scheduler (often 1000 times longer) then do not squash the body of the
/// curves; they still count in the CDF, which ends below 1, and the legend
/// says how many lie beyond ([`legend`]). A degenerate range (one value,
/// no values) is widened to one around it.
pub fn x_range(series: &[&[f64]]) -> (f64, f64) {
    let nonempty = || series.iter().filter(|s| !s.is_empty());
    let lo = nonempty().map(|s| s[0]).fold(f64::INFINITY, f64::min);
    let max = nonempty()
        .map(|s| s[s.len() - 1])
        .fold(f64::NEG_INFINITY, f64::max);
    let p90 = nonempty()
        .map(|s| percentile_sorted(s, 90.0))
        .fold(f64::NEG_INFINITY, f64::max);
    axis(lo, p90, max)
}

/// [`x_range`] of distributions: the same rule on their minima, 90th
/// percentiles and maxima (exact while the values are kept, within the
/// histogram's precision after).
pub fn x_range_of(series: &[&Distribution]) -> (f64, f64) {
    let nonempty = || series.iter().filter(|d| !d.is_empty());
    let lo = nonempty()
        .filter_map(|d| d.min())
        .fold(f64::INFINITY, f64::min);
    let max = nonempty()
        .filter_map(|d| d.max())
        .fold(f64::NEG_INFINITY, f64::max);
    let p90 = nonempty()
        .map(|d| d.percentile(90.0))
        .fold(f64::NEG_INFINITY, f64::max);
    axis(lo, p90, max)
}

/// The axis from the smallest value `lo` to 1.25 times the largest 90th
/// percentile, or to the largest value `max` when that is smaller; a
/// degenerate one widened.
fn axis(lo: f64, p90: f64, max: f64) -> (f64, f64) {
    let hi = (1.25 * p90).min(max);
    if lo.is_finite() && hi > lo {
        (lo, hi)
    } else if lo.is_finite() {
        (lo - 1.0, lo + 1.0)
    } else {
        (0.0, 1.0)
    }
}

#[cfg(test)]
/// How many of `values` lie beyond an x axis ending at `hi` (drawn off the
/// panel).
pub fn beyond_axis(values: &[f64], hi: f64) -> usize {
    values.iter().filter(|&&x| x > hi).count()
}

#[cfg(test)]
/// A series' legend entry: its name, its count, and how many of its values
/// lie beyond the axis ending at `hi`.
pub fn legend(name: &str, values: &[f64], hi: f64) -> String {
    format!(
        "{name} (n = {}, {} beyond the axis)",
        values.len(),
        beyond_axis(values, hi)
    )
}

/// [`legend`] of a distribution.
pub fn legend_of(name: &str, d: &Distribution, hi: f64) -> String {
    format!(
        "{name} (n = {}, {} beyond the axis)",
        d.len(),
        d.count_above(hi)
    )
}

/// The CDF of `d` up to `hi` as a line: for each value (or bin) from the
/// fraction below it plus one value to the fraction at or below it, as the
/// line through every sorted value at (x, rank / n) is.
fn cdf_points(d: &Distribution, hi: f64) -> Vec<(f64, f64)> {
    let step = 1.0 / d.len().max(1) as f64;
    let mut below = 0.0;
    let mut points = Vec::new();
    for (x, at_or_below) in d.ecdf() {
        if x > hi {
            break;
        }
        points.push((x, (below + step).min(at_or_below)));
        points.push((x, at_or_below));
        below = at_or_below;
    }
    points
}

/// Draws the CDFs of `report`'s variants, from `data` (what was measured, or
/// the list of measured rounds), into the SVG file `path`.
pub fn draw_plot<D: PlotData + ?Sized>(
    path: &Path,
    report: &CompareReport,
    data: &D,
) -> Result<(), String> {
    draw(
        SVGBackend::new(path, SIZE).into_drawing_area(),
        report,
        data,
    )
}

/// As [`draw_plot`], returning the SVG document (for `--plot -`).
pub fn render_plot<D: PlotData + ?Sized>(
    report: &CompareReport,
    data: &D,
) -> Result<String, String> {
    let mut svg = String::new();
    draw(
        SVGBackend::with_string(&mut svg, SIZE).into_drawing_area(),
        report,
        data,
    )?;
    Ok(svg)
}

/// Draws the plot on `root`.
fn draw<D: PlotData + ?Sized>(
    root: DrawingArea<SVGBackend<'_>, Shift>,
    report: &CompareReport,
    data: &D,
) -> Result<(), String> {
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
        let series: Vec<(&String, Cow<'_, Distribution>)> = report
            .variants
            .iter()
            .filter_map(|v| data.distribution(v, metric).map(|d| (v, d)))
            .filter(|(_, d)| !d.is_empty())
            .collect();
        let dists: Vec<&Distribution> = series.iter().map(|(_, d)| d.as_ref()).collect();
        let (lo, hi) = x_range_of(&dists);
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
        for (i, (name, d)) in series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()].to_rgba();
            chart
                .draw_series(LineSeries::new(cdf_points(d, hi), color.stroke_width(2)))
                .map_err(|e| e.to_string())?
                .label(legend_of(name, d, hi))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Worked by hand: 1..=10 has p90 9.1 (type 7: rank 0.9 x 9 = 8.1, so
    /// 9 + 0.1 x (10 - 9)); 11..=19 then 50 has p90 19 + 0.1 x 31 = 22.1. The
    /// axis ends at 1.25 x 22.1 = 27.625 (below the largest value, 50) and
    /// starts at the smallest value, 1.
    #[test]
    fn the_axis_ends_at_a_quarter_past_the_largest_p90() {
        let a: Vec<f64> = (1..=10).map(f64::from).collect();
        let mut b: Vec<f64> = (11..=19).map(f64::from).collect();
        b.push(50.0);
        let (lo, hi) = x_range(&[&a, &b]);
        assert_eq!(lo, 1.0);
        assert!((hi - 27.625).abs() < 1e-12, "{hi}");
        // The order of the series does not matter.
        assert_eq!(x_range(&[&b, &a]), (lo, hi));
        // Alone, 1..=10 ends at 1.25 x 9.1 = 11.375, capped at its largest
        // value, 10.
        assert_eq!(x_range(&[&a]), (1.0, 10.0));
    }

    #[test]
    fn the_axis_never_runs_past_the_largest_value() {
        // p90 of [10, 10, 10, 10, 11] is 10.6; 1.25 x 10.6 = 13.25 > 11.
        let a = [10.0, 10.0, 10.0, 10.0, 11.0];
        assert_eq!(x_range(&[&a]), (10.0, 11.0));
    }

    #[test]
    fn degenerate_ranges_are_widened() {
        assert_eq!(x_range(&[&[5.0]]), (4.0, 6.0));
        assert_eq!(x_range(&[&[0.0, 0.0]]), (-1.0, 1.0));
        assert_eq!(x_range(&[]), (0.0, 1.0));
        let empty: [f64; 0] = [];
        assert_eq!(x_range(&[&empty, &[3.0, 3.0]]), (2.0, 4.0));
    }

    /// From distributions the axis and the legend are the ones the values
    /// give: exactly while the values are kept, within the histogram's
    /// precision after.
    #[test]
    fn distributions_give_the_axis_and_the_legend_of_their_values() {
        let mut w: Vec<f64> = (0..20).map(|i| 20_000.0 + 100.0 * f64::from(i)).collect();
        w.extend([2.0e7, 3.0e7]);
        let (mut exact, mut hist) = (Distribution::default(), Distribution::with_limit(0));
        for &x in &w {
            exact.record(x);
            hist.record(x);
        }
        assert_eq!(x_range_of(&[&exact]), x_range(&[&w]));
        let (_, hi) = x_range(&[&w]);
        assert_eq!(legend_of("v", &exact, hi), legend("v", &w, hi));
        let (lo_h, hi_h) = x_range_of(&[&hist]);
        assert_eq!(lo_h, 20_000.0, "the minimum stays exact");
        assert!((hi_h - hi).abs() <= 1e-3 * hi, "{hi_h} vs {hi}");
        assert_eq!(hist.count_above(hi), 2);
        // The line of the exact distribution is the line through every
        // sorted value at (x, rank / n), up to the axis.
        let line = cdf_points(&exact, hi);
        assert_eq!(line.first(), Some(&(20_000.0, 1.0 / 22.0)));
        assert_eq!(line.last(), Some(&(21_900.0, 20.0 / 22.0)));
        assert!(line.iter().all(|&(x, _)| x <= hi));
    }

    /// The legend counts the values strictly beyond the end of the axis.
    #[test]
    fn the_legend_counts_what_lies_beyond_the_axis() {
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(beyond_axis(&v, 8.0), 2);
        assert_eq!(beyond_axis(&v, 10.0), 0);
        assert_eq!(beyond_axis(&v, 0.5), 10);
        assert_eq!(
            legend("xen-head", &v, 7.5),
            "xen-head (n = 10, 3 beyond the axis)"
        );
        // Twenty ordinary rounds (20,000 + 100 i) and two the scheduler
        // delayed 1000-fold: p90 is 21,800 + 0.9 x 100 = 21,890 (rank 18.9),
        // the axis ends at 27,362.5 and the two lie beyond.
        let mut w: Vec<f64> = (0..20).map(|i| 20_000.0 + 100.0 * f64::from(i)).collect();
        w.extend([2.0e7, 3.0e7]);
        let (_, hi) = x_range(&[&w]);
        assert!((hi - 27_362.5).abs() < 1e-9, "{hi}");
        assert_eq!(beyond_axis(&w, hi), 2);
    }
}
