#![allow(clippy::unwrap_used)]
//! The figure's layout and its SVG: blocks, gaps, legend, hatching, themes and numbers.
use std::collections::HashMap;

use super::build::{LABEL_SHRINK, nice_step};
use super::layout::text_width;
use super::style::{CURSOR, Style};
use super::svg::{escape, num};
use super::*;
use crate::trace::Lane;

/// The four schedules these tests were written for.
const FOUR: [ScheduleKind; 4] = [
    ScheduleKind::GPipe,
    ScheduleKind::OneFOneB,
    ScheduleKind::Interleaved,
    ScheduleKind::ZbH1,
];

fn compare() -> Figure {
    Figure::compare(
        &FOUR,
        4,
        8,
        2,
        &Costs::compute_only(100, 100, 100),
        None,
        &[],
        Fold::OnePerStage,
    )
    .unwrap()
}

fn makespans(f: &Figure) -> Vec<u64> {
    f.rows.iter().map(|r| r.sim.makespan_ns).collect()
}

fn rects(l: &Layout) -> impl Iterator<Item = (f32, f32, f32, f32, Rgba, Option<Rgba>)> + '_ {
    l.shapes.iter().filter_map(|s| match s {
        Shape::Rect {
            x,
            y,
            w,
            h,
            fill,
            hatch,
            ..
        } => Some((*x, *y, *w, *h, *fill, *hatch)),
        _ => None,
    })
}

fn texts(l: &Layout) -> impl Iterator<Item = (f32, f32, &str, f32)> + '_ {
    l.shapes.iter().filter_map(|s| match s {
        Shape::Text {
            x, y, text, size, ..
        } => Some((*x, *y, text.as_str(), *size)),
        _ => None,
    })
}

/// At the same model cost per stage, interleaving (chunk ops of F/v) and splitting the
/// backward (ZB-H1) both finish before 1F1B; GPipe ties with 1F1B. Same work everywhere.
#[test]
fn compare_orders_the_makespans_at_equal_model_cost() {
    for scale in [1, 1000] {
        let f = Figure::compare(
            &FOUR,
            4,
            8,
            2,
            &Costs::compute_only(100 * scale, 100 * scale, 100 * scale),
            None,
            &[],
            Fold::OnePerStage,
        )
        .unwrap();
        let kinds: Vec<_> = f.rows.iter().map(|r| r.schedule.kind).collect();
        assert_eq!(kinds, FOUR);
        let [gpipe, one, inter, zb] = makespans(&f)[..] else {
            panic!("four rows")
        };
        assert!(inter < one, "interleaved {inter} vs 1F1B {one}");
        assert!(zb < one, "ZB-H1 {zb} vs 1F1B {one}");
        assert_eq!(gpipe, one);
        assert_eq!(
            makespans(&f),
            [3300, 3300, 2850, 2700].map(|t| t * scale),
            "(m + p − 1)·3F; 2·8·1.5F + 3·1.5F; 8·3F + 3F"
        );
        for r in &f.rows {
            assert_eq!(r.sim.busy_ns, vec![2400 * scale; 4], "{}", r.title);
        }
    }
    // Uneven splits round each chunk op up: never cheaper than the whole.
    let f = Figure::compare(
        &FOUR,
        2,
        4,
        3,
        &Costs::compute_only(10, 10, 10),
        None,
        &[],
        Fold::OnePerStage,
    )
    .unwrap();
    assert_eq!(f.rows[2].sim.busy_ns, vec![4 * 3 * (4 + 8); 2]);
}

