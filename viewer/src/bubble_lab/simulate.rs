//! The lab's simulation: the schedule studied (`gangway::pipeline::study`: its figure, its
//! textbook bubble, and where the setting is small enough the shortest schedule of its family,
//! one chunk a stage or two, under its own peak memory), the compared schedules on one time axis, and the textbook formula with
//! the shape's numbers in it.

use gangway::pipeline::figure::{Figure, FigureRow};
use gangway::pipeline::{Family, ScheduleKind, Search, Spec};
use gangway::trace::{Lane, TrackKind};

use super::LabParams;
use crate::timeline::{TimelineData, format_ns};

/// The result of one simulation, kept until the inputs change.
#[derive(Debug, Clone)]
pub struct LabResult {
    /// The textbook bubble at F = B = W; `None` where there is no closed form (ZB-V).
    pub textbook: Option<f64>,
    /// The simulation as trace events (the Files tab saves it).
    pub data: TimelineData,
    /// The textbook figure of this schedule.
    pub figure: Figure,
    /// The compared schedules at this p, m and v and the same total cost, on one time axis.
    pub comparison: Result<Figure, String>,
    /// The shortest schedule of this one's family (one chunk; two in a V; two looped) under
    /// its memory, where the setting is small enough for the exact search.
    pub optimum: Option<OptimumLine>,
}

/// What the lab says of the optimum.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OptimumLine {
    pub makespan_ns: u64,
    pub family: Family,
    /// Chunk activations a stage the optimum may hold: the schedule's own peak.
    pub memory: usize,
    pub proven: bool,
    /// Where not proven, no schedule is shorter than this (the search's root bound).
    pub lower_bound_ns: u64,
    /// Nodes the search visited.
    pub nodes: u64,
    /// The schedule's gap to it; `None` where the optimum does not bound it.
    pub gap: Option<f64>,
}

impl OptimumLine {
    /// The lab's line: the optimum, the gap, and how far an unfinished search reached.
    pub fn text(&self) -> String {
        let gap = match self.gap {
            Some(g) => format!("gap {:+.1}%", g * 100.0),
            None => "it does not bound this schedule".into(),
        };
        let unit = if self.family.chunks() == 1 {
            "activations"
        } else {
            "chunk activations"
        };
        let reach = if self.proven {
            String::new()
        } else {
            format!(
                "; not proven: the search stopped at its budget of {} nodes, and the optimum \
                 lies between {} and {}",
                self.nodes,
                format_ns(self.lower_bound_ns as f64),
                format_ns(self.makespan_ns as f64)
            )
        };
        format!(
            "optimal {} under this memory ({} {unit} a stage): {} ({gap}{reach})",
            self.family.describe(),
            self.memory,
            format_ns(self.makespan_ns as f64)
        )
    }
}

/// Nodes the lab's search may visit: it runs as the sliders move, so it must be quick; past
/// this the line says the optimum is not proven.
const OPTIMUM_BUDGET: u64 = 30_000;

impl LabResult {
    /// The schedule, its simulation and its peak activations: the figure's one row.
    pub fn row(&self) -> &FigureRow {
        // `compute` only makes results whose figure has its one row.
        &self.figure.rows[0]
    }
}

/// Human name of a schedule, as on the buttons.
pub fn label(kind: ScheduleKind) -> &'static str {
    kind.title()
}

/// The textbook formula with this shape's numbers in it.
pub fn formula_text(kind: ScheduleKind, p: usize, m: usize, v: usize) -> String {
    let q = p.saturating_sub(1);
    match kind {
        ScheduleKind::GPipe | ScheduleKind::OneFOneB | ScheduleKind::Eager1F1B => {
            format!(
                "bubble = (p - 1) / (m + p - 1) = {q} / ({m} + {q}) = {q}/{}",
                m + q
            )
        }
        ScheduleKind::Interleaved | ScheduleKind::LoopedBfs => format!(
            "bubble = (p - 1) / (v*m + p - 1) = {q} / ({v}*{m} + {q}) = {q}/{}",
            v * m + q
        ),
        // An F&B pair costs F + B with no all-to-all to hide, so the order keeps 1F1B's (or
        // interleaved's) bubble; with one, the pairs hide it and no closed form holds.
        ScheduleKind::OneFOneBOverlap => format!(
            "bubble = (p - 1) / (m + p - 1) = {q} / ({m} + {q}) = {q}/{}; 1F1B's, with no \
             all-to-all to hide (an F&B pair costs F + B); shorter where the pairs hide one",
            m + q
        ),
        ScheduleKind::InterleavedOverlap => format!(
            "bubble = (p - 1) / (v*m + p - 1) = {q} / ({v}*{m} + {q}) = {q}/{}; interleaved \
             1F1B's, with no all-to-all to hide (an F&B pair costs F + B); shorter where the \
             pairs hide one",
            v * m + q
        ),
        ScheduleKind::ZbH1 => format!(
            "bubble = (p - 1) / (3m + p - 1) = {q} / (3*{m} + {q}) = {q}/{} if F = B = W",
            3 * m + q
        ),
        ScheduleKind::ZbAuto => {
            "no closed form (planned for F, B, W and the transfers under the memory limit)".into()
        }
        ScheduleKind::VHalf | ScheduleKind::VMin => {
            "no closed form (the paper's building block, repeated)".into()
        }
        ScheduleKind::ZbV => format!(
            "no closed form (planned greedily for F, B, W); at F = B = W idle per stage >= \
             (p - 1) chunk ops = {q} half-stage F"
        ),
        // DeepSeek's F&B + B - 3W with B the full backward, as the textbook module computes it:
        // an F overlapped with a full backward is F + B + W (B: input gradient, W: weight
        // gradient), so the bracket is 2F at F = B = W (with F&B = F + B it would be 0).
        ScheduleKind::DualPipe => {
            let h = (p / 2).saturating_sub(1);
            format!(
                "idle per stage = (p/2 - 1)(F&B + B_full - 3W) = {h} * 2F = {}F if F = B = W; \
                 F&B = F + B + W is an F overlapped with a full backward, B_full = B + W",
                2 * h
            )
        }
        ScheduleKind::DualPipeV => format!(
            "idle per stage = (p - 1)(F&B + B_full - 3W) = {q} * 2F = {}F if F = B = W; F is a \
             half stage's forward, F&B = F + B + W is an F overlapped with a full backward, \
             B_full = B + W",
            2 * q
        ),
    }
}

