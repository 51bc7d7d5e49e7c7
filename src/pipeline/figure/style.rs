//! The figure's look: themes, the one palette (F, B, W; the viewer's timeline uses it too),
//! and each theme's sizes and colours.

use super::super::schedule_kind::OpKind;

/// Which look: the viewer's dark one, or a light one for slides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Theme {
    /// Dark background, as egui's dark theme; compact type.
    Screen,
    /// Light background, type of at least 18 px, thick blocks: for a projector.
    #[default]
    Projector,
}

/// A colour, sRGB with straight (not premultiplied) alpha.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rgba(pub [u8; 4]);

impl Rgba {
    /// An opaque colour.
    pub const fn rgb(r: u8, g: u8, b: u8) -> Rgba {
        Rgba([r, g, b, 255])
    }

    /// `self` moved a fraction `t` (0..=1) of the way to `other`, alpha included.
    pub fn mix(self, other: Rgba, t: f32) -> Rgba {
        let t = t.clamp(0.0, 1.0);
        let mut out = [0u8; 4];
        for (o, (a, b)) in out.iter_mut().zip(self.0.iter().zip(other.0)) {
            *o = (f32::from(*a) + (f32::from(b) - f32::from(*a)) * t).round() as u8;
        }
        Rgba(out)
    }

    /// `#rrggbb`, without alpha.
    pub fn hex(self) -> String {
        let [r, g, b, _] = self.0;
        format!("#{r:02x}{g:02x}{b:02x}")
    }

    /// Alpha as 0..=1.
    pub fn opacity(self) -> f32 {
        f32::from(self.0[3]) / 255.0
    }

    /// Relative brightness 0..=255 (Rec. 709 weights on the sRGB values).
    pub(super) fn luma(self) -> f32 {
        let [r, g, b, _] = self.0;
        0.2126 * f32::from(r) + 0.7152 * f32::from(g) + 0.0722 * f32::from(b)
    }
}

/// Forward blocks (the viewer's timeline bars take F, B and W from here too).
pub const FORWARD: Rgba = Rgba::rgb(66, 133, 244);
/// Backward (input-gradient) blocks.
pub const BACKWARD: Rgba = Rgba::rgb(52, 168, 83);
/// Weight-gradient blocks.
pub const WEIGHT_GRAD: Rgba = Rgba::rgb(251, 140, 0);
/// The peak-activation bars.
pub(super) const MEMORY: Rgba = Rgba::rgb(142, 99, 206);
/// The progress cursor.
pub(super) const CURSOR: Rgba = Rgba::rgb(229, 57, 53);

/// The colour of a compute block of `kind` on `chunk` of `chunks`: chunk 0 in the kind's
/// colour, later chunks darker (up to 45 % towards black for the last).
pub fn block_color(kind: OpKind, chunk: usize, chunks: usize) -> Rgba {
    let base = match kind {
        OpKind::Backward => BACKWARD,
        OpKind::WeightGrad => WEIGHT_GRAD,
        _ => FORWARD,
    };
    if chunks <= 1 {
        return base;
    }
    let t = 0.45 * chunk.min(chunks - 1) as f32 / (chunks - 1) as f32;
    base.mix(Rgba::rgb(0, 0, 0), t)
}

/// Sizes and colours of a theme.
#[derive(Debug, Clone, Copy)]
pub(super) struct Style {
    pub(super) bg: Rgba,
    pub(super) text: Rgba,
    pub(super) muted: Rgba,
    pub(super) grid: Rgba,
    pub(super) idle: Rgba,
    pub(super) hatch: Rgba,
    pub(super) font: f32,
    pub(super) small: f32,
    pub(super) title: f32,
    pub(super) label: f32,
    pub(super) lane_h: f32,
    pub(super) lane_gap: f32,
    pub(super) row_gap: f32,
    pub(super) pad: f32,
    pub(super) stroke: f32,
    pub(super) hatch_spacing: f32,
    pub(super) hatch_width: f32,
}

impl Style {
    pub(super) fn of(theme: Theme) -> Style {
        match theme {
            Theme::Projector => Style {
                bg: Rgba::rgb(255, 255, 255),
                text: Rgba::rgb(25, 25, 25),
                muted: Rgba::rgb(85, 85, 85),
                grid: Rgba::rgb(222, 222, 222),
                idle: Rgba::rgb(238, 238, 238),
                hatch: Rgba::rgb(95, 95, 95),
                font: 20.0,
                small: 18.0,
                title: 24.0,
                label: 18.0,
                lane_h: 40.0,
                lane_gap: 5.0,
                row_gap: 30.0,
                pad: 24.0,
                stroke: 2.0,
                // The bubble is what a lecture is about: dark, thick hatching that a projector
                // does not wash out.
                hatch_spacing: 10.0,
                hatch_width: 2.5,
            },
            Theme::Screen => Style {
                bg: Rgba::rgb(27, 27, 27),
                text: Rgba::rgb(225, 225, 225),
                muted: Rgba::rgb(150, 150, 150),
                grid: Rgba::rgb(52, 52, 52),
                idle: Rgba::rgb(42, 42, 42),
                hatch: Rgba::rgb(100, 100, 100),
                font: 13.0,
                small: 12.0,
                title: 15.0,
                label: 12.0,
                lane_h: 22.0,
                lane_gap: 3.0,
                row_gap: 16.0,
                pad: 12.0,
                stroke: 1.0,
                hatch_spacing: 6.0,
                hatch_width: 1.0,
            },
        }
    }

    /// `c` faded into the background, for what has not happened yet.
    pub(super) fn dim(&self, c: Rgba) -> Rgba {
        c.mix(self.bg, 0.75)
    }

    /// Black or white text on `fill`, whichever reads better.
    pub(super) fn on(&self, fill: Rgba) -> Rgba {
        if fill.luma() > 150.0 {
            Rgba::rgb(20, 20, 20)
        } else {
            Rgba::rgb(255, 255, 255)
        }
    }
}
