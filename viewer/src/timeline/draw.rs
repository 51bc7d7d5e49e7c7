//! The timeline widget: lanes of bars under a time axis, with process headers and counter
//! tracks for traces that have them, idle gaps shaded, and navigation as in Perfetto: W / S zoom
//! and A / D pan while the pointer is over it, a plain wheel scrolls the rows (the axis stays),
//! ctrl+wheel (or a pinch) zooms about the pointer, shift+wheel or a horizontal wheel pans; and
//! as in puffin: drag pans, click a bar zooms to it, double-click refits. Panning stops at the
//! data's ends (a tenth of the view beyond them), so the trace cannot be lost off screen.
//!
//! As Perfetto draws a trace: counters as filled step plots, instants as markers on their row
//! (global ones as a line across every row), flows as arrows from the end of the sending slice
//! to the start of the receiving one ([`TimelineState::show_flows`] turns them off).
//!
//! Sizes follow the body text style, so the projector theme's large type makes larger rows and
//! labels, and its light background gets stronger colours (see [`RowPalette`]).

use std::ops::Range;

use egui::{
    Align2, Color32, ColorImage, CornerRadius, FontId, Key, Mesh, Pos2, Rect, Sense, Shape, Stroke,
    TextStyle, TextureHandle, TextureOptions, Ui, Vec2,
};
use gangway::trace::Event;

use super::data::{BarKind, CounterRow, TimelineData, Track};
use super::raster::{RowPalette, SHAPE_MIN_PT, paint_row};
use super::view::{TimeView, fitted_tick_step, format_ns, format_tick, format_tick_relative};

/// Sizes at egui's default body text (the screen theme); larger type scales them.
const LABEL_W: f32 = 150.0;
const ROW_H: f32 = 22.0;
const AXIS_H: f32 = 18.0;
/// Label columns never grow wider than this (times the theme's scale).
const LABEL_W_MAX: f32 = 340.0;
/// Fewest rows a timeline that scrolls its rows shows.
const MIN_ROWS_SHOWN: f32 = 3.0;
/// W / S zoom by this factor per second held; A / D pan this many widths per second.
const KEY_ZOOM_PER_S: f32 = 8.0;
const KEY_PAN_WIDTHS_PER_S: f32 = 1.0;

/// Where the time axis counts from: one convention per kind of data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimeAxis {
    /// From the data's first event (`0`, `5 ms`, ...): files, the lab, the comparison.
    #[default]
    FromStart,
    /// Back from the newest event (`−10 s`, `−5 s`, `now`): live data, whose absolute times
    /// mean little.
    BeforeNewest,
}

/// What the timeline remembers between frames.
#[derive(Debug, Clone)]
pub struct TimelineState {
    /// `None` until the first frame with data (then fitted to the data).
    pub view: Option<TimeView>,
    /// Keep the newest events in view.
    pub follow_live: bool,
    /// A vertical marker (the bubble lab's step cursor), in ns.
    pub cursor_ns: Option<u64>,
    /// Width of the bar area last frame, for view maths outside the widget (tests).
    pub last_width: f32,
    /// What the axis labels count from.
    pub axis: TimeAxis,
    /// Set while [`TimelineState::view`] is the fit of the data (nobody panned or zoomed since):
    /// then, each frame the data's span or the bar width differs (new or forgotten events, a
    /// window resize, a new pixels-per-point), the view is fitted again. Panning, zooming and
    /// clicking a bar clear it, and so does setting `view` from outside; double-click and
    /// [`TimelineState::reset`] set it again.
    pub fitted: Option<Fitted>,
    /// Points the rows are scrolled up by, when they are taller than the widget.
    pub scroll_y: f32,
    /// Draw flow arrows (on by default).
    pub show_flows: bool,
}

/// What a fitted view was fitted to (see [`TimelineState::fitted`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Fitted {
    pub span: Range<u64>,
    pub width: f32,
    /// The view the fit gave: a different [`TimelineState::view`] was set by someone else.
    pub view: TimeView,
}

impl Default for TimelineState {
    fn default() -> Self {
        Self {
            view: None,
            follow_live: false,
            cursor_ns: None,
            last_width: 600.0,
            axis: TimeAxis::FromStart,
            fitted: None,
            scroll_y: 0.0,
            show_flows: true,
        }
    }
}

impl TimelineState {
    /// Fits the view to everything in `data` (what double-click does); it then stays fitted
    /// as the data and the width change, until the user pans or zooms.
    pub fn reset(&mut self, data: &TimelineData) {
        self.fit(data.span(), self.last_width);
    }

