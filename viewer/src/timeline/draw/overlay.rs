//! What is drawn over the rows, as Perfetto draws it: instants as markers on their row (global
//! ones as a line across every row) and flow arrows from the end of the sending slice to the
//! start of the receiving one.

use egui::{Color32, Pos2, Rect, Shape, Stroke};

use super::layout::Look;
use crate::timeline::data::{FlowEnd, TimelineData};
use crate::timeline::view::TimeView;

/// The colour of instant markers and flow arrows: light on a dark theme, dark on a light one.
fn mark_color(look: &Look) -> Color32 {
    if look.light {
        Color32::from_gray(20)
    } else {
        Color32::from_gray(235)
    }
}

/// Where a track's first sub-row is drawn this frame.
pub(super) struct TrackTop {
    pub(super) track: (usize, gangway::trace::Lane),
    pub(super) top: f32,
}

/// What is drawn over the rows: instants and flow arrows.
pub(super) struct Overlay<'a> {
    pub(super) painter: &'a egui::Painter,
    pub(super) data: &'a TimelineData,
    pub(super) view: &'a TimeView,
    pub(super) bar_rect: Rect,
    pub(super) track_tops: &'a [TrackTop],
    pub(super) look: &'a Look,
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
    pub(super) fn instants(&self) {
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
    pub(super) fn flows(&self) {
        let (painter, view, bar_rect, look) = (self.painter, self.view, self.bar_rect, self.look);
        let color = mark_color(look);
        let window = self.window();
        let y_of = |end: &FlowEnd| {
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
