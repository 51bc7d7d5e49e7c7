//! The live tabs' frame pace: how often a stream of events (the Live tab's follower, an
//! attached job's reader) may ask for a frame. Input (a pan, a hover) always draws at once; only
//! frames that new events ask for are paced.
//!
//! A frame costs what the machine's renderer charges for the whole window, and that differs by
//! two orders of magnitude: a few milliseconds of CPU with a GPU, 150 ms at 1280 × 820 under
//! Mesa's llvmpipe on the 2-core VM of the book's viewer guide (where four frames a second took
//! two thirds of a core). So the pace is measured, not fixed: [`PaceMeter`] fits each frame
//! interval's process CPU time as `frame + background × interval` ([`fit`]), the frame's cost
//! apart from the work that runs meanwhile (the workload, the readers), and sets the pace so
//! that stream-driven frames take at most [`BUDGET`] of a core, between [`LEAST`] and [`MOST`].
//! With a GPU that is [`LEAST`], four frames a second. The pace alternates 20 % under and over
//! its target so that intervals differ and the fit can tell the two terms apart.
//!
//! The process's CPU time is read from Linux's `/proc/self/stat`; elsewhere the pace stays at
//! [`LEAST`].

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The shortest pace: as often as utilization is sampled.
pub const LEAST: Duration = Duration::from_millis(250);
/// The longest pace: a live view is not left older than this while events come.
pub const MOST: Duration = Duration::from_secs(2);
/// The share of one core that stream-driven frames may take.
pub const BUDGET: f64 = 0.15;
/// Frame intervals the fit looks back over.
const SAMPLES: usize = 24;
/// Fewer samples than this give no fit: the pace stays where it is.
const LEAST_SAMPLES: usize = 8;
/// An interval longer than this (a window left alone) says little about a frame: not sampled.
const LONGEST_SAMPLE: Duration = Duration::from_secs(10);
/// How far the pace swings under and over its target, so that intervals differ.
const SWING: f64 = 0.2;

/// The pace the streams of one window read (shared: a reader keeps a clone), and the frame
/// cost it was set from.
#[derive(Debug, Clone)]
pub struct FramePace(Arc<Shared>);

#[derive(Debug)]
struct Shared {
    every_ns: AtomicU64,
    /// The fitted frame cost; [`UNKNOWN`] before a fit.
    frame_ns: AtomicU64,
}

const UNKNOWN: u64 = u64::MAX;

impl Default for FramePace {
    fn default() -> Self {
        Self(Arc::new(Shared {
            every_ns: AtomicU64::new(LEAST.as_nanos() as u64),
            frame_ns: AtomicU64::new(UNKNOWN),
        }))
    }
}

impl FramePace {
    /// How long a stream gathers events before it asks for a frame.
    pub fn every(&self) -> Duration {
        Duration::from_nanos(self.0.every_ns.load(Ordering::Relaxed))
    }

    /// The CPU time a frame of this window costs, once measured.
    pub fn frame_cost(&self) -> Option<Duration> {
        let ns = self.0.frame_ns.load(Ordering::Relaxed);
        (ns != UNKNOWN).then(|| Duration::from_nanos(ns))
    }

    fn set(&self, every: Duration, frame: Duration) {
        self.0
            .every_ns
            .store(every.as_nanos() as u64, Ordering::Relaxed);
        self.0.frame_ns.store(
            (frame.as_nanos() as u64).min(UNKNOWN - 1),
            Ordering::Relaxed,
        );
    }

    /// What a person reads of the pace: how often events draw, and why.
    pub fn describe(&self) -> String {
        let every = format!("{:.2} s", self.every().as_secs_f64());
        match self.frame_cost() {
            Some(cost) => format!(
                "new events draw a frame at most every {every}: a frame costs {:.0} ms of CPU \
                 on this machine, and they may take {:.0} % of a core (input draws at once)",
                cost.as_secs_f64() * 1e3,
                BUDGET * 100.0
            ),
            None => format!("new events draw a frame at most every {every}"),
        }
    }

