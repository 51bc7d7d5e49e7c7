//! The lab's animation: a position on the simulated time axis that plays at a chosen speed or
//! steps from one start time of compute ops to the next (sends and receives take no time in the
//! lab's cost model, so they are not steps). Ops that start together are one step: the figure
//! lights what has started by a time, so a step per op would light several ops at one press
//! and none at the next. Pure state, unit-tested; the UI drives it.

use gangway::pipeline::{OpKind, Schedule, Simulation};

/// Where the animation stands.
#[derive(Debug, Clone, PartialEq)]
pub struct Player {
    /// Advancing with time.
    pub playing: bool,
    /// Simulated nanoseconds per real second while playing.
    pub speed_ns_per_s: f64,
    /// Start times reached (0: before the first; the figure is then shown whole).
    step: usize,
    /// Simulated time shown; `None` with step 0.
    at_ns: Option<f64>,
    /// Start of every compute op, sorted.
    starts: Vec<u64>,
    /// The distinct start times, sorted: the steps.
    times: Vec<u64>,
    end_ns: u64,
}

impl Player {
    /// A player over the compute ops of `runs` (one schedule, or several on a shared axis).
    pub fn new<'a>(runs: impl IntoIterator<Item = (&'a Schedule, &'a Simulation)>) -> Self {
        let mut starts = Vec::new();
        let mut end_ns = 0;
        for (schedule, sim) in runs {
            end_ns = end_ns.max(sim.makespan_ns);
            starts.extend(sim.order.iter().filter_map(|o| {
                let op = schedule.ops.get(o.stage)?.get(o.index)?;
                matches!(
                    op.kind,
                    OpKind::Forward | OpKind::Backward | OpKind::WeightGrad
                )
                .then_some(o.at_ns)
            }));
        }
        starts.sort_unstable();
        let mut times = starts.clone();
        times.dedup();
        Self {
            playing: false,
            speed_ns_per_s: 4_000.0,
            step: 0,
            at_ns: None,
            starts,
            times,
            end_ns,
        }
    }

    /// Steps in all: the distinct start times of the compute ops.
    pub fn total(&self) -> usize {
        self.times.len()
    }

    /// Start times reached.
    pub fn step(&self) -> usize {
        self.step
    }

    /// Compute ops in all.
    pub fn ops(&self) -> usize {
        self.starts.len()
    }

    /// Compute ops started by the time shown (all of them before the animation starts).
    pub fn started(&self) -> usize {
        match self.at_ns {
            None => self.ops(),
            Some(t) => self.starts.partition_point(|&s| s as f64 <= t),
        }
    }

    /// The simulated time shown, if the animation has started: ops starting after it are
    /// dimmed.
    pub fn at_ns(&self) -> Option<u64> {
        self.at_ns.map(|t| t.round().max(0.0) as u64)
    }

    /// Goes to the `step`-th distinct start time (0: before any, the whole figure).
    pub fn set_step(&mut self, step: usize) {
        self.step = step.min(self.total());
        self.at_ns = match self.step {
            0 => None,
            k => self.times.get(k - 1).map(|&t| t as f64),
        };
    }

    /// Goes to the time the `op`-th compute op (counting from 1, in start order) starts, with
    /// the step there: what the figure showed at step `op` when steps were ops (0: before any).
    pub fn go_to_op(&mut self, op: usize) {
        match op
            .checked_sub(1)
            .and_then(|i| self.starts.get(i.min(self.ops().saturating_sub(1))))
        {
            None => self.set_step(0),
            Some(&t) => self.set_step(self.times.partition_point(|&s| s <= t)),
        }
    }

    /// To the next start time (`forward`) or the one before, and pause.
    pub fn step_by(&mut self, forward: bool) {
        self.playing = false;
        let k = if forward {
            self.step + 1
        } else {
            self.step.saturating_sub(1)
        };
        self.set_step(k);
    }

    /// Play from where it stands (from the start if at the end or before it), or pause.
    pub fn toggle_play(&mut self) {
        if self.playing {
            self.playing = false;
            return;
        }
        if self.at_ns.is_none_or(|t| t >= self.end_ns as f64) {
            self.at_ns = Some(0.0);
        }
        self.playing = true;
        self.sync_step();
    }

    /// Advances by `dt_s` real seconds while playing; stops at the end. True while it plays
    /// (the UI then asks for the next frame).
    pub fn advance(&mut self, dt_s: f64) -> bool {
        if !self.playing {
            return false;
        }
        let t = self.at_ns.unwrap_or(0.0) + dt_s.max(0.0) * self.speed_ns_per_s;
        let end = self.end_ns as f64;
        self.at_ns = Some(t.min(end));
        self.sync_step();
        if t >= end {
            self.playing = false;
        }
        self.playing
    }

    fn sync_step(&mut self) {
        if let Some(t) = self.at_ns {
            self.step = self.times.partition_point(|&s| s as f64 <= t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gangway::pipeline::{Costs, ScheduleKind, simulate};

    fn one_f_one_b() -> (Schedule, Simulation) {
        let s = Schedule::new(ScheduleKind::OneFOneB, 2, 2, 1).expect("a valid shape");
        let sim = simulate(&s, &Costs::compute_only(1000, 1000, 0)).expect("it simulates");
        (s, sim)
    }

    #[test]
    fn steps_are_compute_ops_only() {
        let (s, sim) = one_f_one_b();
        let p = Player::new([(&s, &sim)]);
        // 2 stages × 2 microbatches × (F + B); the sends and receives are not ops.
        assert_eq!(p.ops(), 8);
        assert!(sim.order.len() > p.ops());
        // F 0 at 0; F 1 on stage 0 and F 0 on stage 1 at 1000; then one start per 1000 ns.
        let mut starts: Vec<u64> = sim
            .order
            .iter()
            .filter(|o| s.ops[o.stage][o.index].kind.is_compute())
            .map(|o| o.at_ns)
            .collect();
        starts.sort_unstable();
        starts.dedup();
        assert_eq!(p.total(), starts.len());
        assert!(p.total() < p.ops());
    }

    #[test]
    fn stepping_moves_to_each_start_time_and_back_to_the_whole_figure() {
        let (s, sim) = one_f_one_b();
        let mut p = Player::new([(&s, &sim)]);
        assert_eq!((p.at_ns(), p.started()), (None, 8));
        p.step_by(true);
        assert_eq!((p.step(), p.at_ns(), p.started()), (1, Some(0), 1));
        p.step_by(true);
        // Stage 0's second F and stage 1's first both start when stage 0's first F ends: one
        // step lights both.
        assert_eq!((p.step(), p.at_ns(), p.started()), (2, Some(1000), 3));
        // Every press moves on in time and starts something more.
        let mut last = (p.at_ns(), p.started());
        while p.step() < p.total() {
            p.step_by(true);
            let now = (p.at_ns(), p.started());
            assert!(now.0 > last.0 && now.1 > last.1, "{last:?} -> {now:?}");
            last = now;
        }
        assert_eq!(p.started(), p.ops());
        p.set_step(2);
        p.step_by(false);
        p.step_by(false);
        assert_eq!((p.step(), p.at_ns()), (0, None));
        p.set_step(100);
        assert_eq!(p.step(), p.total());
    }

    #[test]
    fn going_to_an_op_shows_its_start_time() {
        let (s, sim) = one_f_one_b();
        let mut p = Player::new([(&s, &sim)]);
        // The 2nd and 3rd ops start together, at 1000: both lead to the same step.
        p.go_to_op(3);
        assert_eq!((p.step(), p.at_ns(), p.started()), (2, Some(1000), 3));
        p.go_to_op(2);
        assert_eq!((p.step(), p.at_ns()), (2, Some(1000)));
        p.go_to_op(0);
        assert_eq!((p.step(), p.at_ns()), (0, None));
        p.go_to_op(1000);
        assert_eq!((p.step(), p.started()), (p.total(), p.ops()));
    }

    #[test]
    fn playing_advances_at_its_speed_and_stops_at_the_end() {
        let (s, sim) = one_f_one_b();
        let mut p = Player::new([(&s, &sim)]);
        p.speed_ns_per_s = 1000.0;
        p.toggle_play();
        assert!(p.advance(1.5));
        assert_eq!(p.at_ns(), Some(1500));
        // F of stage 0 mb 0 (0), F of stage 0 mb 1 and of stage 1 mb 0 (both at 1000).
        assert_eq!((p.step(), p.started()), (2, 3));
        assert!(!p.advance(1e6));
        assert_eq!(p.at_ns(), Some(sim.makespan_ns));
        assert_eq!(p.step(), p.total());
        // Play again at the end starts over.
        p.toggle_play();
        assert_eq!(p.at_ns(), Some(0));
    }
}
