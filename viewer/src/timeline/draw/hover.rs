//! What is under the pointer (hit-testing: the item, the event, the counter's value) and the
//! hover text shown for it.

use egui::{Pos2, Rect, Ui};
use gangway::trace::{Event, Moved};

use super::layout::{Item, Look, Placed, layout};
use super::state::TimeAxis;
use crate::timeline::data::{BarKind, CounterRow, TimelineData};
use crate::timeline::view::{TimeView, format_ns};

/// An event's hover text. `origin`: where the axis counts from, and how.
pub(super) fn event_tooltip(
    ui: &mut Ui,
    data: &TimelineData,
    e: &Event,
    origin: Option<(f64, TimeAxis)>,
) {
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
        // Counted from 1, as the lab's blocks and the block's own label are.
        ui.label(format!("microbatch {}", u64::from(mb) + 1));
    }
    ui.label(format!("duration {}", format_ns(e.duration_ns() as f64)));
    if let Some(m) = e.moved {
        ui.label(moved_text(&m, e.duration_ns()));
    }
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

/// What a transfer moved, as its hover says it: "all_to_all in: 12.0 KiB (1.50 GiB/s)" (the rate
/// only where the transfer took time).
pub(crate) fn moved_text(m: &Moved, duration_ns: u64) -> String {
    let bytes = gangway::bench::format::bytes(m.bytes);
    let (kind, way) = (m.kind.name(), m.direction.name());
    if duration_ns == 0 {
        return format!("{kind} {way}: {bytes}");
    }
    let per_s = (m.bytes as f64 / (duration_ns as f64 * 1e-9)) as u64;
    let rate = gangway::bench::format::bytes(per_s);
    format!("{kind} {way}: {bytes} ({rate}/s)")
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
pub(super) fn pick<'a>(
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
pub(super) fn counter_at<'a>(
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

#[cfg(test)]
mod tests {
    use super::*;
    use gangway::trace::{Direction, TransferKind};

    #[test]
    fn a_transfer_says_what_it_moved_and_how_fast() {
        let m = Moved {
            kind: TransferKind::AllToAll,
            direction: Direction::In,
            bytes: 3 << 20,
        };
        assert_eq!(
            moved_text(&m, 2_000_000),
            "all_to_all in: 3.00 MiB (1.46 GiB/s)"
        );
        assert_eq!(moved_text(&m, 0), "all_to_all in: 3.00 MiB");
    }
}
