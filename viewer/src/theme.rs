//! The two looks of the app: the screen theme (egui's dark) and the projector theme (light
//! background, large type, thick strokes), for a lecture hall where a dark UI washes out.

use egui::{FontFamily, FontId, TextStyle};

/// Size of body text in the projector theme (egui's default is 12.5).
pub const PROJECTOR_BODY: f32 = 18.0;

/// Applies the projector theme (`true`) or the screen theme to `ctx`. Call it when the choice
/// changes, not every frame.
pub fn apply(ctx: &egui::Context, projector: bool) {
    let theme = if projector {
        egui::Theme::Light
    } else {
        egui::Theme::Dark
    };
    ctx.set_theme(theme);
    let mut style = (*ctx.style_of(theme)).clone();
    style.text_styles = text_styles(if projector { PROJECTOR_BODY } else { 12.5 });
    if projector {
        style.visuals.widgets.noninteractive.fg_stroke.width = 1.5;
        style.spacing.interact_size.y = 26.0;
    }
    ctx.set_style_of(theme, style);
}

/// egui's text styles scaled so that body text is `body` points.
fn text_styles(body: f32) -> std::collections::BTreeMap<TextStyle, FontId> {
    let k = body / 12.5;
    [
        (TextStyle::Small, 9.0),
        (TextStyle::Body, 12.5),
        (TextStyle::Button, 12.5),
        (TextStyle::Heading, 18.0),
    ]
    .into_iter()
    .map(|(style, size)| (style, FontId::new(size * k, FontFamily::Proportional)))
    .chain(std::iter::once((
        TextStyle::Monospace,
        FontId::new(12.0 * k, FontFamily::Monospace),
    )))
    .collect()
}