    fn fit(&mut self, span: Option<Range<u64>>, width: f32) {
        match span {
            Some(span) => {
                let view = TimeView::fit(span.clone(), width);
                self.view = Some(view);
                self.fitted = Some(Fitted { span, width, view });
            }
            None => {
                self.view = None;
                self.fitted = None;
            }
        }
    }

    /// Whether the view is still the fit of the data (see [`TimelineState::fitted`]).
    pub fn is_fitted(&self) -> bool {
        self.fitted
            .as_ref()
            .is_some_and(|f| self.view == Some(f.view))
    }

    /// Before a frame of `bar_w` pixels: fits a missing view, refits a fitted one whose span or
    /// width changed, and forgets a fit that someone moved away from.
    fn refit(&mut self, span: Option<Range<u64>>, bar_w: f32) {
        if self.view.is_none() {
            self.fit(span, bar_w);
        } else if self.is_fitted() {
            let stale = self
                .fitted
                .as_ref()
                .is_some_and(|f| Some(&f.span) != span.as_ref() || (f.width - bar_w).abs() > 0.25);
            if stale {
                self.fit(span, bar_w);
            }
        } else {
            self.fitted = None;
        }
    }

    /// The time axis's origin for `span`: its start, or its end for [`TimeAxis::BeforeNewest`].
    pub fn origin(&self, span: &Range<u64>) -> f64 {
        match self.axis {
            TimeAxis::FromStart => span.start as f64,
            TimeAxis::BeforeNewest => span.end as f64,
        }
    }
}

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

/// The texture of a timeline's rows (one per widget, kept in egui's memory), set to `image`.
fn row_texture(ui: &Ui, id: &str, image: ColorImage) -> egui::TextureId {
    let key = ui.make_persistent_id(("timeline-rows", id));
    let kept = ui.data(|d| d.get_temp::<TextureHandle>(key));
    match kept {
        Some(mut handle) => {
            handle.set(image, TextureOptions::NEAREST);
            handle.id()
        }
        None => {
            let handle = ui.ctx().load_texture(
                format!("timeline rows {id}"),
                image,
                TextureOptions::NEAREST,
            );
            let tex = handle.id();
            ui.data_mut(|d| d.insert_temp(key, handle));
            tex
        }
    }
}

