//! Where things go in one frame: the sizes and fonts of the theme ([`Look`]), the rows area's
//! items top to bottom ([`layout`]: process headers, tracks, counters) and what a frame draws
//! with ([`Frame`]).

use std::ops::Range;

use egui::{Color32, FontId, Rect, TextStyle, Ui};

use crate::timeline::data::{CounterRow, TimelineData, Track};
use crate::timeline::view::TimeView;

/// Sizes at egui's default body text (the screen theme); larger type scales them.
const LABEL_W: f32 = 150.0;
pub(super) const ROW_H: f32 = 22.0;
const AXIS_H: f32 = 18.0;
/// Label columns never grow wider than this (times the theme's scale).
const LABEL_W_MAX: f32 = 340.0;

/// Sizes and fonts of one frame, from the theme's body text.
#[derive(Debug, Clone)]
pub struct Look {
    pub row_h: f32,
    pub axis_h: f32,
    pub label_w: f32,
    pub label: FontId,
    pub axis: FontId,
    pub name: FontId,
    /// Bars and idle for a light background (the projector theme): stronger colours.
    pub light: bool,
}

impl Look {
    /// The screen theme's look, with the default label column.
    pub fn screen() -> Self {
        Self::scaled(1.0, false)
    }

    fn scaled(k: f32, light: bool) -> Self {
        Self {
            row_h: ROW_H * k,
            axis_h: AXIS_H * k,
            label_w: LABEL_W * k,
            label: FontId::proportional(12.0 * k),
            axis: FontId::monospace(10.0 * k),
            name: FontId::proportional(11.0 * k),
            light,
        }
    }

    /// The look in `ui`'s theme, the label column wide enough for `data`'s row titles.
    pub fn of(ui: &Ui, data: &TimelineData) -> Self {
        // egui's default body size, once: the sizes above are for it.
        static DEFAULT_BODY: std::sync::OnceLock<f32> = std::sync::OnceLock::new();
        let default =
            *DEFAULT_BODY.get_or_init(|| TextStyle::Body.resolve(&egui::Style::default()).size);
        let body = TextStyle::Body.resolve(ui.style()).size;
        let k = (body / default).max(1.0);
        let mut look = Self::scaled(k, !ui.visuals().dark_mode);
        if !data.row_titles.is_empty() || !data.counters.is_empty() {
            let widest = data
                .row_titles
                .values()
                .chain(data.counters.iter().map(|c| &c.name))
                .map(|t| {
                    ui.painter()
                        .layout_no_wrap(t.clone(), look.label.clone(), Color32::WHITE)
                        .size()
                        .x
                })
                .fold(0.0, f32::max);
            look.label_w = (widest + 12.0).clamp(LABEL_W * k, LABEL_W_MAX * k);
        }
        look
    }

    fn header_h(&self) -> f32 {
        self.row_h
    }

    fn counter_h(&self) -> f32 {
        (self.row_h * 1.6).round()
    }
}

/// One thing in the rows area.
#[derive(Debug, Clone, Copy)]
pub enum Item<'a> {
    /// A process's title, above its rows.
    Header(&'a str),
    Track(&'a Track),
    Counter(&'a CounterRow),
}

/// An item and where it sits: `y` from the top of the rows (unscrolled), `h` tall.
#[derive(Debug, Clone, Copy)]
pub struct Placed<'a> {
    pub item: Item<'a>,
    pub y: f32,
    pub h: f32,
}

/// The rows of `data` top to bottom: for each group (a process of a foreign trace), its title,
/// its tracks, then its counters; a gangway device's counters follow its tracks; counters of
/// no shown group come last.
pub fn layout<'a>(data: &'a TimelineData, look: &Look) -> Vec<Placed<'a>> {
    let tracks = data.tracks();
    let mut counters_after: Vec<Vec<&CounterRow>> = vec![Vec::new(); tracks.len()];
    let mut trailing = Vec::new();
    for c in &data.counters {
        let last = tracks.iter().rposition(|t| {
            c.device == Some(t.device)
                || (c.group.is_some() && c.group.as_deref() == data.group_of(t.device))
        });
        match last {
            Some(i) => counters_after[i].push(c),
            None => trailing.push(c),
        }
    }
    let mut out = Vec::new();
    let mut y = 0.0;
    let mut place = |item, h: f32, out: &mut Vec<Placed<'a>>| {
        out.push(Placed { item, y, h });
        y += h;
    };
    let mut group: Option<&str> = None;
    for (t, after) in tracks.iter().zip(&counters_after) {
        let g = data.group_of(t.device);
        if g.is_some() && g != group {
            place(
                Item::Header(g.unwrap_or_default()),
                look.header_h(),
                &mut out,
            );
        }
        group = g;
        place(Item::Track(t), t.row_count() as f32 * look.row_h, &mut out);
        for c in after {
            place(Item::Counter(c), look.counter_h(), &mut out);
        }
    }
    let mut group: Option<&str> = None;
    for c in trailing {
        if c.group.is_some() && c.group.as_deref() != group {
            place(
                Item::Header(c.group.as_deref().unwrap_or_default()),
                look.header_h(),
                &mut out,
            );
            group = c.group.as_deref();
        }
        place(Item::Counter(c), look.counter_h(), &mut out);
    }
    out
}

/// What one frame draws with.
pub(super) struct Frame<'a> {
    pub(super) look: &'a Look,
    pub(super) placed: &'a [Placed<'a>],
    pub(super) rect: Rect,
    pub(super) bar_rect: Rect,
    pub(super) view: TimeView,
    pub(super) scroll: f32,
    pub(super) span: Option<&'a Range<u64>>,
}
