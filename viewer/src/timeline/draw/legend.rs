//! The colour key of the timeline's bars.

use egui::{CornerRadius, Sense, Ui, Vec2};

use crate::timeline::data::BarKind;
use crate::timeline::raster::RowPalette;

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