/// Draws `data` and handles navigation. The widget is as tall as its rows, up to the height
/// left in `ui` (at least a few rows): taller rows scroll under a fixed time axis. A frame costs
/// O(pixels × log events) per sub-row in view, however many events are in view.
pub fn timeline(ui: &mut Ui, id: &str, data: &TimelineData, state: &mut TimelineState) {
    let look = Look::of(ui, data);
    let placed = layout(data, &look);
    let rows_h: f32 = placed.last().map_or(0.0, |p| p.y + p.h);
    let content = look.axis_h + rows_h.max(look.row_h) + 4.0;
    let room = ui.available_height();
    let height = if room.is_finite() {
        content.min(room.max(look.axis_h + MIN_ROWS_SHOWN * look.row_h + 4.0))
    } else {
        content
    };
    let width = ui.available_width().max(look.label_w + 50.0);
    let (rect, response) =
        ui.allocate_exact_size(Vec2::new(width, height), Sense::click_and_drag());
    let response = response.on_hover_cursor(egui::CursorIcon::Crosshair);
    let bar_rect = Rect::from_min_max(
        Pos2::new(rect.left() + look.label_w, rect.top() + look.axis_h),
        rect.right_bottom(),
    );
    let bar_w = bar_rect.width();
    state.last_width = bar_w;
    let max_scroll = (content - height).max(0.0);

    let span = data.span();
    state.refit(span.clone(), bar_w);
    let Some(mut view) = state.view else {
        ui.painter().text(
            rect.center(),
            Align2::CENTER_CENTER,
            "no events yet",
            look.label.clone(),
            ui.visuals().weak_text_color(),
        );
        return;
    };

    // --- Navigation ---
    let pointer = response.hover_pos();
    let mut navigated = false;
    if response.dragged() && response.drag_delta().x != 0.0 {
        view.pan_px(response.drag_delta().x);
        state.follow_live = false;
        navigated = true;
    }
    if let Some(pos) = pointer {
        let x = pos.x - bar_rect.left();
        let (zoom, scroll, ctrl, shift) = ui.input(|i| {
            (
                i.zoom_delta(),
                i.smooth_scroll_delta,
                i.modifiers.command,
                i.modifiers.shift,
            )
        });
        if zoom != 1.0 {
            view.zoom_about(zoom, x);
            navigated = true;
        } else if ctrl && scroll.y != 0.0 {
            view.zoom_about((scroll.y / 200.0).exp(), x);
            navigated = true;
        } else if scroll.x != 0.0 || (shift && scroll.y != 0.0) {
            view.pan_px(if scroll.x != 0.0 { scroll.x } else { scroll.y });
            state.follow_live = false;
            navigated = true;
        } else if scroll.y != 0.0 && max_scroll > 0.0 {
            // Rows scroll here, not the page around the widget.
            state.scroll_y -= scroll.y;
            ui.input_mut(|i| i.smooth_scroll_delta.y = 0.0);
        }
        if !ui.ctx().egui_wants_keyboard_input() {
            let (w, s, a, d, dt) = ui.input(|i| {
                (
                    i.key_down(Key::W),
                    i.key_down(Key::S),
                    i.key_down(Key::A),
                    i.key_down(Key::D),
                    i.stable_dt.clamp(0.0, 0.1),
                )
            });
            let zoom = f32::from(i8::from(w) - i8::from(s));
            let pan = f32::from(i8::from(a) - i8::from(d));
            if zoom != 0.0 {
                view.zoom_about(KEY_ZOOM_PER_S.powf(zoom * dt), x);
                navigated = true;
            }
            if pan != 0.0 {
                view.pan_px(pan * KEY_PAN_WIDTHS_PER_S * bar_w * dt);
                state.follow_live = false;
                navigated = true;
            }
            if zoom != 0.0 || pan != 0.0 {
                ui.ctx().request_repaint();
            }
        }
    }
    state.scroll_y = state.scroll_y.clamp(0.0, max_scroll);
    let scroll = state.scroll_y;
    if response.double_clicked() {
        state.fit(span.clone(), bar_w);
        view = state.view.unwrap_or(view);
        navigated = false;
    } else if response.clicked()
        && let Some(pos) = response.interact_pointer_pos()
        && let Some(e) = pick(&placed, &look, &view, bar_rect, scroll, pos)
    {
        view.zoom_to(e.start_ns..e.clamped_end_ns(), bar_w);
        state.follow_live = false;
        navigated = true;
    }
    if navigated {
        state.fitted = None;
        if let Some(span) = &span {
            clamp_to_span(&mut view, span, bar_w);
        }
    }
    if state.follow_live
        && !state.is_fitted()
        && let Some(span) = &span
    {
        view.follow(span.end, bar_w);
    }
    state.view = Some(view);

    paint(
        ui,
        id,
        data,
        state,
        &Frame {
            look: &look,
            placed: &placed,
            rect,
            bar_rect,
            view,
            scroll,
            span: span.as_ref(),
        },
    );

    // Hover text at the pointer (not while dragging: it would chase the pointer).
    if let Some(pos) = pointer
        && !response.dragged()
    {
        let origin = span.as_ref().map(|s| (state.origin(s), state.axis));
        if let Some(e) = pick(&placed, &look, &view, bar_rect, scroll, pos) {
            let e = e.clone();
            tooltip_at_pointer(&response, |ui| event_tooltip(ui, data, &e, origin));
        } else if let Some((c, value)) = counter_at(&placed, &view, bar_rect, scroll, pos) {
            let name = c.name.clone();
            tooltip_at_pointer(&response, |ui| {
                ui.strong(name);
                ui.label(format!("value {}", trim_value(value)));
            });
        }
    }
}

/// Keeps `view` on the data: it may show a tenth of its width beyond either end of `span`, no
/// more (zoomed out past the whole span, the span stays in view).
fn clamp_to_span(view: &mut TimeView, span: &Range<u64>, width: f32) {
    let shown = view.ns_per_px * f64::from(width.max(1.0));
    if !shown.is_finite() || !view.start_ns.is_finite() {
        return;
    }
    let margin = shown * 0.1;
    let (lo, hi) = (span.start as f64 - margin, span.end as f64 + margin - shown);
    view.start_ns = if hi >= lo {
        view.start_ns.clamp(lo, hi)
    } else {
        // Wider than the span and its margins: keep all of the span in view.
        view.start_ns
            .clamp(span.end as f64 + margin - shown, span.start as f64 - margin)
    };
}

/// What one frame draws with.
struct Frame<'a> {
    look: &'a Look,
    placed: &'a [Placed<'a>],
    rect: Rect,
    bar_rect: Rect,
    view: TimeView,
    scroll: f32,
    span: Option<&'a Range<u64>>,
}

