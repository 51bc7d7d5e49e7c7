//! One schedule studied ([`study`]): built for the costs it will meet, simulated (its figure's
//! row), its lanes as trace tracks, the textbook bubble, and, where the exact search takes the
//! setting, the shortest schedule of its [`Family`] (one chunk; two in a V; two looped) and
//! this one's gap to it. `gangway pipeline` and the
//! viewer's lab only present a [`Study`]; neither plans, simulates or searches itself.

use super::fold::Fold;
use super::optimal::{Family, NODE_BUDGET, Optimum, beyond_the_search, optimal_within};
use super::schedule_kind::ScheduleKind;
use super::simulate::Costs;
use super::textbook::bubble_formula;
use crate::error::ScheduleError;
use crate::pipeline::figure::{Figure, FigureRow};
use crate::trace::{Track, TrackKind};

/// What to study: a schedule kind at a shape, under a model share's costs.
#[derive(Debug, Clone)]
pub struct Spec {
    pub kind: ScheduleKind,
    pub stages: usize,
    pub microbatches: usize,
    /// Chunks a stage, for the kinds that take a count (interleaved, looped BFS).
    pub chunks: usize,
    /// A stage's whole model share; each chunk op gets its part
    /// ([`Costs::per_chunk`] over [`ScheduleKind::passes`]).
    pub share: Costs,
    /// Activations a stage may hold, for the schedules planned under a limit (zb-auto).
    pub memory_limit: Option<usize>,
    /// Each stage's cost as a multiple of the share (none: even stages).
    pub stage_costs: Vec<f64>,
    pub fold: Fold,
    pub search: Search,
}

/// Whether, and under which memory, to search for the shortest schedule of the studied one's
/// family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Search {
    Off,
    /// Under [`Spec::memory_limit`] (none: unlimited; activations a stage, each a chunk
    /// activation times the chunks) with the full budget; a setting the search cannot take is
    /// an error (`gangway pipeline --optimal`).
    UnderTheLimit,
    /// Under the studied schedule's own peak activations, within `budget` nodes; nothing where
    /// the search cannot take the setting (the lab, which searches as its sliders move).
    AtItsPeak {
        budget: u64,
    },
}

/// The shortest schedule of the family found, and how this schedule compares.
#[derive(Debug, Clone)]
pub struct Found {
    pub optimum: Optimum,
    /// The chunk activations a stage the optimum was allowed (none: unlimited).
    pub memory: Option<usize>,
    /// This schedule's makespan over the optimum's, minus 1; or why the optimum does not bound
    /// it.
    pub gap: Result<f64, Unbounded>,
}

/// One schedule, studied.
#[derive(Debug, Clone)]
pub struct Study {
    /// The textbook figure of this one schedule: its one row holds the schedule, its simulation
    /// and its peak activations ([`Study::row`]).
    pub figure: Figure,
    /// The costs of one chunk op: the share split over the schedule's passes.
    pub costs: Costs,
    /// What each lane is: a stage, or folded, a device with the stages it holds.
    pub tracks: Vec<Track>,
    /// The textbook bubble at F = B = W with free transfers; `None` where there is no closed
    /// form.
    pub textbook: Option<f64>,
    pub optimum: Option<Found>,
}

impl Study {
    /// The schedule, its simulation and its peak activations.
    pub fn row(&self) -> &FigureRow {
        // `study` only makes figures of one row.
        &self.figure.rows[0]
    }
}

/// The lanes of a pipeline's timeline: one per stage, or when stages share devices, one per
/// device, holding its stages.
pub fn lanes(stages: usize, fold: Fold) -> Result<Vec<Track>, ScheduleError> {
    let device_of = fold.devices_of(stages)?;
    Ok(if fold.shares(stages) {
        (0..fold.device_count(stages))
            .map(|d| {
                let held = (0..stages).filter(|&s| device_of[s] == d).collect();
                Track::holding(d, TrackKind::Device, held, format!("device {d}"))
            })
            .collect()
    } else {
        (0..stages)
            .map(|s| Track::holding(s, TrackKind::Stage, vec![s], format!("stage {s}")))
            .collect()
    })
}

/// Why the exact search cannot take a setting: a schedule no search covers, too large, sends
/// that block, or stages that are not even or share devices. `None` where it can.
pub fn beyond_search(
    family: Option<Family>,
    stages: usize,
    microbatches: usize,
    share: &Costs,
    stage_costs: &[f64],
    fold: Fold,
) -> Option<String> {
    let Some(family) = family else {
        return Some(
            "the exact search covers one chunk a stage, and two in a V or looped (v = 2) only"
                .into(),
        );
    };
    beyond_the_search(family, stages, microbatches, share).or_else(|| {
        (!stage_costs.is_empty() || fold.shares(stages))
            .then(|| "the exact search takes even stages, one device each".to_string())
    })
}

/// Why the optimum does not bound a schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unbounded {
    /// It is not of the optimum's family (its chunks or their placement differ).
    Family,
    /// It holds more activations a stage than the optimum was allowed.
    Memory,
}

