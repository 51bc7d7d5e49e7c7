//! Exporting the lab's figure for slides: SVG from the figure's layout (the same drawing the
//! CLI's `gangway pipeline --svg` writes), PNG from the pixels on screen. Encoding and writing
//! happen off the UI thread, and every file is written all-or-nothing
//! ([`gangway::fsutil::write_atomic`]), so a kill mid-write leaves the old file or none.

use std::path::PathBuf;
use std::sync::mpsc::channel;

use egui::{ColorImage, Rect};
use gangway::pipeline::figure::{Layout, svg};

use crate::background::{self, Job};

/// An export being written, and the outcome of the last one.
#[derive(Debug, Default)]
pub struct Exporter {
    pending: Option<Job<Result<PathBuf, String>>>,
    /// The last export: the path written, or why it failed.
    pub last: Option<Result<PathBuf, String>>,
}

impl Exporter {
    pub fn is_busy(&self) -> bool {
        self.pending.is_some()
    }

    /// Writes `layout` as SVG to `path` in the background.
    pub fn svg(&mut self, layout: &Layout, path: PathBuf, ctx: &egui::Context) {
        let text = svg(layout);
        self.spawn(ctx, move || write(&path, text.as_bytes()));
    }

    /// Writes the pixels of `rect` (in points) as PNG to `path`, from the next frame's
    /// screenshot.
    pub fn png(&mut self, rect: Rect, path: PathBuf, ctx: &egui::Context) {
        let (tx, rx) = channel();
        let scale = ctx.pixels_per_point();
        let repaint = ctx.clone();
        let callback = egui::ScreenshotCallback::new(move |image| {
            // Encoding a large PNG takes a while: not on the thread that renders.
            let encode = {
                let tx = tx.clone();
                move || {
                    let _ = tx.send(png_bytes(&image, rect, scale).and_then(|b| write(&path, &b)));
                }
            };
            if let Err(e) = background::spawn("gangway-png", Some(repaint), encode) {
                let _ = tx.send(Err(e));
            }
        });
        ctx.send_viewport_cmd(egui::ViewportCommand::Screenshot(callback));
        ctx.request_repaint();
        self.pending = Some(Job::from_receiver(rx));
    }

    /// Picks up a finished export; true when one arrived.
    pub fn poll(&mut self) -> bool {
        let Some(outcome) = self.pending.as_ref().and_then(|j| j.poll("the export")) else {
            return false;
        };
        self.last = Some(outcome.and_then(|r| r));
        self.pending = None;
        true
    }

    fn spawn(
        &mut self,
        ctx: &egui::Context,
        job: impl FnOnce() -> Result<PathBuf, String> + Send + 'static,
    ) {
        match background::spawn("gangway-export", Some(ctx.clone()), job) {
            Ok(rx) => self.pending = Some(rx),
            Err(e) => self.last = Some(Err(e)),
        }
    }
}

fn write(path: &std::path::Path, bytes: &[u8]) -> Result<PathBuf, String> {
    gangway::fsutil::write_atomic(path, bytes)
        .map(|()| path.to_path_buf())
        .map_err(|e| e.to_string())
}

/// The pixels of `rect` (points; `scale` pixels per point) of `image`, as a PNG file.
pub fn png_bytes(image: &ColorImage, rect: Rect, scale: f32) -> Result<Vec<u8>, String> {
    let [w, h] = image.size;
    let px = |v: f32, max: usize| ((v * scale).round().max(0.0) as usize).min(max);
    let (x0, x1) = (px(rect.left(), w), px(rect.right(), w));
    let (y0, y1) = (px(rect.top(), h), px(rect.bottom(), h));
    if x1 <= x0 || y1 <= y0 {
        return Err(format!(
            "the figure is not on screen (rect {rect:?} in a {w}×{h} image)"
        ));
    }
    let mut rgba = Vec::with_capacity((x1 - x0) * (y1 - y0) * 4);
    for y in y0..y1 {
        for x in x0..x1 {
            let c = image.pixels.get(y * w + x).copied().unwrap_or_default();
            rgba.extend_from_slice(&c.to_srgba_unmultiplied());
        }
    }
    let too_big = |_| "the figure is too large for a PNG".to_string();
    let buffer = image::RgbaImage::from_raw(
        u32::try_from(x1 - x0).map_err(too_big)?,
        u32::try_from(y1 - y0).map_err(too_big)?,
        rgba,
    )
    .ok_or("the screenshot has fewer pixels than its size says")?;
    let mut out = std::io::Cursor::new(Vec::new());
    buffer
        .write_to(&mut out, image::ImageFormat::Png)
        .map_err(|e| format!("cannot encode the PNG: {e}"))?;
    Ok(out.into_inner())
}