/// Paints the axis, the row titles, the rows in view and the cursor.
fn paint(ui: &Ui, id: &str, data: &TimelineData, state: &TimelineState, f: &Frame<'_>) {
    let Frame {
        look,
        placed,
        rect,
        bar_rect,
        view,
        scroll,
        span,
    } = *f;
    // The rows are one texture (see `raster`): each sub-row one quad, so a frame costs a
    // software rasterizer the pixels it covers, not a triangle per bar.
    let painter = ui.painter_at(rect);
    let rows_clip = Rect::from_min_max(Pos2::new(rect.left(), bar_rect.top()), rect.right_bottom());
    let bar_painter = painter.with_clip_rect(bar_rect.intersect(painter.clip_rect()));
    let visuals = ui.visuals();
    let text_color = visuals.text_color();
    let weak = visuals.weak_text_color();
    let palette =
        RowPalette::for_background(visuals.extreme_bg_color, visuals.faint_bg_color, look.light);
    let ppp = ui.ctx().pixels_per_point();
    let bar_w = bar_rect.width();
    let texels = ((bar_w * ppp).round().max(1.0)) as usize;
    // Texel k covers points k..k+1 times `pt_per_texel` from the bar area's left.
    let pt_per_texel = bar_w / texels as f32;
    let tex_view = TimeView {
        start_ns: view.start_ns,
        ns_per_px: view.ns_per_px * f64::from(pt_per_texel),
    };
    let texel_of = |ns: f64| (ns - tex_view.start_ns) / tex_view.ns_per_px;

    // Axis and grid: times from the origin (the data's start, or its newest event).
    let axis = state.axis;
    let origin = span.map_or(0.0, |s| state.origin(s));
    let label_at = |t: f64, step: f64| match axis {
        TimeAxis::BeforeNewest => format_tick_relative(t - origin, step),
        TimeAxis::FromStart => format_tick(t - origin, step),
    };
    let step = fitted_tick_step(&view, bar_w, 90.0 * look.row_h / ROW_H, |t, step| {
        painter
            .layout_no_wrap(label_at(t, step), look.axis.clone(), weak)
            .size()
            .x
    });
    let mut t = origin + ((view.start_ns - origin) / step).ceil() * step;
    let mut grid_x = Vec::new();
    let mut labels_end = f32::NEG_INFINITY;
    while view.x_of(t) <= bar_w && grid_x.len() < 200 {
        grid_x.push(texel_of(t));
        let x = bar_rect.left() + view.x_of(t);
        // Right of the tick, or left of it where the label would run off the edge, unless it
        // would then cover the label before it.
        let galley = painter.layout_no_wrap(label_at(t, step), look.axis.clone(), weak);
        let left = if x + 2.0 + galley.size().x > rect.right() {
            x - 2.0 - galley.size().x
        } else {
            x + 2.0
        };
        if left > labels_end + 4.0 {
            labels_end = left + galley.size().x;
            painter.galley(Pos2::new(left, rect.top()), galley, weak);
        }
        t += step;
    }

    let band = span.map(|s| (texel_of(s.start as f64), texel_of(s.end as f64)));
    // Counters are painted after the gutters, which would cover them.
    let mut counters: Vec<(&CounterRow, f32, f32)> = Vec::new();
    // Where each track's first sub-row is, for instants and flow arrows.
    let mut track_tops: Vec<TrackTop> = Vec::new();
    let mut pixels: Vec<Color32> = Vec::new();
    let mut row_rects = Vec::new();
    let mut shapes = Vec::new();
    let title_painter = painter.with_clip_rect(rows_clip.intersect(painter.clip_rect()));
    let row_h = look.row_h;
    for p in placed {
        let top = bar_rect.top() + p.y - scroll;
        if top + p.h < bar_rect.top() {
            continue;
        }
        if top > rect.bottom() {
            break;
        }
        match p.item {
            Item::Header(title) => {
                title_painter.text(
                    Pos2::new(rect.left() + 4.0, top + p.h / 2.0),
                    Align2::LEFT_CENTER,
                    title,
                    look.label.clone(),
                    text_color,
                );
                title_painter.line_segment(
                    [
                        Pos2::new(rect.left(), top + p.h - 1.0),
                        Pos2::new(rect.right(), top + p.h - 1.0),
                    ],
                    Stroke::new(1.0, weak),
                );
            }
            Item::Counter(c) => {
                row_title(
                    &title_painter,
                    rect,
                    bar_rect,
                    top,
                    p.h,
                    &c.name,
                    look,
                    text_color,
                );
                counters.push((c, top, p.h));
            }
            Item::Track(track) => {
                track_tops.push(TrackTop {
                    track: (track.device, track.lane),
                    top,
                });
                let foreign = data.row_titles.contains_key(&track.device);
                for sub in 0..track.row_count() {
                    let sub_top = top + sub as f32 * row_h;
                    // Every sub-row has a title: the track's on its first, then what the extra
                    // rows hold (overlapping events; nested slices in other tools' traces).
                    let (title, color) = match sub {
                        0 => (data.track_label(track), text_color),
                        k if foreign => (format!("   depth {k}"), weak),
                        k => (format!("   overlap {k}"), weak),
                    };
                    row_title(
                        &title_painter,
                        rect,
                        bar_rect,
                        sub_top,
                        row_h,
                        &title,
                        look,
                        color,
                    );
                    if sub_top + row_h < bar_rect.top() || sub_top > rect.bottom() {
                        continue;
                    }
                    let row_rect = Rect::from_min_size(
                        Pos2::new(bar_rect.left(), sub_top + 2.0),
                        Vec2::new(bar_w, row_h - 4.0),
                    );
                    let by_row = track.bars_of_row(sub, &tex_view, texels as f32);
                    let shape_min = SHAPE_MIN_PT / pt_per_texel;
                    let from = pixels.len();
                    pixels.resize(from + texels, palette.background);
                    if let Some(line) = pixels.get_mut(from..) {
                        let ns_per_texel = tex_view.ns_per_px;
                        paint_row(
                            line,
                            &by_row,
                            band,
                            &grid_x,
                            palette,
                            ns_per_texel,
                            shape_min,
                        );
                    }
                    row_rects.push(row_rect);
                    for bar in &by_row {
                        if !bar.dense && bar.x1 - bar.x0 >= shape_min {
                            let x0 = bar_rect.left() + bar.x0 * pt_per_texel;
                            let x1 = bar_rect.left() + bar.x1 * pt_per_texel;
                            let r = Rect::from_x_y_ranges(x0..=x1, row_rect.y_range());
                            shapes.push((r, palette.bar(bar.kind), bar.first, track));
                        }
                    }
                }
            }
        }
    }

    // The background shows in the gutters between rows (the rows paint their own).
    let mut y = bar_rect.top();
    for r in row_rects.iter().chain(std::iter::once(&Rect::from_min_max(
        Pos2::new(bar_rect.left(), bar_rect.bottom()),
        bar_rect.right_bottom(),
    ))) {
        if r.top() > y {
            let gutter = Rect::from_x_y_ranges(bar_rect.x_range(), y..=r.top());
            bar_painter.rect_filled(gutter, CornerRadius::ZERO, palette.background);
        }
        y = y.max(r.bottom());
    }
    for (c, top, h) in counters {
        paint_counter(&bar_painter, c, &view, bar_rect, top, h, look, palette);
    }
    for &x in &grid_x {
        let x = bar_rect.left() + x as f32 * pt_per_texel;
        painter.line_segment(
            [
                Pos2::new(x, rect.top() + look.axis_h - 4.0),
                Pos2::new(x, rect.bottom()),
            ],
            Stroke::new(1.0, palette.grid),
        );
    }
    if !row_rects.is_empty() {
        let rows = row_rects.len();
        let image = ColorImage::new([texels, rows], pixels);
        let texture = row_texture(ui, id, image);
        let mut mesh = Mesh::with_texture(texture);
        for (i, r) in row_rects.iter().enumerate() {
            let v0 = i as f32 / rows as f32;
            let v1 = (i + 1) as f32 / rows as f32;
            let uv = Rect::from_min_max(Pos2::new(0.0, v0), Pos2::new(1.0, v1));
            mesh.add_rect_with_uv(*r, uv, Color32::WHITE);
        }
        bar_painter.add(Shape::mesh(mesh));
    }
    for (r, color, first, track) in shapes {
        bar_painter.rect_filled(r, CornerRadius::same(1), color);
        if let Some(e) = track.events().get(first) {
            let visible = r.intersect(bar_rect);
            let text = data.bar_label(e);
            let galley =
                painter.layout_no_wrap(text.into_owned(), look.name.clone(), Color32::WHITE);
            // A label that fits, however narrow the block (a pipeline op's "F3"); a longer one
            // clipped to blocks wide enough to show some of it.
            if galley.size().x + 4.0 <= visible.width() || visible.width() > 28.0 {
                let pos = Pos2::new(visible.left() + 3.0, r.center().y - galley.size().y / 2.0);
                bar_painter
                    .with_clip_rect(visible)
                    .galley(pos, galley, Color32::WHITE);
            }
        }
    }

    let overlay = Overlay {
        painter: &bar_painter,
        data,
        view: &view,
        bar_rect,
        track_tops: &track_tops,
        look,
    };
    overlay.instants();
    if state.show_flows {
        overlay.flows();
    }

    if let Some(c) = state.cursor_ns {
        let x = bar_rect.left() + view.x_of(c as f64);
        if (bar_rect.left()..=bar_rect.right()).contains(&x) {
            painter.line_segment(
                [
                    Pos2::new(x, bar_rect.top()),
                    Pos2::new(x, bar_rect.bottom()),
                ],
                Stroke::new(2.0, Color32::RED),
            );
        }
    }
}