/// How much longer `row`'s schedule is than `optimum`, which was allowed `memory` chunk
/// activations a stage (none: unlimited), as a fraction; or why the optimum does not bound it.
pub fn gap(optimum: &Optimum, memory: Option<usize>, row: &FigureRow) -> Result<f64, Unbounded> {
    let peak = row.sim.peak_activations.iter().copied().max().unwrap_or(0);
    if Family::of(row.schedule.kind, row.schedule.chunks) != Some(optimum.family) {
        Err(Unbounded::Family)
    } else if memory.is_some_and(|k| peak > k) {
        Err(Unbounded::Memory)
    } else {
        Ok(row.sim.makespan_ns as f64 / optimum.makespan_ns.max(1) as f64 - 1.0)
    }
}

/// Plans `spec`'s schedule for its costs, simulates it, and searches as `spec.search` says.
pub fn study(spec: &Spec) -> Result<Study, ScheduleError> {
    let chunks = spec.kind.chunks(spec.chunks);
    let costs = spec.share.per_chunk(spec.kind.passes(spec.chunks));
    let figure = Figure::single(
        spec.kind,
        spec.stages,
        spec.microbatches,
        spec.chunks,
        &costs,
        spec.memory_limit,
        &spec.stage_costs,
        spec.fold,
    )?;
    let tracks = lanes(spec.stages, spec.fold)?;
    let textbook = bubble_formula(spec.kind, spec.stages, spec.microbatches, chunks);
    let mut study = Study {
        figure,
        costs,
        tracks,
        textbook,
        optimum: None,
    };
    let family = Family::of(spec.kind, chunks);
    let why_not = || {
        beyond_search(
            family,
            spec.stages,
            spec.microbatches,
            &spec.share,
            &spec.stage_costs,
            spec.fold,
        )
    };
    let (memory, budget) = match spec.search {
        Search::Off => return Ok(study),
        Search::UnderTheLimit => {
            if let Some(reason) = why_not() {
                return Err(ScheduleError::BeyondTheSearch { reason });
            }
            (spec.memory_limit.map(|k| k * chunks), NODE_BUDGET)
        }
        Search::AtItsPeak { budget } => {
            if why_not().is_some() {
                return Ok(study);
            }
            let peak = study.row().sim.peak_activations.iter().copied().max();
            (Some(peak.unwrap_or(1).max(1)), budget)
        }
    };
    let Some(family) = family else {
        return Ok(study);
    };
    let searched = optimal_within(
        family,
        spec.stages,
        spec.microbatches,
        &spec.share.per_chunk(family.chunks()),
        memory,
        budget,
        Some(&study.row().schedule),
    );
    let optimum = match (searched, spec.search) {
        (Ok(optimum), _) => optimum,
        // The lab shows no optimum rather than no figure.
        (Err(_), Search::AtItsPeak { .. }) => return Ok(study),
        (Err(e), _) => return Err(e),
    };
    let gap = gap(&optimum, memory, study.row());
    study.optimum = Some(Found {
        optimum,
        memory,
        gap,
    });
    Ok(study)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kind: ScheduleKind, memory_limit: Option<usize>, search: Search) -> Spec {
        Spec {
            kind,
            stages: 4,
            microbatches: 6,
            chunks: 2,
            share: Costs::compute_only(100_000, 100_000, 100_000),
            memory_limit,
            stage_costs: Vec::new(),
            fold: Fold::OnePerStage,
            search,
        }
    }

    #[test]
    fn the_gap_is_said_only_where_the_optimum_bounds_the_schedule() {
        let s = study(&spec(ScheduleKind::OneFOneB, None, Search::UnderTheLimit)).unwrap();
        let found = s.optimum.unwrap();
        assert!(found.optimum.proven);
        let gap = found.gap.unwrap();
        assert!(gap >= 0.0, "1F1B is never shorter than the optimum: {gap}");
        // ZB-H1 holds more than 3 activations a stage: an optimum held to 3 does not bound it.
        let held = study(&spec(ScheduleKind::ZbH1, Some(3), Search::UnderTheLimit)).unwrap();
        assert_eq!(held.optimum.unwrap().gap, Err(Unbounded::Memory));
        // Interleaved is bounded by the two-chunk looped optimum, not the one-chunk one.
        let mut interleaved = spec(
            ScheduleKind::Interleaved,
            None,
            Search::AtItsPeak { budget: 200_000 },
        );
        interleaved.microbatches = 4;
        let chunks = study(&interleaved).unwrap();
        let found = chunks.optimum.unwrap();
        assert_eq!(found.optimum.family, Family::Interleaved);
        assert!(found.gap.unwrap() >= 0.0);
        let row = study(&spec(ScheduleKind::OneFOneB, None, Search::Off)).unwrap();
        assert_eq!(
            super::gap(&found.optimum, None, row.row()),
            Err(Unbounded::Family)
        );
        // At its own peak, the lab's search bounds the schedule.
        let lab = study(&spec(
            ScheduleKind::ZbH1,
            None,
            Search::AtItsPeak { budget: 30_000 },
        ));
        assert!(lab.unwrap().optimum.unwrap().gap.is_ok());
    }

    #[test]
    fn a_setting_past_the_search_is_refused_or_left_without_an_optimum() {
        let mut big = spec(ScheduleKind::OneFOneB, None, Search::UnderTheLimit);
        big.stages = 16;
        assert!(matches!(
            study(&big),
            Err(ScheduleError::BeyondTheSearch { .. })
        ));
        big.search = Search::AtItsPeak { budget: 100 };
        let s = study(&big).unwrap();
        assert!(s.optimum.is_none());
        assert_eq!(s.tracks.len(), 16);
        assert_eq!(s.textbook, Some(15.0 / 21.0));
    }
}