/// The formula line the lab shows beside `row`, the simulation of `params`: the textbook
/// formula with this shape's numbers ([`formula_text`]), and, for the schedules without one,
/// what the numbers beside it say: how many activations a stage holds here against 1F1B's
/// (V-Half, V-Min, zb-auto), and, where ZB-H1's formula holds (F = B = W, free transfers, even
/// stages), whether zb-auto's simulated bubble is ZB-H1's.
pub fn formula_line(params: &LabParams, row: &FigureRow) -> String {
    let (p, m) = (params.stages, params.microbatches);
    let text = formula_text(params.kind, p, m, row.schedule.chunks);
    let held = row.peak_microbatches().into_iter().fold(0.0f64, f64::max);
    // 1F1B's first stage holds p microbatches' activations (fewer with fewer microbatches).
    let one_f_one_b = p.min(m) as f64;
    let against = format!(
        "it holds at most {} of 1F1B's {} activations a stage here ({:.2}×)",
        (held * 100.0).round() / 100.0,
        p.min(m),
        held / one_f_one_b.max(1.0)
    );
    match params.kind {
        ScheduleKind::VHalf | ScheduleKind::VMin => format!("{text}; {against}"),
        ScheduleKind::ZbAuto => {
            let even = params.forward == params.backward && params.backward == params.weight_grad;
            if !(even && params.latency == 0.0 && params.slow_factor <= 1) {
                return format!("{text}; {against}");
            }
            // Where ZB-H1's formula holds, say whether this plan meets it, from its simulation.
            let q = p.saturating_sub(1);
            let zb_h1 = q as f64 / (3 * m + q) as f64;
            let bubble = row.sim.bubble_fraction;
            let held = (held * 100.0).round() / 100.0;
            if (bubble - zb_h1).abs() < 1e-9 {
                format!(
                    "{text}; here (F = B = W, free transfers) its plan has ZB-H1's bubble, \
                     (p - 1) / (3m + p - 1) = {q}/{}, holding at most {held} activations a stage",
                    3 * m + q
                )
            } else {
                format!(
                    "{text}; here (F = B = W, free transfers) its bubble is {:.1}% against \
                     ZB-H1's {q}/{} = {:.1}%, holding at most {held} activations a stage",
                    bubble * 100.0,
                    3 * m + q,
                    zb_h1 * 100.0
                )
            }
        }
        _ => text,
    }
}

/// Studies the schedule for `p` (`gangway::pipeline::study`), and compares it with the others.
pub fn compute(p: &LabParams) -> Result<LabResult, String> {
    let study = gangway::pipeline::study(&Spec {
        kind: p.kind,
        stages: p.stages,
        microbatches: p.microbatches,
        chunks: p.chunks.max(2),
        share: p.share_costs(),
        memory_limit: p.memory,
        stage_costs: p.stage_scale(),
        fold: p.fold(),
        search: Search::AtItsPeak {
            budget: OPTIMUM_BUDGET,
        },
    })
    .map_err(|e| e.to_string())?;
    let comparison = Figure::compare(
        &p.compared_kinds(),
        p.stages,
        p.microbatches,
        p.chunks.max(2),
        &p.share_costs(),
        p.memory,
        &p.stage_scale(),
        p.fold(),
    )
    .map_err(|e| e.to_string());
    // Transfers are free here (zero-length): show compute lanes only.
    let row = study.row();
    let mut data = TimelineData::from_events(
        row.sim
            .events
            .iter()
            .filter(|e| e.lane == Lane::Compute)
            .cloned(),
    );
    data.device_prefix = Some(TrackKind::of_pipeline(row.folded()).word().into());
    let optimum = study.optimum.as_ref().map(|found| OptimumLine {
        makespan_ns: found.optimum.makespan_ns,
        family: found.optimum.family,
        memory: found.memory.unwrap_or(0),
        proven: found.optimum.proven,
        lower_bound_ns: found.optimum.lower_bound_ns,
        nodes: found.optimum.nodes,
        gap: found.gap.ok(),
    });
    Ok(LabResult {
        textbook: study.textbook,
        data,
        figure: study.figure,
        comparison,
        optimum,
    })
}