/// The colour of instant markers and flow arrows: light on a dark theme, dark on a light one.
fn mark_color(look: &Look) -> Color32 {
    if look.light {
        Color32::from_gray(20)
    } else {
        Color32::from_gray(235)
    }
}

/// Where a track's first sub-row is drawn this frame.
struct TrackTop {
    track: (usize, gangway::trace::Lane),
    top: f32,
}

/// What is drawn over the rows: instants and flow arrows.
struct Overlay<'a> {
    painter: &'a egui::Painter,
    data: &'a TimelineData,
    view: &'a TimeView,
    bar_rect: Rect,
    track_tops: &'a [TrackTop],
    look: &'a Look,
}

impl Overlay<'_> {
    /// The top of `track`'s first sub-row, if it is placed this frame.
    fn top_of(&self, track: (usize, gangway::trace::Lane)) -> Option<f32> {
        self.track_tops
            .iter()
            .find(|t| t.track == track)
            .map(|t| t.top)
    }

    /// The time span of the bar area.
    fn window(&self) -> (f64, f64) {
        (self.view.ns_at(0.0), self.view.ns_at(self.bar_rect.width()))
    }

    /// Instants as Perfetto marks them: a small downward chevron at the top of their row at
    /// their time (a global one: a thin line down every row, chevron on top). The instants in
    /// view are found by binary search and visited once; of those within a pixel of each other
    /// on one row, one is painted.
    fn instants(&self) {
        let (painter, data, view, bar_rect, look) =
            (self.painter, self.data, self.view, self.bar_rect, self.look);
        if data.instants.is_empty() {
            return;
        }
        let color = mark_color(look);
        let size = (look.row_h * 0.3).max(4.0);
        let window = self.window();
        let from = data.instants.partition_point(|i| (i.ns as f64) < window.0);
        let mut last_x: Vec<(Option<(usize, gangway::trace::Lane)>, f32)> = Vec::new();
        for i in data.instants.get(from..).unwrap_or_default() {
            if i.ns as f64 > window.1 {
                break;
            }
            let x = (bar_rect.left() + view.x_of(i.ns as f64)).round();
            match last_x.iter_mut().find(|(t, _)| *t == i.track) {
                Some((_, prev)) if (x - *prev).abs() < 1.0 => continue,
                Some((_, prev)) => *prev = x,
                None => last_x.push((i.track, x)),
            }
            let top = match i.track {
                None => {
                    painter.line_segment(
                        [
                            Pos2::new(x, bar_rect.top()),
                            Pos2::new(x, bar_rect.bottom()),
                        ],
                        Stroke::new(1.0, color.gamma_multiply(0.6)),
                    );
                    bar_rect.top()
                }
                Some(track) => match self.top_of(track) {
                    Some(top) => top + 1.0,
                    None => continue,
                },
            };
            painter.add(Shape::convex_polygon(
                vec![
                    Pos2::new(x - size, top),
                    Pos2::new(x + size, top),
                    Pos2::new(x, top + size * 1.4),
                ],
                color,
                Stroke::new(1.0, Color32::BLACK),
            ));
        }
    }

    /// Flow arrows: a curve from the end of the sending slice to the start of the receiving
    /// one, each end on its slice's sub-row, with a head at the receiving end. Arrows wholly
    /// outside the view are skipped; at most [`MAX_ARROWS`] are drawn a frame.
    fn flows(&self) {
        let (painter, view, bar_rect, look) = (self.painter, self.view, self.bar_rect, self.look);
        let color = mark_color(look);
        let window = self.window();
        let y_of = |end: &super::data::FlowEnd| {
            self.top_of((end.device, end.lane))
                .map(|top| top + (end.sub_row as f32 + 0.5) * look.row_h)
        };
        let mut drawn = 0;
        for link in &self.data.flows {
            let (a, b) = (link.from.ns as f64, link.to.ns as f64);
            if a.max(b) < window.0 || a.min(b) > window.1 {
                continue;
            }
            let (Some(y0), Some(y1)) = (y_of(&link.from), y_of(&link.to)) else {
                continue;
            };
            let p0 = Pos2::new(bar_rect.left() + view.x_of(a), y0);
            let p1 = Pos2::new(bar_rect.left() + view.x_of(b), y1);
            let bend = ((p1.x - p0.x).abs() * 0.5).clamp(8.0, 60.0);
            painter.add(egui::epaint::CubicBezierShape::from_points_stroke(
                [
                    p0,
                    Pos2::new(p0.x + bend, p0.y),
                    Pos2::new(p1.x - bend, p1.y),
                    p1,
                ],
                false,
                Color32::TRANSPARENT,
                Stroke::new(1.5, color),
            ));
            let head = (look.row_h * 0.3).max(4.0);
            painter.add(Shape::convex_polygon(
                vec![
                    p1,
                    Pos2::new(p1.x - head, p1.y - head * 0.6),
                    Pos2::new(p1.x - head, p1.y + head * 0.6),
                ],
                color,
                Stroke::NONE,
            ));
            drawn += 1;
            if drawn >= MAX_ARROWS {
                break;
            }
        }
    }
}

