//! The timeline widget: lanes of bars, a time axis, idle gaps shaded, and puffin-style
//! navigation (drag pans, ctrl+scroll zooms about the mouse, click a bar zooms to it,
//! double-click resets).

use std::ops::Range;

use egui::{
    Align2, Color32, ColorImage, CornerRadius, FontId, Mesh, Pos2, Rect, Sense, Shape, Stroke,
    TextureHandle, TextureOptions, Ui, Vec2,
};
use gangway::trace::Event;

use super::data::{BarKind, TimelineData, Track};
use super::raster::{RowPalette, SHAPE_MIN_PT, paint_row};
use super::view::{TimeView, fitted_tick_step, format_ns, format_tick, format_tick_relative};

const LABEL_W: f32 = 150.0;
const ROW_H: f32 = 22.0;
const AXIS_H: f32 = 18.0;

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
    /// Label the time axis relative to the newest event (`−10 s`, `−5 s`, `now`): for live
    /// data, whose absolute times mean little.
    pub relative_to_end: bool,
    /// Set while [`TimelineState::view`] is the fit of the data (nobody panned or zoomed since):
    /// then, each frame the data's span or the bar width differs (new or forgotten events, a
    /// window resize, a new pixels-per-point), the view is fitted again. Panning, zooming and
    /// clicking a bar clear it, and so does setting `view` from outside; double-click and
    /// [`TimelineState::reset`] set it again.
    pub fitted: Option<Fitted>,
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
            relative_to_end: false,
            fitted: None,
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

/// Height of a track: one row per sub-row of overlapping events.
fn track_height(track: &Track) -> f32 {
    track.row_count() as f32 * ROW_H
}

