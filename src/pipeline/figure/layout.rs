//! The renderer-independent drawing: shapes in pixels, the blocks where they were placed, the
//! hatch of a bubble, and the text metrics the layout measures with.

use super::Block;
use super::style::Rgba;

/// How a text's `x` relates to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Anchor {
    Start,
    Middle,
    End,
}

/// One thing to paint, in pixels from the top left.
#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    Rect {
        x: f32,
        y: f32,
        w: f32,
        h: f32,
        fill: Rgba,
        /// Width and colour, centred on the edge.
        stroke: Option<(f32, Rgba)>,
        /// Diagonal hatching in this colour: the segments of [`hatch_lines`] (bubble cells).
        hatch: Option<Rgba>,
    },
    Text {
        x: f32,
        /// The vertical middle of the text's capitals and digits.
        y: f32,
        text: String,
        /// Font size in pixels.
        size: f32,
        color: Rgba,
        anchor: Anchor,
        bold: bool,
    },
    Line {
        x0: f32,
        y0: f32,
        x1: f32,
        y1: f32,
        width: f32,
        color: Rgba,
    },
}

/// Where one compute op was drawn, for hover tooltips and tests.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlacedBlock {
    /// Index into [`super::Figure::rows`].
    pub row: usize,
    pub block: Block,
    pub x: f32,
    pub y: f32,
    pub w: f32,
    pub h: f32,
    /// Whether the microbatch number fit inside and was drawn.
    pub labelled: bool,
}

/// A figure laid out in pixels; see the module notes for how to paint it.
#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    pub width: f32,
    pub height: f32,
    pub background: Rgba,
    /// Distance between hatch lines, measured along the axes.
    pub hatch_spacing: f32,
    /// Line width of hatch lines.
    pub hatch_width: f32,
    pub shapes: Vec<Shape>,
    /// Every compute block drawn, in the order of [`super::FigureRow::blocks`] row after row.
    pub blocks: Vec<PlacedBlock>,
}

/// The hatch segments `[x0, y0, x1, y1]` of a `w × h` rectangle at `(x, y)`: lines at 45° from
/// lower left to upper right, on the grid `x + y = k · spacing` (so adjacent cells' hatching
/// lines up), clipped to the rectangle.
pub fn hatch_lines(x: f32, y: f32, w: f32, h: f32, spacing: f32) -> Vec<[f32; 4]> {
    let mut out = Vec::new();
    if w <= 0.0 || h <= 0.0 || spacing <= 0.0 || !spacing.is_finite() {
        return out;
    }
    let (x1, y1) = (x + w, y + h);
    let mut k = ((x + y) / spacing).floor() + 1.0;
    loop {
        let c = k * spacing;
        if c >= x1 + y1 {
            break;
        }
        // On x + y = c: from the lower-left end to the upper-right end inside the rectangle.
        let ax = x.max(c - y1);
        let bx = x1.min(c - y);
        if bx > ax {
            out.push([ax, c - ax, bx, c - bx]);
        }
        k += 1.0;
    }
    out
}

/// An estimate of the width of `text` at `size` px: Arial's metrics (the SVG's first fonts)
/// widened by an eighth, so that what is measured to fit also fits in DejaVu Sans, the widest of
/// its fonts, which the viewer bundles and draws its PNG figures with.
pub(super) fn text_width(text: &str, size: f32, bold: bool) -> f32 {
    let ems: f32 = text
        .chars()
        .map(|c| match c {
            ' ' | '.' | ',' | ':' | ';' | '\'' | '|' | '!' | 'i' | 'j' | 'l' | '·' => 0.28,
            'f' | 't' | 'r' | 'I' | '(' | ')' | '[' | ']' | '-' => 0.34,
            '0'..='9' => 0.556,
            'm' | '%' => 0.86,
            'w' => 0.73,
            'M' | 'W' => 0.85,
            'a'..='z' | 'µ' | '=' | '+' | '×' | '–' => 0.556,
            'A'..='Z' => 0.68,
            _ => 0.6,
        })
        .sum();
    let weight = if bold { 1.24 } else { 1.17 };
    ems * weight * size
}
