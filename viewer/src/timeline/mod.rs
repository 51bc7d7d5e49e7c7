//! A zoomable, pannable timeline of trace events: the model (`data`), the time ↔ pixel
//! transform (`view`), the rows as texels (`raster`) and the widget (`draw`).
//!
//! Each uses only those before it: `view` → `data` → `raster` → `draw`.

pub mod data;
pub mod draw;
pub mod raster;
pub mod view;

pub use data::{
    BarKind, CounterRow, FlowEnd, FlowLink, FlowPoint, InstantMark, NAME_COLORS, TimelineData,
    Track, figure_color,
};
pub use draw::{Fitted, TimeAxis, TimelineState, legend, timeline, tooltip_at_pointer};
pub use view::{TimeView, format_ns};
