//! Frame-rate statistics for `--frame-stats`: how fast the viewer draws on this machine, measured
//! in a real window (a test harness's own render and read-back would dominate the numbers).
//!
//! Frames are grouped into windows of about a second of activity. A gap longer than
//! [`IDLE_GAP`] between two frames is the app idling (it only repaints on input or change), not a
//! slow frame: it ends the window instead of counting as an interval.

use std::time::{Duration, Instant};

/// A gap between frames longer than this is idle time, not a frame.
pub const IDLE_GAP: Duration = Duration::from_millis(250);
/// Active time after which a window is reported.
pub const WINDOW: Duration = Duration::from_secs(1);

/// One window's frames: intervals between consecutive frames, and the CPU time eframe measured
/// for each frame's update.
#[derive(Debug, Clone, PartialEq)]
pub struct FrameWindow {
    pub frames: usize,
    pub fps: f64,
    pub median_interval_ms: f64,
    pub p90_interval_ms: f64,
    pub median_cpu_ms: Option<f64>,
}

impl std::fmt::Display for FrameWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "frames: {} at {:.1} fps, interval median {:.1} ms, p90 {:.1} ms",
            self.frames, self.fps, self.median_interval_ms, self.p90_interval_ms
        )?;
        if let Some(cpu) = self.median_cpu_ms {
            write!(f, ", update median {cpu:.1} ms")?;
        }
        Ok(())
    }
}

#[derive(Debug, Default)]
pub struct FrameStats {
    last: Option<Instant>,
    intervals: Vec<Duration>,
    cpu: Vec<f32>,
}

impl FrameStats {
    /// Notes a frame that started at `now`; `cpu_s` is the previous frame's update time, as
    /// eframe reports it. Returns a window's statistics when one closes.
    pub fn frame(&mut self, now: Instant, cpu_s: Option<f32>) -> Option<FrameWindow> {
        let gap = self.last.map(|t| now.saturating_duration_since(t));
        self.last = Some(now);
        let report = match gap {
            Some(g) if g > IDLE_GAP => self.close(),
            Some(g) => {
                self.intervals.push(g);
                self.cpu.extend(cpu_s);
                None
            }
            None => None,
        };
        if self.intervals.iter().sum::<Duration>() >= WINDOW {
            return self.close();
        }
        report
    }

    /// The open window's statistics, leaving it empty; `None` if it has no interval.
    pub fn close(&mut self) -> Option<FrameWindow> {
        let mut ms: Vec<f64> = self
            .intervals
            .drain(..)
            .map(|d| d.as_secs_f64() * 1e3)
            .collect();
        let mut cpu: Vec<f64> = self.cpu.drain(..).map(|s| f64::from(s) * 1e3).collect();
        if ms.is_empty() {
            return None;
        }
        let total: f64 = ms.iter().sum();
        ms.sort_by(f64::total_cmp);
        cpu.sort_by(f64::total_cmp);
        let at = |v: &[f64], q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
        Some(FrameWindow {
            frames: ms.len(),
            fps: ms.len() as f64 / (total / 1e3),
            median_interval_ms: at(&ms, 0.5),
            p90_interval_ms: at(&ms, 0.9),
            median_cpu_ms: (!cpu.is_empty()).then(|| at(&cpu, 0.5)),
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_second_of_steady_frames_reports_their_rate() {
        let t0 = Instant::now();
        let mut s = FrameStats::default();
        let mut reports = Vec::new();
        for i in 0..=40u32 {
            reports.extend(s.frame(t0 + Duration::from_millis(25) * i, Some(0.010)));
        }
        assert_eq!(reports.len(), 1);
        let w = &reports[0];
        assert_eq!(w.frames, 40);
        assert!((w.fps - 40.0).abs() < 1e-6, "{w}");
        assert!((w.median_interval_ms - 25.0).abs() < 1e-6);
        assert!((w.median_cpu_ms.unwrap() - 10.0).abs() < 1e-3);
        assert!(w.to_string().starts_with("frames: 40 at 40.0 fps"), "{w}");
    }

    #[test]
    fn idle_gaps_end_a_window_and_are_not_frames() {
        let t0 = Instant::now();
        let mut s = FrameStats::default();
        let ms = |m: u64| t0 + Duration::from_millis(m);
        assert_eq!(s.frame(ms(0), None), None);
        assert_eq!(s.frame(ms(50), None), None);
        assert_eq!(s.frame(ms(150), None), None);
        // Two seconds of nothing on screen changing: the app slept, it did not draw slowly.
        let w = s.frame(ms(2_150), None).unwrap();
        assert_eq!(w.frames, 2);
        assert!((w.fps - 2.0 / 0.150).abs() < 1e-6, "{w}");
        assert_eq!(w.p90_interval_ms, 100.0);
        assert_eq!(w.median_cpu_ms, None);
        assert_eq!(s.close(), None);
    }
}
