//! Collected figures, the human table, the machine-readable lines and the section of docs/BENCHMARKS.md.

use std::fmt::Write as _;

use crate::stats::summary;

pub struct Figure {
    pub scenario: String,
    pub backend: String,
    pub metric: String,
    pub values: Vec<f64>,
}

pub struct Ratio {
    pub name: String,
    pub pair: String,
    pub value: f64,
}

pub struct Target {
    pub name: String,
    pub rule: String,
    pub value: f64,
    pub met: bool,
}

#[derive(Default)]
pub struct Report {
    pub figures: Vec<Figure>,
    pub ratios: Vec<Ratio>,
    pub targets: Vec<Target>,
    pub notes: Vec<String>,
    pub fails: Vec<String>,
}

/// A number printed with as many decimals as its size deserves.
pub fn num(x: f64) -> String {
    if !x.is_finite() {
        "n/a".into()
    } else if x.abs() >= 1000.0 {
        format!("{x:.0}")
    } else if x.abs() >= 100.0 {
        format!("{x:.1}")
    } else if x.abs() >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

impl Report {
    pub fn add(&mut self, scenario: &str, backend: &str, metric: &str, v: f64) {
        if let Some(f) = self
            .figures
            .iter_mut()
            .find(|f| f.scenario == scenario && f.backend == backend && f.metric == metric)
        {
            f.values.push(v);
            return;
        }
        self.figures.push(Figure {
            scenario: scenario.into(),
            backend: backend.into(),
            metric: metric.into(),
            values: vec![v],
        });
    }

    pub fn median(&self, scenario: &str, backend: &str, metric: &str) -> f64 {
        self.figures
            .iter()
            .find(|f| f.scenario == scenario && f.backend == backend && f.metric == metric)
            .map_or(f64::NAN, |f| summary(&f.values).0)
    }

    /// Ratio of the medians of `metric` for backends `a` and `b`.
    pub fn ratio(&mut self, name: &str, scenario: &str, metric: &str, a: &str, b: &str) -> f64 {
        let v = self.median(scenario, a, metric) / self.median(scenario, b, metric);
        self.ratios.push(Ratio {
            name: name.into(),
            pair: format!("{a}/{b}"),
            value: v,
        });
        v
    }

    pub fn target(&mut self, name: &str, rule: &str, value: f64, met: bool) {
        self.targets.push(Target {
            name: name.into(),
            rule: rule.into(),
            value,
            met: met && value.is_finite(),
        });
    }

    fn scenarios(&self) -> Vec<String> {
        let mut s: Vec<String> = vec![];
        for f in &self.figures {
            if !s.contains(&f.scenario) {
                s.push(f.scenario.clone());
            }
        }
        s
    }

    /// One table per scenario: backends down, metrics across, "median (min–max)".
    pub fn tables(&self, markdown: bool) -> String {
        let mut out = String::new();
        for sc in self.scenarios() {
            let figs: Vec<&Figure> = self.figures.iter().filter(|f| f.scenario == sc).collect();
            let mut metrics: Vec<&str> = vec![];
            let mut backends: Vec<&str> = vec![];
            for f in &figs {
                if !metrics.contains(&f.metric.as_str()) {
                    metrics.push(&f.metric);
                }
                if !backends.contains(&f.backend.as_str()) {
                    backends.push(&f.backend);
                }
            }
            let mut rows: Vec<Vec<String>> = vec![];
            let mut head = vec![sc.clone()];
            head.extend(metrics.iter().map(|m| m.to_string()));
            rows.push(head);
            for b in &backends {
                let mut row = vec![b.to_string()];
                for m in &metrics {
                    let cell = figs
                        .iter()
                        .find(|f| f.backend == *b && f.metric == *m)
                        .map_or(String::from("-"), |f| {
                            let (med, lo, hi) = summary(&f.values);
                            if f.values.len() > 1 {
                                format!("{} ({}–{})", num(med), num(lo), num(hi))
                            } else {
                                num(med)
                            }
                        });
                    row.push(cell);
                }
                rows.push(row);
            }
            if markdown {
                let _ = writeln!(out, "| {} |", rows[0].join(" | "));
                let _ = writeln!(out, "|{}", "---|".repeat(rows[0].len()));
                for r in &rows[1..] {
                    let _ = writeln!(out, "| {} |", r.join(" | "));
                }
                out.push('\n');
            } else {
                let widths: Vec<usize> = (0..rows[0].len())
                    .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
                    .collect();
                for (n, r) in rows.iter().enumerate() {
                    let line: Vec<String> = r
                        .iter()
                        .zip(&widths)
                        .map(|(c, w)| format!("{c:<w$}", w = *w))
                        .collect();
                    let _ = writeln!(out, "  {}", line.join("  "));
                    if n == 0 {
                        let _ = writeln!(
                            out,
                            "  {}",
                            "-".repeat(widths.iter().sum::<usize>() + 2 * (widths.len() - 1))
                        );
                    }
                }
                out.push('\n');
            }
        }
        out
    }

    /// `figure <scenario> <backend> <metric> <median>`, `ratio <name> <a>/<b> <x>`,
    /// `target <name> <rule> <value> met|MISSED`, `FAIL ...`.
    pub fn machine_lines(&self) -> String {
        let mut out = String::new();
        for f in &self.figures {
            let (med, lo, hi) = summary(&f.values);
            let _ = writeln!(
                out,
                "figure {} {} {} {} min={} max={} n={}",
                f.scenario,
                f.backend,
                f.metric,
                num(med),
                num(lo),
                num(hi),
                f.values.len()
            );
        }
        for r in &self.ratios {
            let _ = writeln!(out, "ratio {} {} {}", r.name, r.pair, num(r.value));
        }
        for t in &self.targets {
            let _ = writeln!(
                out,
                "target {} {} {} {}",
                t.name,
                t.rule.replace(' ', ""),
                num(t.value),
                if t.met { "met" } else { "MISSED" }
            );
        }
        for f in &self.fails {
            let _ = writeln!(out, "FAIL {f}");
        }
        out
    }
}
