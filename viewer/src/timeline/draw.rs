//! The timeline widget: lanes of bars, a time axis, idle gaps shaded, and puffin-style
//! navigation (drag pans, ctrl+scroll zooms about the mouse, click a bar zooms to it,
//! double-click resets).

use egui::{Align2, Color32, CornerRadius, FontId, Pos2, Rect, Sense, Stroke, Ui, Vec2};
use gangway::trace::Event;

use super::data::{BarKind, TimelineData, Track, bars_by_row};
use super::view::{TimeView, format_ns, format_tick, tick_step_ns};

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
}

impl Default for TimelineState {
    fn default() -> Self {
        Self {
            view: None,
            follow_live: false,
            cursor_ns: None,
            last_width: 600.0,
        }
    }
}

impl TimelineState {
    /// Fits the view to everything in `data` (what double-click does).
    pub fn reset(&mut self, data: &TimelineData) {
        self.view = data.span().map(|span| TimeView::fit(span, self.last_width));
    }
}

/// Height of a track: one row per sub-row of overlapping events.
fn track_height(track: &Track) -> f32 {
    track.row_count() as f32 * ROW_H
}

/// Draws `data` and handles navigation. `height` is the most the widget takes (rows scroll off
/// past it are cut; tracks are few).
pub fn timeline(ui: &mut Ui, id: &str, data: &TimelineData, state: &mut TimelineState) {
    let rows_h: f32 = data.tracks().iter().map(track_height).sum();
    let height = AXIS_H + rows_h.max(ROW_H) + 4.0;
    let width = ui.available_width().max(LABEL_W + 50.0);
    let (rect, response) =
        ui.allocate_exact_size(Vec2::new(width, height), Sense::click_and_drag());
    let response = response.on_hover_cursor(egui::CursorIcon::Crosshair);
    let _ = id;
    let bar_rect = Rect::from_min_max(
        Pos2::new(rect.left() + LABEL_W, rect.top() + AXIS_H),
        rect.right_bottom(),
    );
    let bar_w = bar_rect.width();
    state.last_width = bar_w;

    if state.view.is_none() {
        state.reset(data);
    }
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
    if response.dragged() {
        view.pan_px(response.drag_delta().x);
        state.follow_live = false;
    }
    if let Some(pos) = pointer {
        let (zoom, scroll, ctrl) =
            ui.input(|i| (i.zoom_delta(), i.smooth_scroll_delta, i.modifiers.command));
        if zoom != 1.0 {
            view.zoom_about(zoom, pos.x - bar_rect.left());
        } else if ctrl && scroll.y != 0.0 {
            view.zoom_about((scroll.y / 200.0).exp(), pos.x - bar_rect.left());
        } else if scroll.x != 0.0 {
            view.pan_px(scroll.x);
            state.follow_live = false;
        }
    }
    if response.double_clicked() {
        if let Some(span) = data.span() {
            view = TimeView::fit(span, bar_w);
        }
    } else if response.clicked()
        && let Some(pos) = response.interact_pointer_pos()
        && let Some(e) = event_at(data, &view, bar_rect, pos)
    {
        view.zoom_to(e.start_ns..e.clamped_end_ns(), bar_w);
        state.follow_live = false;
    }
    if state.follow_live
        && let Some(span) = data.span()
    {
        view.follow(span.end, bar_w);
    }
    state.view = Some(view);

    // --- Painting ---
    let painter = ui.painter_at(rect);
    let visuals = ui.visuals();
    let text_color = visuals.text_color();
    let weak = visuals.weak_text_color();
    let idle = if visuals.dark_mode {
        Color32::from_gray(48)
    } else {
        Color32::from_gray(222)
    };
    painter.rect_filled(bar_rect, CornerRadius::ZERO, visuals.extreme_bg_color);

    // Axis and grid.
    let step = tick_step_ns(view.ns_per_px, 90.0);
    let window = view.visible(bar_w);
    let mut t = (view.start_ns / step).ceil() * step;
    let mut ticks = 0;
    while view.x_of(t) <= bar_w && ticks < 200 {
        let x = bar_rect.left() + view.x_of(t);
        painter.line_segment(
            [
                Pos2::new(x, rect.top() + AXIS_H - 4.0),
                Pos2::new(x, rect.bottom()),
            ],
            Stroke::new(1.0, visuals.faint_bg_color),
        );
        painter.text(
            Pos2::new(x + 2.0, rect.top()),
            Align2::LEFT_TOP,
            format_tick(t, step),
            FontId::monospace(10.0),
            weak,
        );
        t += step;
        ticks += 1;
    }

    let span = data.span();
    let mut top = bar_rect.top();
    for track in data.tracks() {
        let track_top = top;
        top += track_height(track);
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
        let row_rect = |sub: usize| {
            Rect::from_min_size(
                Pos2::new(bar_rect.left(), track_top + sub as f32 * ROW_H + 2.0),
                Vec2::new(bar_w, ROW_H - 4.0),
            )
        };
        // Idle shading over the data's span: bars paint over the busy parts.
        if let Some(span) = &span {
            let x0 = bar_rect.left() + view.x_of(span.start as f64).max(0.0);
            let x1 = bar_rect.left() + view.x_of(span.end as f64).min(bar_w);
            if x1 > x0 {
                for sub in 0..track.row_count() {
                    painter.rect_filled(
                        Rect::from_x_y_ranges(x0..=x1, row_rect(sub).y_range()),
                        CornerRadius::ZERO,
                        idle,
                    );
                }
            }
        }
        let (visible, rows) = track.visible_with_rows(window.clone());
        let by_row = bars_by_row(visible, rows, bar_w, |ns| view.x_of(ns));
        for (sub, bar) in by_row
            .iter()
            .enumerate()
            .flat_map(|(sub, row)| row.iter().map(move |b| (sub, b)))
        {
            let row_rect = row_rect(sub);
            let x0 = bar_rect.left() + bar.x0;
            let x1 = bar_rect.left() + bar.x1.max(bar.x0 + 1.0);
            let r = Rect::from_x_y_ranges(x0..=x1, row_rect.y_range());
            let mut color = bar.kind.color();
            if bar.merged > 1 {
                color = color.gamma_multiply(0.7);
            }
            painter.rect_filled(r, CornerRadius::same(1), color);
            if r.width() > 28.0
                && let Some(e) = visible.get(bar.first)
            {
                painter.with_clip_rect(r).text(
                    r.left_center() + Vec2::new(3.0, 0.0),
                    Align2::LEFT_CENTER,
                    &e.name,
                    FontId::proportional(11.0),
                    Color32::WHITE,
                );
            }
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

    if let Some(pos) = pointer
        && let Some(e) = event_at(data, &view, bar_rect, pos)
    {
        let e = e.clone();
        let name = data.device_names.get(&e.device).map_or_else(
            || format!("{}", e.device),
            |n| format!("{} ({n})", e.device),
        );
        response.show_tooltip_ui(|ui| {
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
            ui.label(format!("start {}", format_ns(e.start_ns as f64)));
            ui.label(format!("clock: {}", e.clock.name()));
        });
    }
}

/// The event under `pos`, if any (on the track and sub-row under `pos`, the last-starting one
/// that covers it, at least 3 px wide for picking).
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
            hit = Some((track, ((pos.y - top) / ROW_H).floor().max(0.0) as u32));
            break;
        }
        top += h;
    }
    let (track, sub) = hit?;
    let x = pos.x - bar_rect.left();
    let slack = 2.0 * view.ns_per_px;
    let t = view.ns_at(x);
    let lo = (t - slack).max(0.0) as u64;
    let hi = (t + slack).max(0.0) as u64 + 1;
    let (events, rows) = track.visible_with_rows(lo..hi);
    events
        .iter()
        .zip(rows)
        .rev()
        .find(|&(e, &row)| {
            row == sub
                && (e.start_ns as f64) <= t + slack
                && (e.clamped_end_ns() as f64) >= t - slack
        })
        .map(|(e, _)| e)
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
