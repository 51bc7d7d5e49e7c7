//! What a timeline remembers between frames ([`TimelineState`]): its view, whether that view is
//! still the fit of the data ([`Fitted`]), following live data, the cursor, the rows' scroll,
//! and what the time axis counts from ([`TimeAxis`]).

use std::ops::Range;

use crate::timeline::data::TimelineData;
use crate::timeline::view::TimeView;

/// Where the time axis counts from: one convention per kind of data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimeAxis {
    /// From the data's first event (`0`, `5 ms`, ...): files, the lab, the comparison.
    #[default]
    FromStart,
    /// Back from the newest event (`−10 s`, `−5 s`, `now`): live data, whose absolute times
    /// mean little.
    BeforeNewest,
}

/// What the timeline remembers between frames.
#[derive(Debug, Clone)]
pub struct TimelineState {
    /// `None` until the first frame with data (then fitted to the data).
    pub view: Option<TimeView>,
    /// Keep the newest events in view.
    pub follow_live: bool,
    /// A vertical marker (the bubble lab's step cursor), in ns.
    pub cursor_ns: Option<u64>,
    /// Width of the bar area last frame, for view maths outside the widget (tests).
    pub last_width: f32,
    /// What the axis labels count from.
    pub axis: TimeAxis,
    /// Set while [`TimelineState::view`] is the fit of the data (nobody panned or zoomed since):
    /// then, each frame the data's span or the bar width differs (new or forgotten events, a
    /// window resize, a new pixels-per-point), the view is fitted again. Panning, zooming and
    /// clicking a bar clear it, and so does setting `view` from outside; double-click and
    /// [`TimelineState::reset`] set it again.
    pub fitted: Option<Fitted>,
    /// Points the rows are scrolled up by, when they are taller than the widget.
    pub scroll_y: f32,
    /// Draw flow arrows (on by default).
    pub show_flows: bool,
    /// Show every row at its height, however little room is left below: for a timeline inside
    /// a scrolling page (the lab's measured run), whose page scrolls instead of the widget.
    pub every_row: bool,
    /// Whether the last frame hid rows behind the widget's own scrolling (less room than
    /// rows).
    pub clipped: bool,
}

/// What a fitted view was fitted to (see [`TimelineState::fitted`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Fitted {
    pub span: Range<u64>,
    pub width: f32,
    /// The view the fit gave: a different [`TimelineState::view`] was set by someone else.
    pub view: TimeView,
}

impl Default for TimelineState {
    fn default() -> Self {
        Self {
            view: None,
            follow_live: false,
            cursor_ns: None,
            last_width: 600.0,
            axis: TimeAxis::FromStart,
            fitted: None,
            scroll_y: 0.0,
            show_flows: true,
            every_row: false,
            clipped: false,
        }
    }
}

impl TimelineState {
    /// Fits the view to everything in `data` (what double-click does); it then stays fitted
    /// as the data and the width change, until the user pans or zooms.
    pub fn reset(&mut self, data: &TimelineData) {
        self.fit(data.span(), self.last_width);
    }

    pub(super) fn fit(&mut self, span: Option<Range<u64>>, width: f32) {
        match span {
            Some(span) => {
                let view = TimeView::fit(span.clone(), width);
                self.view = Some(view);
                self.fitted = Some(Fitted { span, width, view });
            }
            None => {
                self.view = None;
                self.fitted = None;
            }
        }
    }

    /// Whether the view is still the fit of the data (see [`TimelineState::fitted`]).
    pub fn is_fitted(&self) -> bool {
        self.fitted
            .as_ref()
            .is_some_and(|f| self.view == Some(f.view))
    }

    /// Before a frame of `bar_w` pixels: fits a missing view, refits a fitted one whose span or
    /// width changed, and forgets a fit that someone moved away from.
    pub(super) fn refit(&mut self, span: Option<Range<u64>>, bar_w: f32) {
        if self.view.is_none() {
            self.fit(span, bar_w);
        } else if self.is_fitted() {
            let stale = self
                .fitted
                .as_ref()
                .is_some_and(|f| Some(&f.span) != span.as_ref() || (f.width - bar_w).abs() > 0.25);
            if stale {
                self.fit(span, bar_w);
            }
        } else {
            self.fitted = None;
        }
    }

    /// The time axis's origin for `span`: its start, or its end for [`TimeAxis::BeforeNewest`].
    pub fn origin(&self, span: &Range<u64>) -> f64 {
        match self.axis {
            TimeAxis::FromStart => span.start as f64,
            TimeAxis::BeforeNewest => span.end as f64,
        }
    }
}
