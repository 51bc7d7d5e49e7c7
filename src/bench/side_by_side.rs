//! Several reports side by side, one column per machine and adapter, as burn-bench's dashboard
//! and Geekbench's browser show them: `gangway bench side-by-side a.json b.json c.json` and the
//! viewer's Files tab. Each row is a case (suite and case name, in the order the reports first
//! list them); each cell that column's fastest sample (what [`compare`](super::compare) judges
//! by), its figure, and its time over the first column's, per unit of work where the two did
//! different amounts. Each suite gets the geometric mean of each column's ratios.

use super::format::seconds;
use super::report::{CaseResult, Figure, Report, Status};
use serde::Serialize;

/// One column: one adapter of one report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Column {
    /// The report's name as the caller gives it (its file name).
    pub report: String,
    /// The adapter's `name (backend)`.
    pub adapter: String,
    /// The machine the report was measured on: its CPU and OS.
    pub machine: String,
}

impl Column {
    /// `report: adapter`, the column's heading.
    pub fn heading(&self) -> String {
        format!("{}: {}", self.report, self.adapter)
    }
}

/// What one column measured of one case.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Cell {
    /// Measured.
    Measured {
        fastest_s: f64,
        figure: Option<Figure>,
        /// `time / first column's time` (per unit of work where they differ), where the first
        /// column measured the case: below 1 is faster.
        ratio: Option<f64>,
    },
    /// Skipped or failed there, and why.
    NotMeasured { status: Status, reason: String },
    /// Not in that report.
    Absent,
}

impl Cell {
    /// The cell as the table prints it: `1.02 ms (0.500×)`, `skipped`, or `–`.
    pub fn text(&self) -> String {
        match self {
            Cell::Measured {
                fastest_s, ratio, ..
            } => match ratio {
                Some(r) => format!("{} ({r:.3}×)", seconds(*fastest_s)),
                None => seconds(*fastest_s),
            },
            Cell::NotMeasured { status, .. } => match status {
                Status::Skipped => "skipped".into(),
                _ => "FAILED".into(),
            },
            Cell::Absent => "–".into(),
        }
    }

    /// The derived figure, where measured and the case has one.
    pub fn figure(&self) -> Option<&Figure> {
        match self {
            Cell::Measured { figure, .. } => figure.as_ref(),
            _ => None,
        }
    }
}

/// One case across every column.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    pub suite: String,
    pub case: String,
    /// One per column, in the columns' order.
    pub cells: Vec<Cell>,
}

/// Several reports' cases side by side.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SideBySide {
    pub columns: Vec<Column>,
    pub rows: Vec<Row>,
}

/// One suite's geometric means, a column each.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SuiteColumns {
    pub suite: String,
    /// Per column: the geometric mean of its ratios to the first column and the cases it is
    /// over (those both measured), or `None` where it shares no measured case with the first.
    pub means: Vec<Option<(f64, usize)>>,
}

impl SideBySide {
    /// The reports' every adapter a column, in the order given: `(name, report)`, the name
    /// heading its columns.
    pub fn new(reports: &[(String, &Report)]) -> Self {
        let mut columns = Vec::new();
        // Per column: its report, and its adapter's index there.
        let mut sources: Vec<(&Report, usize)> = Vec::new();
        for (name, report) in reports {
            for a in &report.adapters {
                if report.results.iter().any(|r| r.adapter == a.index) {
                    columns.push(Column {
                        report: name.clone(),
                        adapter: a.label(),
                        machine: format!("{}, {}", report.machine.cpu, report.machine.os),
                    });
                    sources.push((report, a.index));
                }
            }
        }
        let mut keys: Vec<(&str, &str)> = Vec::new();
        for (report, _) in &sources {
            for r in &report.results {
                let key = (r.suite.as_str(), r.case.as_str());
                if !keys.contains(&key) {
                    keys.push(key);
                }
            }
        }
        let rows =
            keys.into_iter()
                .map(|(suite, case)| {
                    let found: Vec<Option<&CaseResult>> = sources
                        .iter()
                        .map(|(report, adapter)| {
                            report.results.iter().find(|r| {
                                r.adapter == *adapter && r.suite == suite && r.case == case
                            })
                        })
                        .collect();
                    let base = found.first().copied().flatten().and_then(per_unit);
                    let cells = found
                        .into_iter()
                        .map(|r| match r {
                            None => Cell::Absent,
                            Some(r) => match (r.status, &r.stats) {
                                (Status::Ok, Some(s)) => Cell::Measured {
                                    fastest_s: s.min_s,
                                    figure: r.figure.clone(),
                                    ratio: base.zip(per_unit(r)).map(|(b, t)| t / b),
                                },
                                (status, _) => Cell::NotMeasured {
                                    status,
                                    reason: r.reason.clone().unwrap_or_default(),
                                },
                            },
                        })
                        .collect();
                    Row {
                        suite: suite.to_owned(),
                        case: case.to_owned(),
                        cells,
                    }
                })
                .collect();
        Self { columns, rows }
    }

