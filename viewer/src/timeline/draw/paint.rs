//! Paints one frame of the widget: the axis, then the rows in view (one texture; see
//! `raster`) with their titles and the labels of blocks wide enough, process headers, counter
//! tracks, the grid, the overlays (instants and flows) and the cursor.

use egui::{
    Align2, Color32, ColorImage, CornerRadius, Mesh, Pos2, Rect, Shape, Stroke, TextureHandle,
    TextureOptions, Ui, Vec2,
};

use super::axis::paint_axis;
use super::counter::paint_counter;
use super::layout::{Frame, Item, Look};
use super::overlay::{Overlay, TrackTop};
use super::state::TimelineState;
use crate::timeline::data::{CounterRow, TimelineData};
use crate::timeline::raster::{RowPalette, SHAPE_MIN_PT, paint_row};
use crate::timeline::view::TimeView;

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

/// Paints the axis, the row titles, the rows in view and the cursor.
pub(super) fn paint(ui: &Ui, id: &str, data: &TimelineData, state: &TimelineState, f: &Frame<'_>) {
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

    let grid_x = paint_axis(&painter, state, f, weak, texel_of);

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