/// Draws `data` and handles navigation. `height` is the most the widget takes (rows scroll off
/// past it are cut; tracks are few). A frame costs O(pixels × log events) per sub-row, however
/// many events are in view.
pub fn timeline(ui: &mut Ui, id: &str, data: &TimelineData, state: &mut TimelineState) {
    let rows_h: f32 = data.tracks().iter().map(track_height).sum();
    let height = AXIS_H + rows_h.max(ROW_H) + 4.0;
    let width = ui.available_width().max(LABEL_W + 50.0);
    let (rect, response) =
        ui.allocate_exact_size(Vec2::new(width, height), Sense::click_and_drag());
    let response = response.on_hover_cursor(egui::CursorIcon::Crosshair);
    let bar_rect = Rect::from_min_max(
        Pos2::new(rect.left() + LABEL_W, rect.top() + AXIS_H),
        rect.right_bottom(),
    );
    let bar_w = bar_rect.width();
    state.last_width = bar_w;

    let span = data.span();
    state.refit(span.clone(), bar_w);
    let Some(mut view) = state.view else {
        ui.painter().text(
            rect.center(),
            Align2::CENTER_CENTER,
            "no events yet",
            FontId::proportional(14.0),
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
        let (zoom, scroll, ctrl) =
            ui.input(|i| (i.zoom_delta(), i.smooth_scroll_delta, i.modifiers.command));
        if zoom != 1.0 {
            view.zoom_about(zoom, pos.x - bar_rect.left());
            navigated = true;
        } else if ctrl && scroll.y != 0.0 {
            view.zoom_about((scroll.y / 200.0).exp(), pos.x - bar_rect.left());
            navigated = true;
        } else if scroll.x != 0.0 {
            view.pan_px(scroll.x);
            state.follow_live = false;
            navigated = true;
        }
    }
    if response.double_clicked() {
        state.fit(span.clone(), bar_w);
        view = state.view.unwrap_or(view);
        navigated = false;
    } else if response.clicked()
        && let Some(pos) = response.interact_pointer_pos()
        && let Some(e) = event_at(data, &view, bar_rect, pos)
    {
        view.zoom_to(e.start_ns..e.clamped_end_ns(), bar_w);
        state.follow_live = false;
        navigated = true;
    }
    if navigated {
        state.fitted = None;
    }
    if state.follow_live
        && !state.is_fitted()
        && let Some(span) = &span
    {
        view.follow(span.end, bar_w);
    }
    state.view = Some(view);

    // --- Painting ---
    // The rows are one texture (see `raster`): each sub-row one quad, so a frame costs a
    // software rasterizer the pixels it covers, not a triangle per bar.
    let painter = ui.painter_at(rect);
    let bar_painter = painter.with_clip_rect(bar_rect.intersect(painter.clip_rect()));
    let visuals = ui.visuals();
    let text_color = visuals.text_color();
    let weak = visuals.weak_text_color();
    let palette = RowPalette {
        background: visuals.extreme_bg_color,
        idle: if visuals.dark_mode {
            Color32::from_gray(48)
        } else {
            Color32::from_gray(222)
        },
        grid: visuals.faint_bg_color,
    };
    let ppp = ui.ctx().pixels_per_point();
    let texels = ((bar_w * ppp).round().max(1.0)) as usize;
    // Texel k covers points k..k+1 times `pt_per_texel` from the bar area's left.
    let pt_per_texel = bar_w / texels as f32;
    let tex_view = TimeView {
        start_ns: view.start_ns,
        ns_per_px: view.ns_per_px * f64::from(pt_per_texel),
    };
    let texel_of = |ns: f64| (ns - tex_view.start_ns) / tex_view.ns_per_px;

    // Axis and grid: absolute times, or times before the newest event.
    let origin = match (&span, state.relative_to_end) {
        (Some(span), true) => Some(span.end as f64),
        _ => None,
    };
    let label_at = |t: f64, step: f64| match origin {
        Some(origin) => format_tick_relative(t - origin, step),
        None => format_tick(t, step),
    };
    let font = FontId::monospace(10.0);
    let step = fitted_tick_step(&view, bar_w, 90.0, |t, step| {
        painter
            .layout_no_wrap(label_at(t, step), font.clone(), weak)
            .size()
            .x
    });
    let zero = origin.unwrap_or(0.0);
    let mut t = zero + ((view.start_ns - zero) / step).ceil() * step;
    let mut grid_x = Vec::new();
    let mut labels_end = f32::NEG_INFINITY;
    while view.x_of(t) <= bar_w && grid_x.len() < 200 {
        grid_x.push(texel_of(t));
        let x = bar_rect.left() + view.x_of(t);
        // Right of the tick, or left of it where the label would run off the edge, unless it
        // would then cover the label before it.
        let galley = painter.layout_no_wrap(label_at(t, step), font.clone(), weak);
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

    let band = span
        .as_ref()
        .map(|s| (texel_of(s.start as f64), texel_of(s.end as f64)));
    let mut pixels: Vec<Color32> = Vec::new();
    let mut row_rects = Vec::new();
    let mut shapes = Vec::new();
    let mut top = bar_rect.top();
    for track in data.tracks() {
        let track_top = top;
        top += track_height(track);
        if track_top > rect.bottom() {
            break;
        }
        let label_clip = Rect::from_min_max(
            Pos2::new(rect.left(), track_top),
            Pos2::new(bar_rect.left() - 4.0, track_top + ROW_H),
        );
        painter.with_clip_rect(label_clip).text(
            Pos2::new(rect.left() + 4.0, track_top + ROW_H / 2.0),
            Align2::LEFT_CENTER,
            data.track_label(track),
            FontId::proportional(12.0),
            text_color,
        );
        let by_row = track.bars(&tex_view, texels as f32);
        let shape_min = SHAPE_MIN_PT / pt_per_texel;
        for sub in 0..track.row_count() {
            let row_rect = Rect::from_min_size(
                Pos2::new(bar_rect.left(), track_top + sub as f32 * ROW_H + 2.0),
                Vec2::new(bar_w, ROW_H - 4.0),
            );
            let bars = by_row.get(sub).map_or(&[][..], Vec::as_slice);
            let from = pixels.len();
            pixels.resize(from + texels, palette.background);
            if let Some(line) = pixels.get_mut(from..) {
                let ns_per_texel = tex_view.ns_per_px;
                paint_row(line, bars, band, &grid_x, palette, ns_per_texel, shape_min);
            }
            row_rects.push(row_rect);
            for bar in bars {
                if !bar.dense && bar.x1 - bar.x0 >= shape_min {
                    let x0 = bar_rect.left() + bar.x0 * pt_per_texel;
                    let x1 = bar_rect.left() + bar.x1 * pt_per_texel;
                    let r = Rect::from_x_y_ranges(x0..=x1, row_rect.y_range());
                    shapes.push((r, bar.kind.color(), bar.first, track));
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
            painter.rect_filled(gutter, CornerRadius::ZERO, palette.background);
        }
        y = y.max(r.bottom());
    }
    for &x in &grid_x {
        let x = bar_rect.left() + x as f32 * pt_per_texel;
        painter.line_segment(
            [
                Pos2::new(x, rect.top() + AXIS_H - 4.0),
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
        if r.width() > 28.0
            && let Some(e) = track.events().get(first)
        {
            let visible = r.intersect(bar_rect);
            bar_painter.with_clip_rect(visible).text(
                Pos2::new(visible.left() + 3.0, r.center().y),
                Align2::LEFT_CENTER,
                &e.name,
                FontId::proportional(11.0),
                Color32::WHITE,
            );
        }
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

    // Hover text at the pointer (not while dragging: it would chase the pointer).
    if let Some(pos) = pointer
        && !response.dragged()
        && let Some(e) = event_at(data, &view, bar_rect, pos)
    {
        let e = e.clone();
        let name = data.device_names.get(&e.device).map_or_else(
            || format!("{}", e.device),
            |n| format!("{} ({n})", e.device),
        );
        tooltip_at_pointer(&response, |ui| {
            ui.strong(&e.name);
            ui.label(format!(
                "{} on {} lane",
                BarKind::of(&e).name(),
                e.lane.name()
            ));
            ui.label(format!("device {name}"));
            if let Some(mb) = e.microbatch {
                ui.label(format!("microbatch {mb}"));
            }
            ui.label(format!("duration {}", format_ns(e.duration_ns() as f64)));
            match origin {
                Some(origin) => ui.label(format!(
                    "start {} before the newest event",
                    format_ns(origin - e.start_ns as f64)
                )),
                None => ui.label(format!("start {}", format_ns(e.start_ns as f64))),
            };
            ui.label(format!("clock: {}", e.clock.name()));
        });
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

/// The event under `pos`, if any (on the track and sub-row under `pos`, the last-starting one
/// that covers it, give or take 2 px for picking): O(tracks + log n).
pub fn event_at<'a>(
    data: &'a TimelineData,
    view: &TimeView,
    bar_rect: Rect,
    pos: Pos2,
) -> Option<&'a Event> {
    if !bar_rect.contains(pos) {
        return None;
    }
    // The track under `pos`, then its sub-row.
    let mut top = bar_rect.top();
    let mut hit = None;
    for track in data.tracks() {
        let h = track_height(track);
        if pos.y < top + h {
            hit = Some((track, ((pos.y - top) / ROW_H).floor().max(0.0) as usize));
            break;
        }
        top += h;
    }
    let (track, sub) = hit?;
    let t = view.ns_at(pos.x - bar_rect.left());
    track.pick(sub, t, 2.0 * view.ns_per_px)
}

/// The colour key of every bar kind, in one row.
pub fn legend(ui: &mut Ui) {
    ui.horizontal_wrapped(|ui| {
        for kind in BarKind::ALL {
            let (r, _) = ui.allocate_exact_size(Vec2::splat(10.0), Sense::hover());
            ui.painter()
                .rect_filled(r, CornerRadius::same(2), kind.color());
            ui.label(kind.name());
        }
        let (r, _) = ui.allocate_exact_size(Vec2::splat(10.0), Sense::hover());
        let idle = if ui.visuals().dark_mode {
            Color32::from_gray(48)
        } else {
            Color32::from_gray(222)
        };
        ui.painter().rect_filled(r, CornerRadius::same(2), idle);
        ui.label("idle");
    });
}