/// The most flow arrows one frame draws: beyond that they would hide the slices.
const MAX_ARROWS: usize = 2_000;

/// A row's title in the label column, clipped to it.
#[allow(clippy::too_many_arguments)] // one row's place, text and look
fn row_title(
    painter: &egui::Painter,
    rect: Rect,
    bar_rect: Rect,
    top: f32,
    h: f32,
    title: &str,
    look: &Look,
    color: Color32,
) {
    let clip = Rect::from_min_max(
        Pos2::new(rect.left(), top.max(bar_rect.top())),
        Pos2::new(bar_rect.left() - 4.0, (top + h).min(bar_rect.bottom())),
    );
    if clip.height() <= 0.0 {
        return;
    }
    painter
        .with_clip_rect(clip.intersect(painter.clip_rect()))
        .text(
            Pos2::new(rect.left() + 4.0, top + look.row_h / 2.0),
            Align2::LEFT_CENTER,
            title,
            look.label.clone(),
            color,
        );
}

/// A counter track as a filled step plot over `top..top + h`: each pixel column shows the
/// largest value set in it (or the value held from before), scaled to the track's range.
#[allow(clippy::too_many_arguments)] // one row's place and look
fn paint_counter(
    painter: &egui::Painter,
    c: &CounterRow,
    view: &TimeView,
    bar_rect: Rect,
    top: f32,
    h: f32,
    look: &Look,
    palette: RowPalette,
) {
    let (lo, hi) = (c.min.min(0.0), c.max);
    let scale = if hi > lo {
        (h - 6.0) / (hi - lo) as f32
    } else {
        0.0
    };
    let y_of = |v: f64| top + h - 3.0 - (v - lo) as f32 * scale;
    let color = palette.bar(BarKind::named(&c.name));
    let width = bar_rect.width().max(1.0) as usize;
    let mut line: Vec<Pos2> = Vec::new();
    let mut fill = Mesh::default();
    for col in 0..width {
        let (t0, t1) = (view.ns_at(col as f32), view.ns_at(col as f32 + 1.0));
        let Some(v) = c.value_over(t0, t1) else {
            if line.len() > 1 {
                painter.add(Shape::line(
                    std::mem::take(&mut line),
                    Stroke::new(1.5, color),
                ));
            }
            line.clear();
            continue;
        };
        let (x0, x1) = (
            bar_rect.left() + col as f32,
            bar_rect.left() + col as f32 + 1.0,
        );
        let y = y_of(v);
        line.push(Pos2::new(x0, y));
        line.push(Pos2::new(x1, y));
        let base = top + h - 3.0;
        fill.add_colored_rect(
            Rect::from_min_max(Pos2::new(x0, y.min(base)), Pos2::new(x1, base)),
            color.gamma_multiply(0.35),
        );
    }
    painter.add(Shape::mesh(fill));
    if line.len() > 1 {
        painter.add(Shape::line(line, Stroke::new(1.5, color)));
    }
    painter.text(
        Pos2::new(bar_rect.right() - 4.0, top + 2.0),
        Align2::RIGHT_TOP,
        format!("max {}", trim_value(c.max)),
        look.axis.clone(),
        palette.grid_text,
    );
}

