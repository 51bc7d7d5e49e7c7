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
//!
//! [`RowPalette`]: super::raster::RowPalette
//!
//! The parts, each using only those before it: `state` (what is kept between frames) →
//! `layout` (sizes, rows top to bottom) → `axis`, `counter`, `overlay`, `hover` (what is under
//! the pointer), `interact` (pan and zoom) and `legend` → `paint` (one frame) → this module's
//! [`timeline`], which handles a frame's input and paints it.

mod axis;
mod counter;
mod hover;
mod interact;
mod layout;
mod legend;
mod overlay;
mod paint;
mod state;

use egui::{Align2, Pos2, Rect, Sense, Ui, Vec2};

use super::data::TimelineData;
use counter::trim_value;
use hover::{counter_at, event_tooltip, pick};
use interact::{clamp_to_span, navigate};
use layout::Frame;
use paint::paint;

pub use hover::{event_at, tooltip_at_pointer};
pub use layout::{Item, Look, Placed, layout};
pub use legend::legend;
pub use state::{Fitted, TimeAxis, TimelineState};

/// Fewest rows a timeline that scrolls its rows shows.
const MIN_ROWS_SHOWN: f32 = 3.0;

/// Draws `data` and handles navigation. The widget is as tall as its rows, up to the height
/// left in `ui` (at least a few rows): taller rows scroll under a fixed time axis. A frame costs
/// O(pixels × log events) per sub-row in view, however many events are in view.
pub fn timeline(ui: &mut Ui, id: &str, data: &TimelineData, state: &mut TimelineState) {
    let look = Look::of(ui, data);
    let placed = layout(data, &look);
    let rows_h: f32 = placed.last().map_or(0.0, |p| p.y + p.h);
    let content = look.axis_h + rows_h.max(look.row_h) + 4.0;
    let room = ui.available_height();
    let height = if room.is_finite() && !state.every_row {
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
    state.clipped = max_scroll > 0.0;

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
    let mut navigated = navigate(ui, &response, bar_rect, max_scroll, state, &mut view);
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
