//! Paints a [`Layout`] of the library's pipeline figure with egui, following the layout's
//! painting conventions (see `gangway::pipeline::figure`), so the lab shows exactly what the
//! SVG export and `gangway pipeline --svg` write, at a scale (to fit a window) or at its size.

use egui::{Align2, CornerRadius, FontFamily, FontId, Pos2, Rect, Sense, Stroke, Ui, Vec2};
use gangway::pipeline::figure::{Anchor, Layout, PlacedBlock, Shape, hatch_lines};

use crate::timeline::figure_color as color;

/// Allocates the layout's size times `scale` and paints it so; the response hovers over the
/// figure and the rect is where it was painted (for the PNG export).
pub fn figure(ui: &mut Ui, layout: &Layout, scale: f32) -> (egui::Response, Rect) {
    let (rect, response) = ui.allocate_exact_size(
        Vec2::new(layout.width, layout.height) * scale,
        Sense::hover(),
    );
    let painter = ui.painter_at(rect);
    let at = |x: f32, y: f32| rect.min + Vec2::new(x, y) * scale;
    painter.rect_filled(rect, CornerRadius::ZERO, color(layout.background));
    for shape in &layout.shapes {
        match shape {
            Shape::Rect {
                x,
                y,
                w,
                h,
                fill,
                stroke,
                hatch,
            } => {
                let r = Rect::from_min_size(at(*x, *y), Vec2::new(*w, *h) * scale);
                painter.rect_filled(r, CornerRadius::ZERO, color(*fill));
                if let Some(c) = hatch {
                    let s = Stroke::new(layout.hatch_width * scale, color(*c));
                    for [x0, y0, x1, y1] in hatch_lines(*x, *y, *w, *h, layout.hatch_spacing) {
                        painter.line_segment([at(x0, y0), at(x1, y1)], s);
                    }
                }
                if let Some((width, c)) = stroke {
                    painter.rect_stroke(
                        r,
                        CornerRadius::ZERO,
                        Stroke::new(*width * scale, color(*c)),
                        egui::StrokeKind::Middle,
                    );
                }
            }
            Shape::Text {
                x,
                y,
                text,
                size,
                color: c,
                anchor,
                bold,
            } => {
                let align = match anchor {
                    Anchor::Start => Align2::LEFT_CENTER,
                    Anchor::Middle => Align2::CENTER_CENTER,
                    Anchor::End => Align2::RIGHT_CENTER,
                };
                let font = FontId::new(*size * scale, FontFamily::Proportional);
                let pos = at(*x, *y);
                painter.text(pos, align, text, font.clone(), color(*c));
                if *bold {
                    // egui's default fonts have no bold face: draw twice, half a pixel apart.
                    let nudge = Vec2::new(0.5 * scale.max(0.5), 0.0);
                    painter.text(pos + nudge, align, text, font, color(*c));
                }
            }
            Shape::Line {
                x0,
                y0,
                x1,
                y1,
                width,
                color: c,
            } => {
                painter.line_segment(
                    [at(*x0, *y0), at(*x1, *y1)],
                    Stroke::new(*width * scale, color(*c)),
                );
            }
        }
    }
    (response, rect)
}

/// The block under `pos` (screen points) of a figure painted at `origin` times `scale`, if any,
/// for the tooltip.
pub fn block_at(layout: &Layout, origin: Pos2, scale: f32, pos: Pos2) -> Option<&PlacedBlock> {
    let p = (pos - origin) / scale.max(f32::MIN_POSITIVE);
    layout
        .blocks
        .iter()
        .find(|b| p.x >= b.x && p.x <= b.x + b.w && p.y >= b.y && p.y <= b.y + b.h)
}
