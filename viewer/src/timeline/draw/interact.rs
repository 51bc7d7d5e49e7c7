//! Navigation by pointer and keys, as in Perfetto and puffin (see the parent module): drag,
//! wheel and pinch pan and zoom the view, W / A / S / D zoom and pan while the pointer is over
//! the widget, a plain wheel scrolls the rows; and [`clamp_to_span`], which keeps the view on
//! the data.

use std::ops::Range;

use egui::{Key, Rect, Response, Ui};

use super::state::TimelineState;
use crate::timeline::view::TimeView;

/// W / S zoom by this factor per second held; A / D pan this many widths per second.
const KEY_ZOOM_PER_S: f32 = 8.0;
const KEY_PAN_WIDTHS_PER_S: f32 = 1.0;

/// Pans and zooms `view` by this frame's drag, wheel, pinch and keys over a timeline whose bar
/// area is `bar_rect`, or scrolls its rows ([`TimelineState::scroll_y`], clamped by the caller)
/// when they are `max_scroll` taller than the widget. Returns whether the view was panned or
/// zoomed.
pub(super) fn navigate(
    ui: &Ui,
    response: &Response,
    bar_rect: Rect,
    max_scroll: f32,
    state: &mut TimelineState,
    view: &mut TimeView,
) -> bool {
    let pointer = response.hover_pos();
    let bar_w = bar_rect.width();
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
    navigated
}

/// Keeps `view` on the data: it may show a tenth of its width beyond either end of `span`, no
/// more (zoomed out past the whole span, the span stays in view).
pub(super) fn clamp_to_span(view: &mut TimeView, span: &Range<u64>, width: f32) {
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