/// Every compute op of every schedule is one block, in the layout as a rect of its kind's
/// colour, labelled with its microbatch (from 1) whenever the label fits.
#[test]
fn every_op_is_one_block_with_its_microbatch_label() {
    let mut figures = vec![compare()];
    for kind in ScheduleKind::ALL {
        let c = Costs::stage_model(30, 50, 20, kind.passes(3));
        let (p, m) = if kind == ScheduleKind::DualPipe {
            (4, 8)
        } else {
            (3, 6)
        };
        figures.push(Figure::single(kind, p, m, 3, &c, None, &[], Fold::OnePerStage).unwrap());
    }
    for fig in &figures {
        for (width, theme) in [(1600.0, Theme::Projector), (500.0, Theme::Screen)] {
            let l = fig.layout(width, theme, None);
            let mut want: HashMap<(usize, usize, OpKind, usize, usize), usize> = HashMap::new();
            for (row, r) in fig.rows.iter().enumerate() {
                for (stage, ops) in r.schedule.ops.iter().enumerate() {
                    for op in ops.iter().filter(|o| o.kind.is_compute()) {
                        *want
                            .entry((row, stage, op.kind, op.microbatch, op.chunk))
                            .or_default() += 1;
                    }
                }
            }
            let mut got = HashMap::new();
            for p in &l.blocks {
                let b = p.block;
                *got.entry((p.row, b.stage, b.kind, b.microbatch.unwrap(), b.chunk))
                    .or_insert(0) += 1;
            }
            assert_eq!(got, want);
            let all_rects: Vec<_> = rects(&l).collect();
            let all_texts: Vec<_> = texts(&l).collect();
            let mut labelled = 0;
            for p in &l.blocks {
                let v = fig.rows[p.row].schedule.chunks;
                let color = block_color(p.block.kind, p.block.chunk, v);
                let drawn = all_rects
                    .iter()
                    .filter(|r| (r.0, r.1, r.2, r.3, r.4) == (p.x, p.y, p.w, p.h, color))
                    .count();
                assert_eq!(drawn, 1, "{p:?} {:?}", fig.rows[p.row].schedule.kind);
                let label = (p.block.microbatch.unwrap() + 1).to_string();
                let inside: Vec<_> = all_texts
                    .iter()
                    .filter(|t| t.0 > p.x && t.0 < p.x + p.w && t.1 > p.y && t.1 < p.y + p.h)
                    .collect();
                if p.labelled {
                    labelled += 1;
                    assert_eq!(inside.len(), 1, "{p:?}");
                    assert_eq!(inside[0].2, label);
                    assert!(text_width(&label, inside[0].3, true) < p.w);
                } else {
                    assert!(inside.is_empty(), "{p:?}: {inside:?}");
                    // The layout's rule: the label and its padding would not fit, even
                    // shrunk as far as it may be.
                    let st = Style::of(theme);
                    let size = LABEL_SHRINK * st.label;
                    let need = text_width(&label, size, true) + 0.2 * size + st.stroke;
                    assert!(need > p.w, "{p:?}");
                }
            }
            let four = fig.rows.iter().all(|r| FOUR.contains(&r.schedule.kind));
            if theme == Theme::Projector && four {
                // Wide and large enough for every number at these shapes (not yet for the
                // V and bidirectional schedules' half-size chunk ops).
                assert_eq!(labelled, l.blocks.len());
                let small = all_texts.iter().map(|t| t.3).fold(f32::MAX, f32::min);
                assert!(small >= 18.0, "{small} px text on a projector");
            }
        }
    }
    // Too narrow for numbers, even shrunk (64 microbatches at the narrowest width): blocks
    // still drawn, not labelled.
    let many = Figure::compare(
        &FOUR,
        4,
        64,
        2,
        &Costs::compute_only(100, 100, 100),
        None,
        &[],
        Fold::OnePerStage,
    )
    .unwrap();
    let l = many.layout(10.0, Theme::Screen, None);
    let inter: Vec<_> = l.blocks.iter().filter(|p| p.row == 2).collect();
    assert_eq!(inter.len(), 2 * 64 * 4 * 2);
    assert!(inter.iter().any(|p| !p.labelled));
}

