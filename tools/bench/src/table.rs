//! The benchmark's table: every figure beside the floor it is compared with,
//! the ratio of the two (measured in the same run), the target when there is
//! one and whether it is met; printed as text and written as JSON.

use serde::Serialize;

/// A lower bound measured in the same run as the figure it bounds.
#[derive(Clone, Debug, Serialize)]
pub struct Floor {
    /// What the floor is, in words.
    pub what: String,
    /// Its value, in the figure's unit.
    pub value: f64,
}

/// Which way a figure is better.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Better {
    /// A rate (rounds/s): the ratio is floor / figure.
    Higher,
    /// A cost (time, CPU): the ratio is figure / floor.
    Lower,
}

/// One figure.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// A stable identifier (for comparing runs).
    pub id: String,
    /// What was measured, in words.
    pub what: String,
    /// The figure (the median of the repetitions when there are several).
    pub value: f64,
    /// Its unit.
    pub unit: &'static str,
    /// Which way is better.
    pub better: Better,
    /// The smallest and the largest repetition, when repeated.
    pub spread: Option<(f64, f64)>,
    /// Repetitions the figure is the median of.
    pub reps: usize,
    /// The floor, when one is defined.
    pub floor: Option<Floor>,
    /// How many times the floor the figure is (1 = at the floor; more is
    /// worse, in either direction of `better`).
    pub ratio: Option<f64>,
    /// The figure minus the floor (costs only).
    pub beyond: Option<f64>,
    /// The target, in words.
    pub target: Option<String>,
    /// Whether the target is met.
    pub met: Option<bool>,
}

impl Row {
    /// A figure from its repetitions (their median), without a floor.
    pub fn new(id: &str, what: String, unit: &'static str, better: Better, reps: &[f64]) -> Row {
        let (value, spread) = median_spread(reps);
        Row {
            id: id.into(),
            what,
            value,
            unit,
            better,
            spread,
            reps: reps.len(),
            floor: None,
            ratio: None,
            beyond: None,
            target: None,
            met: None,
        }
    }

    /// The same figure beside `floor` (the median of its repetitions).
    pub fn with_floor(mut self, what: String, reps: &[f64]) -> Row {
        let (value, _) = median_spread(reps);
        self.ratio = match self.better {
            Better::Higher => Some(value / self.value),
            Better::Lower => Some(self.value / value),
        }
        .filter(|r| r.is_finite());
        if self.better == Better::Lower {
            self.beyond = Some(self.value - value).filter(|d| d.is_finite());
        }
        self.floor = Some(Floor { what, value });
        self
    }

    /// The target, in words, and whether it is met.
    pub fn with_target(mut self, target: String, met: bool) -> Row {
        self.target = Some(target);
        self.met = Some(met);
        self
    }
}

/// The median and (min, max) of `v` (`None` for fewer than two values).
pub fn median_spread(v: &[f64]) -> (f64, Option<(f64, f64)>) {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| !x.is_nan()).collect();
    s.sort_by(f64::total_cmp);
    let median = match s.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    };
    let spread = (s.len() > 1).then(|| (s[0], s[s.len() - 1]));
    (median, spread)
}

/// A number with a sensible precision for its size.
pub fn num(v: f64) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    let a = v.abs();
    let s = if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    };
    group(&s)
}

/// Thousands separators in the integer part of `s`.
fn group(s: &str) -> String {
    let (sign, rest) = s.strip_prefix('-').map_or(("", s), |r| ("-", r));
    let (int, frac) = rest
        .split_once('.')
        .map_or((rest, None), |(i, f)| (i, Some(f)));
    let mut out = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    match frac {
        Some(f) => format!("{sign}{out}.{f}"),
        None => format!("{sign}{out}"),
    }
}

/// The whole table.
#[derive(Debug, Default, Serialize)]
pub struct Table {
    /// The schema of this document.
    pub schema: &'static str,
    /// The host, in words (cores, KVM flavour).
    pub host: Vec<String>,
    /// The rows, in order.
    pub rows: Vec<Row>,
    /// Other observations (profiles, syscall counts), in words.
    pub notes: Vec<String>,
}

impl Table {
    /// The text of the table: one line per figure, its floor and ratio under it.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for h in &self.host {
            out.push_str(&format!("{h}\n"));
        }
        out.push('\n');
        for r in &self.rows {
            let spread = r.spread.map_or_else(String::new, |(lo, hi)| {
                format!(" (min {}, max {}, {} runs)", num(lo), num(hi), r.reps)
            });
            out.push_str(&format!(
                "{:<62} {:>12} {}{spread}\n",
                r.what,
                num(r.value),
                r.unit
            ));
            if let Some(f) = &r.floor {
                let beyond = r.beyond.map_or_else(String::new, |b| {
                    format!(", {} {} beyond it", num(b), r.unit)
                });
                out.push_str(&format!(
                    "    floor: {:<55} {:>12} {}   ratio {}{beyond}\n",
                    f.what,
                    num(f.value),
                    r.unit,
                    r.ratio.map_or_else(|| "-".into(), |x| format!("{x:.2}x"))
                ));
            }
            if let (Some(t), Some(m)) = (&r.target, r.met) {
                out.push_str(&format!(
                    "    target: {t}: {}\n",
                    if m { "met" } else { "NOT met" }
                ));
            }
        }
        if !self.notes.is_empty() {
            out.push('\n');
            for n in &self.notes {
                out.push_str(&format!("{n}\n"));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_say_how_many_times_the_floor_either_way() {
        let rate = Row::new("r", "rate".into(), "rounds/s", Better::Higher, &[100.0])
            .with_floor("f".into(), &[400.0]);
        assert_eq!(rate.ratio, Some(4.0));
        assert_eq!(rate.beyond, None);
        let cost = Row::new("c", "cost".into(), "us", Better::Lower, &[3.0, 9.0, 6.0])
            .with_floor("f".into(), &[2.0]);
        assert_eq!(cost.value, 6.0);
        assert_eq!(cost.spread, Some((3.0, 9.0)));
        assert_eq!(cost.ratio, Some(3.0));
        assert_eq!(cost.beyond, Some(4.0));
    }

    #[test]
    fn numbers_are_grouped() {
        assert_eq!(num(1_234_567.4), "1,234,567");
        assert_eq!(num(12.345), "12.3");
        assert_eq!(num(-1_500.0), "-1,500");
        assert_eq!(num(f64::NAN), "-");
        assert_eq!(median_spread(&[1.0, 3.0]).0, 2.0);
    }
}
