//! A [`Layout`] as a standalone SVG document.

use std::fmt::Write as _;

use super::layout::{Anchor, Layout, Shape, hatch_lines};
use super::style::Rgba;
use super::trim_number;

pub(super) const FONT_FAMILY: &str = "Liberation Sans, Arial, Helvetica, DejaVu Sans, sans-serif";

/// `layout` as a standalone SVG document (UTF-8, no XML declaration): every shape in order,
/// hatching as explicit clipped lines (the segments of [`hatch_lines`]), text escaped.
pub fn svg(layout: &Layout) -> String {
    let mut s = String::with_capacity(256 + 160 * layout.shapes.len());
    let (w, h) = (num(layout.width), num(layout.height));
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="{FONT_FAMILY}">"#
    );
    let _ = writeln!(
        s,
        r#"<rect x="0" y="0" width="{w}" height="{h}"{}/>"#,
        paint("fill", layout.background)
    );
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
                let _ = write!(
                    s,
                    r#"<rect x="{}" y="{}" width="{}" height="{}"{}"#,
                    num(*x),
                    num(*y),
                    num(w.max(0.0)),
                    num(h.max(0.0)),
                    paint("fill", *fill)
                );
                s.push_str("/>\n");
                if let Some(color) = hatch {
                    let lines = hatch_lines(*x, *y, *w, *h, layout.hatch_spacing);
                    if !lines.is_empty() {
                        let _ = write!(
                            s,
                            r#"<path fill="none" stroke-width="{}" stroke-linecap="butt"{} d=""#,
                            num(layout.hatch_width),
                            paint("stroke", *color)
                        );
                        for (i, [x0, y0, x1, y1]) in lines.iter().enumerate() {
                            if i > 0 {
                                s.push(' ');
                            }
                            let _ =
                                write!(s, "M{} {}L{} {}", num(*x0), num(*y0), num(*x1), num(*y1));
                        }
                        s.push_str("\"/>\n");
                    }
                }
                if let Some((width, color)) = stroke {
                    let _ = writeln!(
                        s,
                        r#"<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke-width="{}"{}/>"#,
                        num(*x),
                        num(*y),
                        num(w.max(0.0)),
                        num(h.max(0.0)),
                        num(*width),
                        paint("stroke", *color)
                    );
                }
            }
            Shape::Text {
                x,
                y,
                text,
                size,
                color,
                anchor,
                bold,
            } => {
                let anchor = match anchor {
                    Anchor::Start => "start",
                    Anchor::Middle => "middle",
                    Anchor::End => "end",
                };
                let weight = if *bold { r#" font-weight="bold""# } else { "" };
                let _ = writeln!(
                    s,
                    r#"<text x="{}" y="{}" font-size="{}" text-anchor="{anchor}"{weight}{}>{}</text>"#,
                    num(*x),
                    num(y + 0.35 * size),
                    num(*size),
                    paint("fill", *color),
                    escape(text)
                );
            }
            Shape::Line {
                x0,
                y0,
                x1,
                y1,
                width,
                color,
            } => {
                let _ = writeln!(
                    s,
                    r#"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke-width="{}"{}/>"#,
                    num(*x0),
                    num(*y0),
                    num(*x1),
                    num(*y1),
                    num(*width),
                    paint("stroke", *color)
                );
            }
        }
    }
    s.push_str("</svg>\n");
    s
}

/// ` fill="#rrggbb"` plus ` fill-opacity=".."` when not opaque (likewise for `stroke`).
pub(super) fn paint(what: &str, c: Rgba) -> String {
    let mut out = format!(r#" {what}="{}""#, c.hex());
    if c.0[3] < 255 {
        let _ = write!(
            out,
            r#" {what}-opacity="{}""#,
            trim_number(f64::from(c.opacity()), 3)
        );
    }
    out
}

/// A coordinate with at most two decimals; non-finite values become 0.
pub(super) fn num(v: f32) -> String {
    if v.is_finite() {
        trim_number(f64::from(v), 2)
    } else {
        "0".into()
    }
}

/// `text` safe inside an element or a quoted attribute; control characters XML forbids are
/// dropped.
pub(super) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if c.is_control() && !matches!(c, '\t' | '\n' | '\r') => {}
            c => out.push(c),
        }
    }
    out
}