/// Issue 38: the V and bidirectional schedules' chunk ops are half a stage's F wide in a
/// comparison, and lost their microbatch numbers on a projector. They keep them now, in a
/// smaller font where the full size does not fit, and the SVG carries them.
#[test]
fn half_width_chunk_blocks_keep_their_numbers() {
    let kinds = [
        ScheduleKind::OneFOneB,
        ScheduleKind::ZbV,
        ScheduleKind::DualPipe,
        ScheduleKind::DualPipeV,
    ];
    let fig = Figure::compare(
        &kinds,
        4,
        8,
        2,
        &Costs::compute_only(1000, 1000, 1000),
        None,
        &[],
        Fold::OnePerStage,
    )
    .unwrap();
    assert_eq!(fig.rows.len(), 4);
    let st = Style::of(Theme::Projector);
    for width in [1280.0, 1600.0] {
        let l = fig.layout(width, Theme::Projector, None);
        let all_texts: Vec<_> = texts(&l).collect();
        let mut shrunk = 0;
        for p in &l.blocks {
            assert!(p.labelled, "{p:?} at {width} px");
            let label = (p.block.microbatch.unwrap() + 1).to_string();
            let inside: Vec<_> = all_texts
                .iter()
                .filter(|t| t.0 > p.x && t.0 < p.x + p.w && t.1 > p.y && t.1 < p.y + p.h)
                .collect();
            assert_eq!(inside.len(), 1, "{p:?}");
            let (text, size) = (inside[0].2, inside[0].3);
            assert_eq!(text, label);
            assert!(size >= LABEL_SHRINK * st.label && size <= st.label);
            assert!(text_width(text, size, true) + 0.2 * size + st.stroke <= p.w + 1e-3);
            shrunk += usize::from(size < st.label);
        }
        // At 1280 px (a projector's width) the half-width blocks need the smaller size.
        assert!(
            width > 1280.0 || shrunk > 0,
            "no half-width block at {width} px needed a smaller number"
        );
        // The SVG (and the PNG drawn from it) writes every number.
        let doc = svg(&l);
        assert_eq!(doc.matches("<text ").count(), all_texts.len());
    }
}

/// Issue 38: folded, the lanes' shades are the stages a device holds, and the legend says
/// so; unfolded, they are chunks.
#[test]
fn the_legend_names_stage_shades_as_stages_when_folded() {
    let legend = |fold: Fold, kind: ScheduleKind| {
        let fig = Figure::single(
            kind,
            4,
            8,
            2,
            &Costs::compute_only(1, 1, 1),
            None,
            &[],
            fold,
        )
        .unwrap();
        let l = fig.layout(1400.0, Theme::Screen, None);
        texts(&l)
            .map(|t| t.2.to_owned())
            .filter(|t| t.starts_with("chunk ") || t.starts_with("device's "))
            .collect::<Vec<_>>()
    };
    let folded = legend(Fold::Blocks { devices: 2 }, ScheduleKind::OneFOneB);
    assert!(!folded.iter().any(|t| t.starts_with("chunk")), "{folded:?}");
    assert_eq!(
        folded,
        ["device's stage 0", "device's stage 1, darker"],
        "{folded:?}"
    );
    let chunks = legend(Fold::OnePerStage, ScheduleKind::Interleaved);
    assert!(chunks.iter().any(|t| t == "chunk 1, darker"), "{chunks:?}");
    let both = legend(Fold::RoundRobin { devices: 2 }, ScheduleKind::Interleaved);
    assert!(
        both.iter().any(|t| t == "device's chunk 3, darker"),
        "{both:?}"
    );
}