    /// The pace of the window `ctx` draws (kept in its memory, so every stream of one window
    /// shares it); without a window, a pace of its own that stays at [`LEAST`].
    pub fn of(ctx: Option<&egui::Context>) -> Self {
        let Some(ctx) = ctx else {
            return Self::default();
        };
        ctx.data_mut(|d| {
            d.get_temp_mut_or_default::<FramePace>(egui::Id::unique("gangway-frame-pace"))
                .clone()
        })
    }
}

/// A frame's cost apart from the work that ran beside it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fit {
    /// CPU time a frame costs.
    pub frame: Duration,
    /// Cores busy with everything else meanwhile.
    pub background: f64,
}

/// Fits `(interval, cpu)` pairs, in seconds, as `cpu = frame + background × interval` by least
/// squares, neither term negative. Intervals too alike to separate the terms put everything on
/// the frame (an upper bound, so the pace errs slow). `None` from fewer than
/// [`LEAST_SAMPLES`].
pub fn fit(samples: &[(f64, f64)]) -> Option<Fit> {
    if samples.len() < LEAST_SAMPLES {
        return None;
    }
    let n = samples.len() as f64;
    let mean_d = samples.iter().map(|s| s.0).sum::<f64>() / n;
    let mean_c = samples.iter().map(|s| s.1).sum::<f64>() / n;
    let var_d = samples.iter().map(|s| (s.0 - mean_d).powi(2)).sum::<f64>() / n;
    let cov = samples
        .iter()
        .map(|s| (s.0 - mean_d) * (s.1 - mean_c))
        .sum::<f64>()
        / n;
    let spread = var_d.sqrt() / mean_d.max(f64::MIN_POSITIVE);
    let (frame, background) = if spread < 0.05 {
        (mean_c, 0.0)
    } else {
        let background = (cov / var_d).max(0.0);
        let frame = mean_c - background * mean_d;
        if frame < 0.0 {
            // All of it grows with the interval: frames are (nearly) free.
            (0.0, mean_c / mean_d.max(f64::MIN_POSITIVE))
        } else {
            (frame, background)
        }
    };
    Some(Fit {
        frame: Duration::from_secs_f64(frame.max(0.0)),
        background,
    })
}

/// The pace that holds frames of `cost` to [`BUDGET`] of a core, within [`LEAST`]..[`MOST`].
pub fn pace_for(cost: Duration) -> Duration {
    Duration::from_secs_f64(cost.as_secs_f64() / BUDGET).clamp(LEAST, MOST)
}

/// Samples every frame's interval and the process's CPU time over it, and sets a window's
/// [`FramePace`] from their [`fit`].
#[derive(Debug, Default)]
pub struct PaceMeter {
    last: Option<(Instant, Duration)>,
    samples: VecDeque<(f64, f64)>,
    fit: Option<Fit>,
    over: bool,
}

impl PaceMeter {
    /// Notes a frame that starts at `now`, the process having used `cpu` so far (`None`: not
    /// known here, and the pace is left alone), and sets `pace`.
    pub fn frame(&mut self, now: Instant, cpu: Option<Duration>, pace: &FramePace) {
        let Some(cpu) = cpu else {
            return;
        };
        if let Some((t, c)) = self.last.replace((now, cpu)) {
            let interval = now.saturating_duration_since(t);
            if interval <= LONGEST_SAMPLE {
                if self.samples.len() == SAMPLES {
                    self.samples.pop_front();
                }
                self.samples
                    .push_back((interval.as_secs_f64(), cpu.saturating_sub(c).as_secs_f64()));
            }
        }
        self.fit = fit(self.samples.make_contiguous());
        if let Some(fit) = self.fit {
            self.over = !self.over;
            let swing = if self.over { 1.0 + SWING } else { 1.0 - SWING };
            pace.set(pace_for(fit.frame).mul_f64(swing), fit.frame);
        }
    }

    /// The latest fit, once there is one.
    pub fn fit(&self) -> Option<Fit> {
        self.fit
    }
}

/// The process's CPU time so far, all its threads (user and system), where the system says it:
/// Linux's `/proc/self/stat`, in its fixed 100 ticks a second.
pub fn process_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    cpu_of_stat(&stat)
}

