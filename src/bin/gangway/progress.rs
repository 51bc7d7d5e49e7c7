//! Progress on the terminal, through indicatif: bars draw only when stderr is a terminal (piped
//! output gets the plain lines alone), and lines printed beside a bar go above it.

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::collections::HashMap;
use std::io::IsTerminal;
use std::sync::Mutex;

fn style() -> ProgressStyle {
    ProgressStyle::with_template("[{bar:30}] {pos}/{len} {prefix}{msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("#>-")
}

/// Where bars draw: stderr, on the rank that prints (rank 0 of a job).
fn target() -> ProgressDrawTarget {
    if crate::prints() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    }
}

/// A bar of `len` steps on stderr (hidden when stderr is not a terminal).
pub fn bar(len: u64) -> ProgressBar {
    let pb = ProgressBar::with_draw_target(Some(len), target());
    pb.set_style(style());
    pb
}

/// Prints `line` above `pb` on a terminal, or as a plain stderr line otherwise.
pub fn line(pb: &ProgressBar, line: String) {
    if std::io::stderr().is_terminal() {
        pb.println(line);
    } else {
        eprintln!("{line}");
    }
}

/// One bar per named task (a BTM phase's branches), made when the task first reports.
pub struct Bars {
    multi: MultiProgress,
    bars: Mutex<HashMap<String, ProgressBar>>,
}

impl Bars {
    pub fn new() -> Self {
        Self {
            multi: MultiProgress::with_draw_target(target()),
            bars: Mutex::default(),
        }
    }

    /// Moves `task`'s bar (of `len` steps) to `step`.
    pub fn set(&self, task: &str, len: u64, step: u64) {
        let mut bars = self
            .bars
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let pb = bars.entry(task.to_string()).or_insert_with(|| {
            let pb = self.multi.add(bar(len));
            pb.set_prefix(format!("{task} "));
            pb
        });
        pb.set_position(step);
        if step >= len {
            pb.finish();
        }
    }
}