/// Idle stretches, found independently by sweeping time unit by unit, are exactly the
/// hatched cells (plus the legend's one), and they add up to the simulation's idle time.
#[test]
fn every_idle_gap_is_hatched_once() {
    for fig in [
        Figure::compare(
            &FOUR,
            4,
            8,
            2,
            &Costs::compute_only(1, 1, 1),
            None,
            &[],
            Fold::OnePerStage,
        )
        .unwrap(),
        Figure::compare(
            &FOUR,
            3,
            3,
            3,
            &Costs::compute_only(2, 3, 1),
            None,
            &[],
            Fold::OnePerStage,
        )
        .unwrap(),
    ] {
        let mut gaps = 0;
        let mut idle = 0;
        for r in &fig.rows {
            let t_end = r.sim.makespan_ns;
            for stage in 0..r.schedule.stages {
                let busy = |t: u64| {
                    r.sim.events.iter().any(|e| {
                        e.device == stage
                            && e.lane == Lane::Compute
                            && e.start_ns <= t
                            && t < e.end_ns
                    })
                };
                let mut was_busy = true;
                for t in 0..t_end {
                    let b = busy(t);
                    if !b && was_busy {
                        gaps += 1;
                    }
                    idle += u64::from(!b);
                    was_busy = b;
                }
            }
            assert_eq!(
                r.gaps().iter().map(|g| g.end_ns - g.start_ns).sum::<u64>(),
                r.sim.idle_ns().iter().sum::<u64>()
            );
        }
        assert_eq!(fig.rows.iter().map(|r| r.gaps().len()).sum::<usize>(), gaps);
        let l = fig.layout(1200.0, Theme::Projector, None);
        let hatched: Vec<_> = rects(&l).filter(|r| r.5.is_some()).collect();
        assert_eq!(hatched.len(), gaps + 1, "one per gap and the legend's");
        let px_per_ns =
            l.blocks[0].w / (l.blocks[0].block.end_ns - l.blocks[0].block.start_ns) as f32;
        let lane_h = l.blocks[0].h;
        let width: f32 = hatched.iter().filter(|r| r.3 == lane_h).map(|r| r.2).sum();
        assert!(
            (width / px_per_ns - idle as f32).abs() < 0.01 * idle as f32,
            "{width} px hatched for {idle} ns idle"
        );
    }
}

#[test]
fn progress_dims_what_has_not_started() {
    let fig = compare();
    let t = fig.rows[1].sim.makespan_ns / 2;
    let l = fig.layout(1600.0, Theme::Projector, Some(t));
    let all: Vec<_> = rects(&l).collect();
    let (mut dim, mut lit) = (0, 0);
    for p in &l.blocks {
        let color = block_color(p.block.kind, p.block.chunk, fig.rows[p.row].schedule.chunks);
        let fill = all
            .iter()
            .find(|r| (r.0, r.1, r.2, r.3) == (p.x, p.y, p.w, p.h))
            .unwrap()
            .4;
        if p.block.start_ns > t {
            assert_ne!(fill, color);
            dim += 1;
        } else {
            assert_eq!(fill, color);
            lit += 1;
        }
    }
    assert!(dim > 0 && lit > 0);
    let cursors = l
        .shapes
        .iter()
        .filter(|s| matches!(s, Shape::Line { color, .. } if *color == CURSOR))
        .count();
    assert_eq!(cursors, fig.rows.len());
    assert_eq!(
        fig.layout(1600.0, Theme::Projector, None),
        fig.layout(1600.0, Theme::Projector, None)
    );
}

#[test]
fn themes_differ_as_promised() {
    let fig = compare();
    let proj = fig.layout(1600.0, Theme::Projector, None);
    let screen = fig.layout(1600.0, Theme::Screen, None);
    assert!(proj.background.luma() > 200.0);
    assert!(screen.background.luma() < 60.0);
    assert!(proj.blocks[0].h > 1.5 * screen.blocks[0].h);
    assert!(texts(&proj).all(|t| t.3 >= 18.0));
    assert!(proj.width >= 1600.0 && proj.height > 0.0);
    // Shorter schedules are visibly shorter on the shared axis.
    let end = |row: usize| {
        proj.blocks
            .iter()
            .filter(|p| p.row == row)
            .map(|p| p.x + p.w)
            .fold(0.0, f32::max)
    };
    assert!(end(3) < end(2) && end(2) < end(1) - 50.0);
    let stats: Vec<_> = texts(&proj)
        .filter(|t| t.2.starts_with("makespan"))
        .collect();
    assert_eq!(stats.len(), 4);
    assert_eq!(stats[1].2, "makespan 3300 ns, bubble 900 ns (27.3%)");
    assert_eq!(stats[2].2, "makespan 2850 ns, bubble 450 ns (15.8%)");
}

