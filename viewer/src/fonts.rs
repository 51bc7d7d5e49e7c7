//! The bundled font. egui's default fonts lack the arrows and a few symbols the UI prints
//! ("stage 0 → 1", "−10 s"), and the viewer must not depend on what the system has installed.
//! DejaVu Sans, unmodified (Bitstream Vera licence, DejaVu changes public domain; see
//! `assets/fonts/LICENSE-DejaVu.txt`), goes after egui's fonts in every family: it only draws
//! what they lack.

use egui::{FontData, FontFamily, FontInsert, FontPriority, InsertFontFamily};

/// The name the font is installed under.
pub const NAME: &str = "DejaVuSans";

/// Symbols the UI prints that egui's default fonts do not have.
pub const SYMBOLS: &str = "→←↑↓−…×≤≥";

/// The bundled font's file: the UI's fallback, and the text of exported PNG figures.
pub const DEJAVU_SANS: &[u8] = include_bytes!("../assets/fonts/DejaVuSans.ttf");

/// Adds the bundled font as the last fallback of the proportional and monospace families
/// (once per context: later calls do nothing).
pub fn install(ctx: &egui::Context) {
    let families = [FontFamily::Proportional, FontFamily::Monospace]
        .into_iter()
        .map(|family| InsertFontFamily {
            family,
            priority: FontPriority::Lowest,
        })
        .collect();
    ctx.add_font(FontInsert {
        name: NAME.into(),
        data: FontData::from_static(DEJAVU_SANS),
        families,
    });
}