    /// The suites, in order of first appearance.
    pub fn suites(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for r in &self.rows {
            if !out.contains(&r.suite.as_str()) {
                out.push(&r.suite);
            }
        }
        out
    }

    /// Per suite, each column's geometric mean of its ratios to the first column.
    pub fn suite_means(&self) -> Vec<SuiteColumns> {
        self.suites()
            .into_iter()
            .map(|suite| SuiteColumns {
                suite: suite.to_owned(),
                means: (0..self.columns.len())
                    .map(|k| {
                        let logs: Vec<f64> = self
                            .rows
                            .iter()
                            .filter(|r| r.suite == suite)
                            .filter_map(|r| match &r.cells[k] {
                                Cell::Measured { ratio: Some(x), .. }
                                    if x.is_finite() && *x > 0.0 =>
                                {
                                    Some(x.ln())
                                }
                                _ => None,
                            })
                            .collect();
                        (!logs.is_empty()).then(|| {
                            (
                                (logs.iter().sum::<f64>() / logs.len() as f64).exp(),
                                logs.len(),
                            )
                        })
                    })
                    .collect(),
            })
            .collect()
    }

    /// The Markdown table: the columns and their machines, then a row per case with each
    /// column's fastest sample and its ratio to the first, and per suite a row of geometric
    /// means.
    pub fn table(&self) -> String {
        let mut out = String::new();
        for (k, c) in self.columns.iter().enumerate() {
            out.push_str(&format!(
                "column {}: {} ({})\n",
                k + 1,
                c.heading(),
                c.machine
            ));
        }
        out.push('\n');
        let mut header = vec!["suite".to_string(), "case".to_string()];
        header.extend((1..=self.columns.len()).map(|k| format!("column {k}")));
        let header: Vec<&str> = header.iter().map(String::as_str).collect();
        let means = self.suite_means();
        let mut rows = Vec::new();
        for suite in self.suites() {
            for r in self.rows.iter().filter(|r| r.suite == suite) {
                let mut row = vec![r.suite.clone(), r.case.clone()];
                row.extend(r.cells.iter().map(Cell::text));
                rows.push(row);
            }
            if let Some(m) = means.iter().find(|m| m.suite == suite) {
                let mut row = vec![suite.to_owned(), "geometric mean of ×".to_string()];
                row.extend(m.means.iter().map(|x| {
                    x.map_or_else(
                        || "–".to_string(),
                        |(g, n)| format!("{g:.3}× ({n} case{})", if n == 1 { "" } else { "s" }),
                    )
                }));
                rows.push(row);
            }
        }
        out.push_str(&crate::table::markdown_table(&header, &rows));
        out.push_str(&format!(
            "\nEach cell: the column's fastest sample, and (×) its time over column 1's, per unit \
             of work where they differ: below 1 is faster. {} case(s), {} column(s).\n",
            self.rows.len(),
            self.columns.len()
        ));
        out
    }

    /// The figure's unit in `suite`, from the first case that has one.
    pub fn unit(&self, suite: &str) -> Option<&str> {
        self.rows
            .iter()
            .filter(|r| r.suite == suite)
            .flat_map(|r| r.cells.iter())
            .find_map(|c| c.figure().map(|f| f.unit.as_str()))
    }
}