#[test]
fn hatch_lines_stay_inside_and_line_up_across_cells() {
    let (s, eps) = (7.0, 1e-3);
    let a = hatch_lines(10.0, 20.0, 33.0, 12.0, s);
    let b = hatch_lines(43.0, 20.0, 20.0, 12.0, s);
    assert!(!a.is_empty() && !b.is_empty());
    for (seg, (x, y, w, h)) in a
        .iter()
        .map(|l| (l, (10.0, 20.0, 33.0, 12.0)))
        .chain(b.iter().map(|l| (l, (43.0, 20.0, 20.0, 12.0))))
    {
        let [x0, y0, x1, y1] = *seg;
        for (px, py) in [(x0, y0), (x1, y1)] {
            assert!(px >= x - eps && px <= x + w + eps && py >= y - eps && py <= y + h + eps);
        }
        assert!(((x1 - x0) + (y1 - y0)).abs() < eps, "45°: {seg:?}");
        let k = (x0 + y0) / s;
        assert!((k - k.round()).abs() < eps, "on the grid: {seg:?}");
    }
    // Lines leaving a's right edge enter b's left edge at the same point.
    // (A line through the top right corner touches b in one point only.)
    let right: Vec<f32> = a
        .iter()
        .filter(|l| (l[2] - 43.0).abs() < eps && l[3] > 20.0 + eps)
        .map(|l| l[3])
        .collect();
    assert!(!right.is_empty());
    let left: Vec<f32> = b
        .iter()
        .filter(|l| (l[0] - 43.0).abs() < eps)
        .map(|l| l[1])
        .collect();
    for y in &right {
        assert!(left.iter().any(|l| (l - y).abs() < eps), "{y} in {left:?}");
    }
    assert!(hatch_lines(0.0, 0.0, 0.0, 5.0, s).is_empty());
    assert!(hatch_lines(0.0, 0.0, 5.0, 5.0, 0.0).is_empty());
}

/// A minimal XML well-formedness check: balanced tags, one root, quoted attributes, and
/// `&` only in the five entities or character references.
fn check_xml(doc: &str) -> Result<(), String> {
    fn entities(text: &str) -> Result<(), String> {
        let mut rest = text;
        while let Some(i) = rest.find('&') {
            rest = &rest[i + 1..];
            let end = rest.find(';').ok_or(format!("bare & in {text:?}"))?;
            let name = &rest[..end];
            let ok = ["amp", "lt", "gt", "quot", "apos"].contains(&name)
                || name
                    .strip_prefix('#')
                    .is_some_and(|n| n.parse::<u32>().is_ok());
            if !ok {
                return Err(format!("bad entity &{name}; in {text:?}"));
            }
        }
        if text.contains('<') {
            return Err(format!("raw < in {text:?}"));
        }
        Ok(())
    }
    let mut stack: Vec<&str> = Vec::new();
    let mut roots = 0;
    let mut rest = doc;
    while let Some(i) = rest.find('<') {
        let text = &rest[..i];
        if stack.is_empty() && !text.trim().is_empty() {
            return Err(format!("text outside the root: {text:?}"));
        }
        entities(text)?;
        rest = &rest[i + 1..];
        let end = rest.find('>').ok_or("unclosed tag")?;
        let tag = &rest[..end];
        rest = &rest[end + 1..];
        if let Some(name) = tag.strip_prefix('/') {
            match stack.pop() {
                Some(open) if open == name => continue,
                other => return Err(format!("</{name}> closes {other:?}")),
            }
        }
        let closed = tag.ends_with('/');
        let body = tag.trim_end_matches('/');
        let (name, mut attrs) = body.split_once(' ').unwrap_or((body, ""));
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(format!("bad tag name {name:?}"));
        }
        loop {
            attrs = attrs.trim_start();
            if attrs.is_empty() {
                break;
            }
            let (key, after) = attrs
                .split_once("=\"")
                .ok_or(format!("bad attribute in {tag:?}"))?;
            if key.is_empty() || key.contains(char::is_whitespace) {
                return Err(format!("bad attribute name {key:?}"));
            }
            let (value, after) = after.split_once('"').ok_or("unterminated value")?;
            entities(value)?;
            attrs = after;
        }
        if stack.is_empty() {
            roots += 1;
        }
        if !closed {
            stack.push(name);
        }
    }
    if !rest.trim().is_empty() || !stack.is_empty() || roots != 1 {
        return Err(format!(
            "unbalanced: open {stack:?}, {roots} roots, tail {rest:?}"
        ));
    }
    Ok(())
}