/// A counter's value, short: `12.5`, `3`, `1.2e9`.
fn trim_value(v: f64) -> String {
    if v.abs() >= 1e6 || (v != 0.0 && v.abs() < 1e-3) {
        format!("{v:.3e}")
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    }
}

/// An event's hover text. `origin`: where the axis counts from, and how.
fn event_tooltip(ui: &mut Ui, data: &TimelineData, e: &Event, origin: Option<(f64, TimeAxis)>) {
    ui.strong(&e.name);
    match data.row_titles.get(&e.device) {
        Some(title) => {
            if let Some(group) = data.group_of(e.device) {
                ui.label(group);
            }
            ui.label(title);
        }
        None => {
            let name = data.lanes.get(&e.device).map_or_else(
                || format!("{}", e.device),
                |t| format!("{} ({})", e.device, t.label),
            );
            ui.label(format!(
                "{} on {} lane",
                BarKind::of(e).name(),
                e.lane.name()
            ));
            ui.label(format!("device {name}"));
        }
    }
    if let Some(mb) = e.microbatch {
        ui.label(format!("microbatch {mb}"));
    }
    ui.label(format!("duration {}", format_ns(e.duration_ns() as f64)));
    match origin {
        Some((origin, TimeAxis::BeforeNewest)) => ui.label(format!(
            "start {} before the newest event",
            format_ns(origin - e.start_ns as f64)
        )),
        Some((origin, TimeAxis::FromStart)) => ui.label(format!(
            "start {} after the first event",
            format_ns(e.start_ns as f64 - origin)
        )),
        None => ui.label(format!("start {}", format_ns(e.start_ns as f64))),
    };
    if data.row_titles.is_empty() {
        ui.label(format!("clock: {}", e.clock.name()));
    }
}