/// `utime + stime` of a `/proc/PID/stat` line. The command name may hold spaces and
/// parentheses, so fields are counted after its last `)`.
fn cpu_of_stat(stat: &str) -> Option<Duration> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    // After the name: state is field 3, utime field 14 and stime field 15.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    // USER_HZ, which the kernel fixes at 100 for every architecture's user ABI.
    Some(Duration::from_millis((utime + stime) * 10))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Intervals of 0.2-0.3 s, each with a 150 ms frame and a workload busy 5 % of a core.
    fn llvmpipe_like(n: usize) -> Vec<(f64, f64)> {
        (0..n)
            .map(|i| {
                let d = if i % 2 == 0 { 0.2 } else { 0.3 };
                (d, 0.150 + 0.05 * d)
            })
            .collect()
    }

    #[test]
    fn the_fit_separates_the_frame_from_the_background() {
        let f = fit(&llvmpipe_like(12)).expect("enough samples");
        assert!((f.frame.as_secs_f64() - 0.150).abs() < 1e-9, "{f:?}");
        assert!((f.background - 0.05).abs() < 1e-9, "{f:?}");
        assert_eq!(fit(&llvmpipe_like(LEAST_SAMPLES - 1)), None);
    }

    #[test]
    fn alike_intervals_put_everything_on_the_frame() {
        let same: Vec<(f64, f64)> = (0..10).map(|_| (0.25, 0.2)).collect();
        let f = fit(&same).expect("enough samples");
        assert!((f.frame.as_secs_f64() - 0.2).abs() < 1e-9, "{f:?}");
        assert_eq!(f.background, 0.0);
    }

    #[test]
    fn cpu_that_grows_with_the_interval_alone_is_background() {
        let busy: Vec<(f64, f64)> = (0..10)
            .map(|i| {
                let d = 0.1 + 0.05 * i as f64;
                (d, 0.9 * d - 0.01)
            })
            .collect();
        let f = fit(&busy).expect("enough samples");
        assert_eq!(f.frame, Duration::ZERO);
        assert!(f.background > 0.8, "{f:?}");
    }

    #[test]
    fn the_pace_holds_frames_to_the_budget() {
        // A GPU's frame: as often as allowed.
        assert_eq!(pace_for(Duration::from_millis(3)), LEAST);
        // llvmpipe's 150 ms frame: one a second at 15 %.
        assert_eq!(pace_for(Duration::from_millis(150)), Duration::from_secs(1));
        assert_eq!(pace_for(Duration::from_secs(5)), MOST);
    }

    #[test]
    fn the_meter_sets_the_pace_of_an_expensive_window() {
        let pace = FramePace::default();
        let mut meter = PaceMeter::default();
        let start = Instant::now();
        let (mut t, mut cpu) = (start, Duration::ZERO);
        for (d, c) in llvmpipe_like(20) {
            meter.frame(t, Some(cpu), &pace);
            t += Duration::from_secs_f64(d);
            cpu += Duration::from_secs_f64(c);
        }
        let every = pace.every().as_secs_f64();
        assert!((0.79..=1.21).contains(&every), "{every}");
        // Not known: the pace is left alone.
        let other = FramePace::default();
        PaceMeter::default().frame(start, None, &other);
        assert_eq!(other.every(), LEAST);
    }

    #[test]
    fn a_stat_line_reads_with_spaces_in_the_name() {
        let line = "4449 (gangway (x) y) S 1 2 3 4 5 6 7 8 9 10 250 37 0 0 20 0 31 0";
        assert_eq!(cpu_of_stat(line), Some(Duration::from_millis(2870)));
        assert_eq!(cpu_of_stat("garbage"), None);
        if cfg!(target_os = "linux") {
            assert!(process_cpu().is_some());
        }
    }

    #[test]
    fn a_window_shares_one_pace() {
        let ctx = egui::Context::default();
        let a = FramePace::of(Some(&ctx));
        assert_eq!(a.frame_cost(), None);
        a.set(Duration::from_secs(1), Duration::from_millis(150));
        let b = FramePace::of(Some(&ctx));
        assert_eq!(b.every(), Duration::from_secs(1));
        assert_eq!(b.frame_cost(), Some(Duration::from_millis(150)));
        assert!(
            b.describe().contains("every 1.00 s: a frame costs 150 ms"),
            "{}",
            b.describe()
        );
        assert_eq!(FramePace::of(None).every(), LEAST);
    }
}
