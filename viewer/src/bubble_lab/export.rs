//! Exporting the lab's figure for slides: SVG from the figure's layout (the same drawing the
//! CLI's `gangway pipeline --svg` writes), and PNG from that SVG drawn off screen, so the whole
//! figure comes out however much of it the window shows. Drawing, encoding and writing happen
//! off the UI thread, and every file is written all-or-nothing: a new file with
//! [`gangway::fsutil::write_new`], which never replaces one, and an existing one only once the
//! user confirmed, with [`gangway::fsutil::write_atomic`] (as the files tab saves), so a kill
//! mid-write leaves the old file or none.

use std::path::PathBuf;

use gangway::pipeline::figure::{Layout, svg};

use crate::background::{self, Job};

/// What an export writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Svg,
    /// The whole figure drawn off screen at [`PNG_SCALE`] pixels per figure unit.
    Png,
}

impl Format {
    pub fn extension(self) -> &'static str {
        match self {
            Format::Svg => "svg",
            Format::Png => "png",
        }
    }
}

/// An export being written, and the outcome of the last one.
#[derive(Debug, Default)]
pub struct Exporter {
    pending: Option<Job<Result<PathBuf, String>>>,
    /// The last export: the path written, or why it failed.
    pub last: Option<Result<PathBuf, String>>,
    /// An export to a file that exists, waiting for the user to confirm replacing it.
    pub confirm: Option<(Format, PathBuf)>,
}

impl Exporter {
    pub fn is_busy(&self) -> bool {
        self.pending.is_some()
    }

    /// Writes the whole figure of `layout` as `format` to `path` in the background, however
    /// much of it the window shows. A path that exists is written only with `overwrite` (the
    /// user confirmed); otherwise the export waits for that ([`Self::confirm`]).
    pub fn export(
        &mut self,
        layout: &Layout,
        format: Format,
        path: PathBuf,
        overwrite: bool,
        ctx: &egui::Context,
    ) {
        if !overwrite && path.exists() {
            self.confirm = Some((format, path));
            return;
        }
        self.confirm = None;
        let text = svg(layout);
        self.spawn(ctx, move || {
            let bytes = match format {
                Format::Svg => text.into_bytes(),
                Format::Png => png_of_svg(&text, PNG_SCALE)?,
            };
            write(&path, &bytes, overwrite)
        });
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

fn write(path: &std::path::Path, bytes: &[u8], overwrite: bool) -> Result<PathBuf, String> {
    crate::files::write_file(path, bytes, overwrite).map(|()| path.to_path_buf())
}

/// Pixels per figure unit of an exported PNG: crisp on a projector's 1080p or 4K.
pub const PNG_SCALE: f32 = 2.0;

/// The figure's SVG (`gangway::pipeline::figure::svg`) rasterized at `scale` as a PNG file, with
/// the viewer's bundled DejaVu Sans for its text (the SVG names it among its fonts), so the same
/// figure comes out on a machine with no fonts installed.
pub fn png_of_svg(text: &str, scale: f32) -> Result<Vec<u8>, String> {
    use resvg::{tiny_skia, usvg};
    let mut opts = usvg::Options {
        font_family: "DejaVu Sans".into(),
        ..usvg::Options::default()
    };
    opts.fontdb_mut()
        .load_font_data(crate::fonts::DEJAVU_SANS.to_vec());
    let tree =
        usvg::Tree::from_str(text, &opts).map_err(|e| format!("cannot read the SVG: {e}"))?;
    let size = tree
        .size()
        .to_int_size()
        .scale_by(scale)
        .ok_or("the figure is too large for a PNG")?;
    let mut pixmap = tiny_skia::Pixmap::new(size.width(), size.height())
        .ok_or("the figure is too large for a PNG")?;
    resvg::render(
        &tree,
        tiny_skia::Transform::from_scale(scale, scale),
        &mut pixmap.as_mut(),
    );
    pixmap
        .encode_png()
        .map_err(|e| format!("cannot encode the PNG: {e}"))
}