/// A tooltip beside the pointer, for a widget drawing many items (a timeline's bars, a figure's
/// blocks): egui's own tooltip is anchored to the widget and would sit below all of it, far from
/// the item it describes.
pub fn tooltip_at_pointer(response: &egui::Response, add_contents: impl FnOnce(&mut Ui)) {
    egui::Popup::from_response(response)
        .kind(egui::PopupKind::Tooltip)
        .at_pointer()
        .gap(12.0)
        .show(add_contents);
}

/// The item under `pos` and how far below its top `pos` is.
fn item_at<'p, 'a>(
    placed: &'p [Placed<'a>],
    bar_rect: Rect,
    scroll: f32,
    pos: Pos2,
) -> Option<(&'p Placed<'a>, f32)> {
    if !bar_rect.contains(pos) {
        return None;
    }
    let y = pos.y - bar_rect.top() + scroll;
    let at = placed.partition_point(|p| p.y + p.h <= y);
    placed.get(at).filter(|p| p.y <= y).map(|p| (p, y - p.y))
}

/// The event under `pos` (on the track and sub-row under it, the last-starting one that covers
/// it, give or take 2 px): O(log rows + log n).
fn pick<'a>(
    placed: &[Placed<'a>],
    look: &Look,
    view: &TimeView,
    bar_rect: Rect,
    scroll: f32,
    pos: Pos2,
) -> Option<&'a Event> {
    let (p, dy) = item_at(placed, bar_rect, scroll, pos)?;
    let Item::Track(track) = p.item else {
        return None;
    };
    let sub = (dy / look.row_h).floor().max(0.0) as usize;
    let t = view.ns_at(pos.x - bar_rect.left());
    track.pick(sub, t, 2.0 * view.ns_per_px)
}

/// The counter under `pos` and its value there.
fn counter_at<'a>(
    placed: &[Placed<'a>],
    view: &TimeView,
    bar_rect: Rect,
    scroll: f32,
    pos: Pos2,
) -> Option<(&'a CounterRow, f64)> {
    let (p, _) = item_at(placed, bar_rect, scroll, pos)?;
    let Item::Counter(c) = p.item else {
        return None;
    };
    let x = pos.x - bar_rect.left();
    Some((c, c.value_over(view.ns_at(x), view.ns_at(x + 1.0))?))
}

/// The event under `pos` in a timeline drawn in the screen theme, unscrolled, with its bar
/// area at `bar_rect`.
pub fn event_at<'a>(
    data: &'a TimelineData,
    view: &TimeView,
    bar_rect: Rect,
    pos: Pos2,
) -> Option<&'a Event> {
    let look = Look::screen();
    let placed = layout(data, &look);
    let (p, dy) = item_at(&placed, bar_rect, 0.0, pos)?;
    let Item::Track(track) = p.item else {
        return None;
    };
    let sub = (dy / look.row_h).floor().max(0.0) as usize;
    let t = view.ns_at(pos.x - bar_rect.left());
    track.pick(sub, t, 2.0 * view.ns_per_px)
}

/// The colour key of every bar kind, in one row.
pub fn legend(ui: &mut Ui) {
    let palette = RowPalette::for_background(
        ui.visuals().extreme_bg_color,
        ui.visuals().faint_bg_color,
        !ui.visuals().dark_mode,
    );
    ui.horizontal_wrapped(|ui| {
        for kind in BarKind::ALL {
            let (r, _) = ui.allocate_exact_size(Vec2::splat(10.0), Sense::hover());
            ui.painter()
                .rect_filled(r, CornerRadius::same(2), palette.bar(kind));
            ui.label(kind.name());
        }
        let (r, _) = ui.allocate_exact_size(Vec2::splat(10.0), Sense::hover());
        ui.painter()
            .rect_filled(r, CornerRadius::same(2), palette.idle);
        ui.label("idle");
    });
}
