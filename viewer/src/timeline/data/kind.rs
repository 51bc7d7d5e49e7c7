//! How a bar is coloured: [`BarKind`], gangway's kinds of event (pipeline ops by their
//! [`PipelineOp`], never by name) or, for another tool's trace, a colour of [`NAME_COLORS`] by
//! a hash of the slice's name as Perfetto colours them; and [`figure_color`], the pipeline
//! figure's palette in egui.

use gangway::trace::{Event, EventKind, PipelineOp};

/// What a bar shows, by kind and, for kernels, by name prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BarKind {
    Forward,
    Backward,
    WeightGrad,
    AllToAll,
    Kernel,
    Transfer,
    HostEncode,
    Wait,
    /// Another tool's slice, coloured by its name: one of [`NAME_COLORS`] by a hash of it.
    Named(u8),
}

/// The colours slices are given by name (Material shades that white text reads on, as
/// Perfetto's palette): a name keeps its colour from run to run and file to file.
pub const NAME_COLORS: [egui::Color32; 14] = [
    egui::Color32::from_rgb(0x1e, 0x88, 0xe5),
    egui::Color32::from_rgb(0x43, 0xa0, 0x47),
    egui::Color32::from_rgb(0xe5, 0x39, 0x35),
    egui::Color32::from_rgb(0x8e, 0x24, 0xaa),
    egui::Color32::from_rgb(0xf4, 0x51, 0x1e),
    egui::Color32::from_rgb(0x00, 0x89, 0x7b),
    egui::Color32::from_rgb(0x39, 0x49, 0xab),
    egui::Color32::from_rgb(0xc0, 0xca, 0x33),
    egui::Color32::from_rgb(0xd8, 0x1b, 0x60),
    egui::Color32::from_rgb(0x00, 0xac, 0xc1),
    egui::Color32::from_rgb(0x6d, 0x4c, 0x41),
    egui::Color32::from_rgb(0x5e, 0x35, 0xb1),
    egui::Color32::from_rgb(0xfb, 0x8c, 0x00),
    egui::Color32::from_rgb(0x54, 0x6e, 0x7a),
];

/// A stable hash of a name (FNV-1a), for its colour.
fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Whether `hay` contains `needle`, ignoring ASCII case (no allocation).
fn contains_ignore_ascii_case(hay: &str, needle: &str) -> bool {
    hay.as_bytes()
        .windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
}

impl BarKind {
    pub const ALL: [BarKind; 8] = [
        BarKind::Forward,
        BarKind::Backward,
        BarKind::WeightGrad,
        BarKind::AllToAll,
        BarKind::Kernel,
        BarKind::Transfer,
        BarKind::HostEncode,
        BarKind::Wait,
    ];

    /// [`BarKind::named`] by `e`'s name if `by_name`, else [`BarKind::of`].
    pub fn for_event(e: &Event, by_name: bool) -> Self {
        if by_name {
            Self::named(&e.name)
        } else {
            Self::of(e)
        }
    }

    /// The [`BarKind::Named`] of a name: the same name, the same colour.
    pub fn named(name: &str) -> Self {
        BarKind::Named((name_hash(name) % NAME_COLORS.len() as u64) as u8)
    }

    /// Pipeline ops by their [`PipelineOp`] (what the bubble counts too), all-to-alls by name,
    /// everything else by kind.
    pub fn of(e: &Event) -> Self {
        match e.kind {
            EventKind::Transfer => BarKind::Transfer,
            EventKind::HostEncode => BarKind::HostEncode,
            EventKind::Wait => BarKind::Wait,
            EventKind::Kernel => {
                if contains_ignore_ascii_case(&e.name, "all_to_all")
                    || contains_ignore_ascii_case(&e.name, "all-to-all")
                {
                    return BarKind::AllToAll;
                }
                match PipelineOp::of(e) {
                    Some(PipelineOp::Forward) => BarKind::Forward,
                    Some(PipelineOp::Backward) => BarKind::Backward,
                    Some(PipelineOp::WeightGrad) => BarKind::WeightGrad,
                    None => BarKind::Kernel,
                }
            }
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            BarKind::Forward => "forward F",
            BarKind::Backward => "backward B",
            BarKind::WeightGrad => "weight-grad W",
            BarKind::AllToAll => "all-to-all",
            BarKind::Kernel => "kernel",
            BarKind::Transfer => "transfer",
            BarKind::HostEncode => "host encode",
            BarKind::Wait => "wait",
            BarKind::Named(_) => "slice",
        }
    }

    /// The bar's colour; F, B and W in the pipeline figure's palette (one palette for both).
    pub fn color(self) -> egui::Color32 {
        use egui::Color32;
        use gangway::pipeline::figure::{BACKWARD, FORWARD, WEIGHT_GRAD};
        match self {
            BarKind::Forward => figure_color(FORWARD),
            BarKind::Backward => figure_color(BACKWARD),
            BarKind::WeightGrad => figure_color(WEIGHT_GRAD),
            BarKind::AllToAll => Color32::from_rgb(156, 39, 176),
            BarKind::Kernel => Color32::from_rgb(92, 107, 192),
            BarKind::Transfer => Color32::from_rgb(0, 150, 136),
            BarKind::HostEncode => Color32::from_rgb(230, 190, 40),
            BarKind::Wait => Color32::from_rgb(200, 80, 80),
            BarKind::Named(k) => NAME_COLORS[usize::from(k) % NAME_COLORS.len()],
        }
    }
}

/// A colour of the pipeline figure's palette as egui paints it.
pub fn figure_color(c: gangway::pipeline::figure::Rgba) -> egui::Color32 {
    let [r, g, b, a] = c.0;
    egui::Color32::from_rgba_unmultiplied(r, g, b, a)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::data::kernel;

    #[test]
    fn kind_of_ignores_case_without_allocating() {
        assert_eq!(
            BarKind::of(&kernel(0, "MoE All-To-All", 0, 1)),
            BarKind::AllToAll
        );
        assert_eq!(
            BarKind::of(&kernel(0, "x ALL_TO_ALL", 0, 1)),
            BarKind::AllToAll
        );
        assert_eq!(BarKind::of(&kernel(0, "all", 0, 1)), BarKind::Kernel);
    }
}