#[test]
fn svg_is_well_formed_and_escapes_text() {
    let mut fig = compare();
    fig.caption = r#"a < b & "c" 'd' > e"#.into();
    fig.rows[0].title = "GPipe & <friends>".into();
    for theme in [Theme::Projector, Theme::Screen] {
        let l = fig.layout(1400.0, theme, Some(1000));
        let doc = svg(&l);
        check_xml(&doc).unwrap();
        assert!(doc.starts_with(r#"<svg xmlns="http://www.w3.org/2000/svg" width="1400""#));
        assert!(doc.contains(&format!(r#"viewBox="0 0 1400 {}""#, num(l.height))));
        assert!(doc.contains("a &lt; b &amp; &quot;c&quot; &apos;d&apos; &gt; e"));
        assert!(doc.contains("GPipe &amp; &lt;friends&gt;"));
        assert_eq!(doc.matches("<text ").count(), texts(&l).count());
        let hatched = rects(&l).filter(|r| r.5.is_some()).count();
        assert_eq!(doc.matches("<path ").count(), hatched);
        assert!(!doc.contains("NaN") && !doc.contains("inf"));
    }
    // The checker itself catches what it should.
    for bad in [
        "<svg><text>a & b</text></svg>",
        "<svg><text>a</svg>",
        "<svg></svg><svg></svg>",
        "<svg x=1/>",
        "<svg><text>&bogus;</text></svg>",
    ] {
        assert!(check_xml(bad).is_err(), "{bad}");
    }
    check_xml(r#"<svg a="1"><g/><text>x &amp; y &#955;</text></svg>"#).unwrap();
    assert_eq!(escape("\u{1}ok\t"), "ok\t");
    assert_eq!(num(f32::NAN), "0");
    assert_eq!(num(12.3456), "12.35");
    assert_eq!(num(3.0), "3");
}

#[test]
fn units_ticks_and_numbers_read_well() {
    assert_eq!(Unit::for_span(3_300_000).format(900_000), "900 µs");
    assert_eq!(Unit::for_span(9_999).format(250), "250 ns");
    assert_eq!(Unit::for_span(33_000_000).format(2_500_000), "2.5 ms");
    assert_eq!(Unit::for_span(3_000_000).format(2_900_060), "2900 µs");
    assert_eq!(Unit::for_span(3_000_000).format(33_334), "33.3 µs");
    assert_eq!(Unit::for_span(3_000_000).format(2_346), "2.35 µs");
    assert_eq!(nice_step(330.0), 500.0);
    assert_eq!(nice_step(230.0), 250.0);
    assert_eq!(nice_step(0.2), 1.0);
    assert_eq!(nice_step(f64::NAN), 1.0);
    let l = compare().layout(1600.0, Theme::Projector, None);
    let ticks: Vec<&str> = texts(&l)
        .map(|t| t.2)
        .filter(|t| t.parse::<u64>().is_ok_and(|n| n % 500 == 0 && n > 9))
        .collect();
    assert_eq!(ticks, ["500", "1000", "1500", "2000", "2500", "3000"]);
}