/// A measured case's fastest sample per unit of its work.
fn per_unit(r: &CaseResult) -> Option<f64> {
    let s = r.stats.as_ref().filter(|_| r.status == Status::Ok)?;
    Some(s.min_s / r.work_amount())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::report::{AdapterRecord, Build, Machine, Settings, Stats, Timing};
    use crate::bench::work::{Sampling, Work, WorkUnit};

    fn report(adapters: &[&str], cases: &[(&str, usize, f64)]) -> Report {
        Report {
            schema: crate::bench::report::SCHEMA.into(),
            schema_version: crate::bench::report::SCHEMA_VERSION,
            gangway: Build::current(),
            timestamp: "2026-12-07T00:00:00Z".into(),
            machine: Machine::current(),
            settings: Settings {
                suites: vec!["matmul".into()],
                quick: false,
                sampling: Sampling {
                    warmup: 0,
                    samples: 5,
                },
                command: Vec::new(),
                in_rounds: Vec::new(),
                slowdown: None,
            },
            adapters: adapters
                .iter()
                .enumerate()
                .map(|(i, a)| AdapterRecord::fake(i, a))
                .collect(),
            results: cases
                .iter()
                .map(|&(case, adapter, t)| {
                    let mut r = CaseResult::not_run(
                        "matmul",
                        case.to_string(),
                        adapter,
                        Status::Ok,
                        String::new(),
                    );
                    r.reason = None;
                    r.stats = Some(Stats::new(Timing::Gpu, 0, vec![t, t * 1.1, t * 1.2]));
                    r.figure = Some(Figure {
                        value: 1.0 / t,
                        unit: "runs/s".into(),
                    });
                    r
                })
                .collect(),
        }
    }

    #[test]
    fn three_machines_give_a_column_per_adapter_and_ratios_to_the_first() {
        let a = report(&["llvmpipe"], &[("x", 0, 2.0), ("y", 0, 4.0)]);
        let b = report(
            &["RTX 4090", "lavapipe"],
            &[("x", 0, 1.0), ("y", 0, 1.0), ("x", 1, 4.0)],
        );
        let mut c = report(&["M2"], &[("y", 0, 8.0), ("z", 0, 1.0)]);
        c.results[1].status = Status::Skipped;
        c.results[1].reason = Some("too few devices".into());
        let s = SideBySide::new(&[("a".into(), &a), ("b".into(), &b), ("c".into(), &c)]);
        let headings: Vec<String> = s.columns.iter().map(Column::heading).collect();
        assert_eq!(
            headings,
            [
                "a: llvmpipe (vulkan)",
                "b: RTX 4090 (vulkan)",
                "b: lavapipe (vulkan)",
                "c: M2 (vulkan)"
            ]
        );
        let cases: Vec<&str> = s.rows.iter().map(|r| r.case.as_str()).collect();
        assert_eq!(cases, ["x", "y", "z"]);
        let ratio = |row: usize, col: usize| match &s.rows[row].cells[col] {
            Cell::Measured { ratio, .. } => *ratio,
            other => panic!("{other:?}"),
        };
        assert_eq!(ratio(0, 0), Some(1.0));
        assert_eq!(ratio(0, 1), Some(0.5));
        assert_eq!(ratio(0, 2), Some(2.0));
        assert_eq!(ratio(1, 1), Some(0.25));
        assert_eq!(ratio(1, 3), Some(2.0));
        assert_eq!(s.rows[0].cells[3], Cell::Absent);
        assert_eq!(s.rows[1].cells[2], Cell::Absent);
        assert!(matches!(
            s.rows[2].cells[3],
            Cell::NotMeasured {
                status: Status::Skipped,
                ..
            }
        ));
        // The geometric mean of b's RTX: sqrt(0.5 · 0.25).
        let m = &s.suite_means()[0];
        let (g, n) = m.means[1].unwrap();
        assert!((g - (0.125f64).sqrt()).abs() < 1e-12 && n == 2, "{g} {n}");
        assert_eq!(m.means[2], Some((2.0, 1)));
        let table = s.table();
        assert!(table.contains("column 2: b: RTX 4090 (vulkan)"), "{table}");
        assert!(
            table.contains(
                "| matmul | x | 2.00 s (1.000×) | 1.00 s (0.500×) | 4.00 s (2.000×) | – |"
            ),
            "{table}"
        );
        assert!(
            table.contains("| matmul | z | – | – | – | skipped |"),
            "{table}"
        );
        assert!(table.contains("| geometric mean of × |"), "{table}");
        assert_eq!(s.unit("matmul"), Some("runs/s"));
    }

    #[test]
    fn other_amounts_of_work_compare_per_unit() {
        let mut a = report(&["gpu"], &[("x", 0, 1.0)]);
        let mut b = report(&["gpu"], &[("x", 0, 4.0)]);
        a.results[0].work = Some(Work::new(10.0, WorkUnit::Computation));
        b.results[0].work = Some(Work::new(20.0, WorkUnit::Computation));
        let s = SideBySide::new(&[("a".into(), &a), ("b".into(), &b)]);
        assert!(
            matches!(s.rows[0].cells[1], Cell::Measured { ratio: Some(r), .. } if (r - 2.0).abs() < 1e-12)
        );
    }
}
