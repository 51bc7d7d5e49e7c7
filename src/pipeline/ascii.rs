//! The textbook picture of a pipeline in plain text: one row per stage, `F`, `B`, `W` where it
//! computes and `.` where it idles. It reads only compute-lane kernel events, so a real run's
//! trace draws the same way as a simulation.

use std::ops::Range;

use crate::trace::{Event, PipelineOp};

const LETTERS: [char; 3] = ['F', 'B', 'W'];

/// Draws `window` of `events` for devices `0..stages` in at most `width` columns.
///
/// When the window is at most `width` times the shortest op, each column is exactly that op's
/// length, so unit costs give the textbook picture; otherwise the window is split evenly into
/// `width` columns. A column shows whichever of F, B, W or idle covers most of its slice (ties
/// go to the op, so short ops stay visible). Only pipeline ops are drawn: compute-lane kernels
/// marked as `F`, `B` or `W` ([`PipelineOp::of`]).
pub fn timeline(events: &[Event], stages: usize, window: Range<u64>, width: usize) -> String {
    timeline_named(events, stages, "stage", window, width)
}

/// [`timeline`] with each row named `<name> <i>` ("device" for stages folded onto devices).
pub fn timeline_named(
    events: &[Event],
    stages: usize,
    name: &str,
    window: Range<u64>,
    width: usize,
) -> String {
    let span = window.end.saturating_sub(window.start);
    let drawn: Vec<(&Event, usize)> = events
        .iter()
        .filter(|e| e.device < stages)
        .filter(|e| e.start_ns < window.end && e.end_ns > window.start && e.end_ns > e.start_ns)
        .filter_map(|e| {
            let letter = match PipelineOp::of(e)? {
                PipelineOp::Forward => 0,
                PipelineOp::Backward => 1,
                PipelineOp::WeightGrad => 2,
            };
            Some((e, letter))
        })
        .collect();
    let bounds = column_bounds(&drawn, &window, span, width);
    let cols = bounds.len().saturating_sub(1);
    let mut cover = vec![[0u64; 3]; stages * cols];
    for (e, letter) in drawn {
        let (from, to) = (e.start_ns.max(window.start), e.end_ns.min(window.end));
        let mut col = bounds.partition_point(|&b| b <= from).saturating_sub(1);
        while col < cols && bounds[col] < to {
            let overlap = to.min(bounds[col + 1]) - from.max(bounds[col]);
            cover[e.device * cols + col][letter] += overlap;
            col += 1;
        }
    }
    let label = stages.saturating_sub(1).to_string().len();
    let mut out = String::new();
    for stage in 0..stages {
        out += &format!("{name} {stage:>label$} |");
        for col in 0..cols {
            let slice = bounds[col + 1] - bounds[col];
            let c = &cover[stage * cols + col];
            // First of F, B, W with the most cover wins ties among letters.
            let best = (0..3).rev().max_by_key(|&i| c[i]).unwrap_or(0);
            let idle = slice.saturating_sub(c.iter().sum());
            let busy = c[best] > 0 && c[best] >= idle;
            out.push(if busy { LETTERS[best] } else { '.' });
        }
        out += "|\n";
    }
    out
}

/// Column edges, `cols + 1` of them, from `window.start` to `window.end`.
fn column_bounds(
    drawn: &[(&Event, usize)],
    window: &Range<u64>,
    span: u64,
    width: usize,
) -> Vec<u64> {
    if span == 0 || width == 0 {
        return vec![window.start];
    }
    let shortest = drawn.iter().map(|(e, _)| e.end_ns - e.start_ns).min();
    if let Some(unit) = shortest
        && span.div_ceil(unit) <= width as u64
    {
        let cols = span.div_ceil(unit);
        return (0..=cols)
            .map(|i| window.start.saturating_add(i * unit).min(window.end))
            .collect();
    }
    (0..=width as u128)
        .map(|i| window.start + (u128::from(span) * i / width as u128) as u64)
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use crate::pipeline::{Costs, Schedule, ScheduleKind, simulate};

    fn gpipe_4x4() -> crate::pipeline::Simulation {
        let s = Schedule::new(ScheduleKind::GPipe, 4, 4, 1).unwrap();
        simulate(&s, &Costs::compute_only(1, 1, 0)).unwrap()
    }

    #[test]
    fn gpipe_unit_costs_draw_the_textbook_picture() {
        let want = "\
stage 0 |FFFF......BBBB|
stage 1 |.FFFF....BBBB.|
stage 2 |..FFFF..BBBB..|
stage 3 |...FFFFBBBB...|
";
        assert_eq!(gpipe_4x4().timeline(80), want);
    }

    #[test]
    fn narrow_width_merges_columns() {
        let want = "\
stage 0 |FF...BB|
stage 1 |FFF.BBB|
stage 2 |.FF.BB.|
stage 3 |.FFFBB.|
";
        assert_eq!(gpipe_4x4().timeline(7), want);
    }

    #[test]
    fn zb_h1_shows_weight_passes() {
        let s = Schedule::new(ScheduleKind::ZbH1, 3, 3, 1).unwrap();
        let sim = simulate(&s, &Costs::compute_only(1, 1, 1)).unwrap();
        let text = sim.timeline(100);
        assert!(text.contains('W'), "{text}");
        assert_eq!(text.lines().count(), 3);
    }

    #[test]
    fn empty_window_and_zero_width_do_not_panic() {
        let sim = gpipe_4x4();
        assert_eq!(
            super::timeline(&sim.events, 2, 5..5, 10),
            "stage 0 ||\nstage 1 ||\n"
        );
        assert_eq!(super::timeline(&sim.events, 1, 0..14, 0), "stage 0 ||\n");
    }
}
