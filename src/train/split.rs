//! How a step's routing groups are dealt to the devices of a gang: device `i` holds `counts[i]`
//! consecutive groups and runs them one round at a time, so a device with fewer groups idles in
//! the last rounds while the others finish theirs. An even split is every trainer's default; a
//! split in proportion to each device's measured speed lets a fast adapter carry more of the
//! batch than a slow one beside it (the seeds and JAX assume identical devices; a software
//! adapter beside a GPU, or an integrated GPU beside a discrete one, are not).
//!
//! The groups themselves, and so every loss and gradient term, are those of the even split; only
//! the order in which a step adds its groups' gradients changes (each device adds its own, then
//! the all-reduce adds the devices' sums), so losses agree to rounding, not bit for bit.
//!
//! Every device still holds its experts and serves every round's all-to-all: only the token side
//! of the model (embeddings, dense layers, routing, the loss) follows the split. An idle device
//! sends zero slots, which its peers' experts turn into exact zeros.

use crate::device::MeshDevice;
use crate::sched::RunHandle;
use crate::trace::{BusyTime, Event};
use crate::{Device, Error, Result};
use std::time::Instant;

/// Groups per device, in device order; see the module docs.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GroupSplit {
    counts: Vec<usize>,
}

fn invalid(reason: String) -> Error {
    Error::InvalidArgument {
        what: "group split",
        reason,
    }
}

impl GroupSplit {
    /// `groups` over `devices`, the same number each.
    pub fn even(groups: usize, devices: usize) -> Result<Self> {
        if devices == 0 || groups == 0 || !groups.is_multiple_of(devices) {
            return Err(invalid(format!(
                "{groups} routing groups cannot be split evenly over {devices} devices"
            )));
        }
        Ok(Self {
            counts: vec![groups / devices; devices],
        })
    }

    /// These counts (one per device): every device gets at least one group.
    pub fn from_counts(counts: Vec<usize>) -> Result<Self> {
        if counts.is_empty() || counts.contains(&0) {
            return Err(invalid(format!(
                "every device needs at least one routing group, not {counts:?}"
            )));
        }
        Ok(Self { counts })
    }

    /// `groups` in proportion to `speeds` (any positive unit, one per device), by largest
    /// remainder with at least one group each: the device that would finish its share first gets
    /// each group left over.
    pub fn weighted(groups: usize, speeds: &[f64]) -> Result<Self> {
        let d = speeds.len();
        if d == 0 || groups < d {
            return Err(invalid(format!(
                "{groups} routing groups cannot give each of {d} devices one"
            )));
        }
        if let Some(s) = speeds.iter().find(|s| !(s.is_finite() && **s > 0.0)) {
            return Err(invalid(format!(
                "device speeds must be positive and finite, not {s}"
            )));
        }
        let total: f64 = speeds.iter().sum();
        // One each, then the rest by share.
        let spare = (groups - d) as f64;
        let ideal: Vec<f64> = speeds.iter().map(|s| spare * s / total).collect();
        let mut counts: Vec<usize> = ideal.iter().map(|x| 1 + x.floor() as usize).collect();
        let mut left = groups - counts.iter().sum::<usize>();
        while left > 0 {
            // The device whose time per group after one more stays lowest.
            let next = (0..d)
                .min_by(|&a, &b| {
                    let t = |i: usize| (counts[i] + 1) as f64 / speeds[i];
                    t(a).total_cmp(&t(b))
                })
                .unwrap_or(0);
            counts[next] += 1;
            left -= 1;
        }
        Self::from_counts(counts)
    }

    /// Each device's speed from a trace of steps run with an even split: the inverse of its busy
    /// time (kernels and transfers), since every device did the same work. `devices[i]` is the
    /// trace's id of the gang's device `i`.
    pub fn speeds_from_trace(events: &[Event], devices: &[usize]) -> Result<Vec<f64>> {
        devices
            .iter()
            .map(|&d| {
                let busy = BusyTime::of(events, d).busy_ns(0..u64::MAX);
                if busy == 0 {
                    Err(invalid(format!(
                        "the trace has no work of device {d} to measure its speed by"
                    )))
                } else {
                    Ok(1e9 / busy as f64)
                }
            })
            .collect()
    }

    /// Balancing for a trainer over `devices` routing `groups` groups, whose `grads` submits one
    /// gradient pass (no update) dealt as the split given, traced or not: each device's speed
    /// from its busy time in two traced passes with an even split (every device doing the same
    /// work) after one to warm up, then [`Self::choose`] between the even split and the one
    /// those speeds ask for. Every device must be this process's (another rank's device leaves
    /// no events here).
    pub(crate) fn balance(
        devices: &[MeshDevice],
        groups: usize,
        grads: impl Fn(&GroupSplit, bool) -> Result<RunHandle>,
    ) -> Result<Balanced> {
        let ids = devices
            .iter()
            .map(|d| d.local().map(Device::id))
            .collect::<Option<Vec<usize>>>()
            .ok_or_else(|| invalid("speeds are measured on this process's devices only".into()))?;
        let even = Self::even(groups, devices.len())?;
        let mut events = Vec::new();
        for run in 0..3 {
            let trace = grads(&even, true)?.wait_traced()?.1;
            if run > 0 {
                events.extend(trace);
            }
        }
        let speeds = Self::speeds_from_trace(&events, &ids)?;
        Self::choose(groups, speeds, 3, |split| {
            let start = Instant::now();
            grads(split, false)?.wait_bytes()?;
            Ok(start.elapsed().as_secs_f64())
        })
    }

    /// Errors unless this split deals `groups` groups to `devices` devices.
    pub fn check_fits(&self, groups: usize, devices: usize) -> Result<()> {
        if self.devices() != devices || self.groups() != groups {
            return Err(invalid(format!(
                "a split of {} groups over {} devices for a trainer of {groups} over {devices}",
                self.groups(),
                self.devices()
            )));
        }
        Ok(())
    }

    /// Chooses between the even split and the one `speeds` ask for by timing both: `time` runs
    /// one step's work with a split and returns its wall seconds; each runs `runs` times,
    /// alternating, after one warm-up each, and the lower median wins. A split by speed runs
    /// more rounds than an even one (every device serves every round's experts), so on devices
    /// of near-equal speed it can be slower; timing both keeps the even split then.
    pub fn choose(
        groups: usize,
        speeds: Vec<f64>,
        runs: usize,
        mut time: impl FnMut(&GroupSplit) -> Result<f64>,
    ) -> Result<Balanced> {
        let even = Self::even(groups, speeds.len())?;
        let by_speed = Self::weighted(groups, &speeds)?;
        if by_speed == even {
            return Ok(Balanced {
                split: even,
                speeds,
                even_seconds: None,
                by_speed_seconds: None,
            });
        }
        time(&even)?;
        time(&by_speed)?;
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for _ in 0..runs.max(1) {
            a.push(time(&even)?);
            b.push(time(&by_speed)?);
        }
        let (even_s, by_speed_s) = (median(&mut a), median(&mut b));
        Ok(Balanced {
            split: if by_speed_s < even_s { by_speed } else { even },
            speeds,
            even_seconds: Some(even_s),
            by_speed_seconds: Some(by_speed_s),
        })
    }

    /// `speeds` over the fastest of them (1 for the fastest), for reports.
    pub fn relative(speeds: &[f64]) -> Vec<f64> {
        let fastest = speeds.iter().copied().fold(0.0, f64::max);
        speeds.iter().map(|s| s / fastest).collect()
    }

    pub fn devices(&self) -> usize {
        self.counts.len()
    }

    pub fn groups(&self) -> usize {
        self.counts.iter().sum()
    }

    pub fn counts(&self) -> &[usize] {
        &self.counts
    }

    pub fn is_even(&self) -> bool {
        self.counts.windows(2).all(|w| w[0] == w[1])
    }

    /// Rounds a step runs: the most groups any device holds.
    pub fn rounds(&self) -> usize {
        self.counts.iter().copied().max().unwrap_or(0)
    }

    /// The group device `device` runs in round `round`, if it runs one.
    pub fn group(&self, device: usize, round: usize) -> Option<usize> {
        let count = *self.counts.get(device)?;
        (round < count).then(|| self.counts[..device].iter().sum::<usize>() + round)
    }

    /// Which devices run a group in `round`; `None` when all do.
    pub fn active(&self, round: usize) -> Option<Vec<bool>> {
        let flags: Vec<bool> = self.counts.iter().map(|&c| round < c).collect();
        (!flags.iter().all(|&a| a)).then_some(flags)
    }
}

/// How a training run deals its groups: evenly, in proportion to speeds measured on the run's
/// first batch before it trains, or as given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Balance {
    #[default]
    Even,
    Measured,
    Counts(Vec<usize>),
}

impl std::str::FromStr for Balance {
    type Err = Error;

    /// `even`, `measured`, or groups per device such as `6,2`.
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "even" => Ok(Self::Even),
            "measured" => Ok(Self::Measured),
            _ => {
                let counts = s
                    .split(',')
                    .map(|c| c.trim().parse::<usize>())
                    .collect::<std::result::Result<Vec<usize>, _>>()
                    .map_err(|_| {
                        invalid(format!(
                            "{s:?} is not `even`, `measured` or groups per device such as 6,2"
                        ))
                    })?;
                GroupSplit::from_counts(counts.clone())?;
                Ok(Self::Counts(counts))
            }
        }
    }
}

fn median(xs: &mut [f64]) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// What balancing found ([`GroupSplit::choose`]): the split chosen, each device's measured speed,
/// and the median seconds of the even split and the split by speed when both were timed.
#[derive(Debug, Clone, PartialEq)]
pub struct Balanced {
    pub split: GroupSplit,
    pub speeds: Vec<f64>,
    pub even_seconds: Option<f64>,
    pub by_speed_seconds: Option<f64>,
}

impl std::fmt::Display for Balanced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let speeds: Vec<String> = GroupSplit::relative(&self.speeds)
            .iter()
            .map(|s| format!("{s:.2}"))
            .collect();
        write!(f, "groups {} for speeds {}", self.split, speeds.join(", "))?;
        if let (Some(e), Some(b)) = (self.even_seconds, self.by_speed_seconds) {
            let by_speed = GroupSplit::weighted(self.split.groups(), &self.speeds)
                .map(|s| s.to_string())
                .unwrap_or_default();
            write!(
                f,
                " (a pass took {:.1} ms even, {:.1} ms as {by_speed})",
                e * 1e3,
                b * 1e3
            )?;
        }
        Ok(())
    }
}

impl std::fmt::Display for GroupSplit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self.counts.iter().map(usize::to_string).collect();
        write!(f, "{}", parts.join(","))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn even_splits_give_every_device_the_same_groups_in_order() {
        let s = GroupSplit::even(8, 4).unwrap();
        assert_eq!(s.counts(), [2, 2, 2, 2]);
        assert!(s.is_even());
        assert_eq!(s.rounds(), 2);
        assert_eq!(s.group(1, 0), Some(2));
        assert_eq!(s.group(3, 1), Some(7));
        assert_eq!(s.active(1), None);
        assert!(GroupSplit::even(6, 4).is_err());
        assert!(GroupSplit::even(4, 0).is_err());
    }

    #[test]
    fn weighted_splits_follow_speed_and_every_device_keeps_a_group() {
        // Twice as fast gets twice the groups.
        let s = GroupSplit::weighted(12, &[2.0, 2.0, 1.0, 1.0]).unwrap();
        assert_eq!(s.counts(), [4, 4, 2, 2]);
        assert_eq!(s.groups(), 12);
        assert_eq!(s.rounds(), 4);
        assert_eq!(s.group(2, 1), Some(9));
        assert_eq!(s.group(2, 2), None);
        assert_eq!(s.active(2), Some(vec![true, true, false, false]));
        // A very slow device still gets one.
        let s = GroupSplit::weighted(8, &[100.0, 1.0]).unwrap();
        assert_eq!(s.counts(), [7, 1]);
        // Left-over groups go where one more costs least.
        let s = GroupSplit::weighted(5, &[1.0, 1.1]).unwrap();
        assert_eq!(s.counts(), [2, 3]);
        for bad in [vec![1.0, 0.0], vec![f64::NAN, 1.0], vec![]] {
            assert!(GroupSplit::weighted(8, &bad).is_err(), "{bad:?}");
        }
        assert!(GroupSplit::weighted(1, &[1.0, 1.0]).is_err());
        assert!(GroupSplit::from_counts(vec![2, 0]).is_err());
        assert_eq!(
            GroupSplit::from_counts(vec![3, 1]).unwrap().to_string(),
            "3,1"
        );
    }

    #[test]
    fn balances_parse_from_their_flags() {
        assert_eq!("even".parse::<Balance>().unwrap(), Balance::Even);
        assert_eq!("measured".parse::<Balance>().unwrap(), Balance::Measured);
        assert_eq!(
            "6, 2".parse::<Balance>().unwrap(),
            Balance::Counts(vec![6, 2])
        );
        for bad in ["", "fast", "6,0", "6,,2", "-1"] {
            assert!(bad.parse::<Balance>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn choosing_keeps_the_split_that_times_faster() {
        let speeds = vec![2.0, 1.0];
        // No timing when the speeds ask for the even split.
        let b = GroupSplit::choose(4, vec![1.0, 1.05], 3, |_| unreachable!()).unwrap();
        assert!(b.split.is_even() && b.even_seconds.is_none());
        // The split by speed wins only when it runs faster.
        for (even_s, by_speed_s, want) in [(2.0, 1.0, "5,3"), (1.0, 2.0, "4,4")] {
            let b = GroupSplit::choose(8, speeds.clone(), 3, |s| {
                Ok(if s.is_even() { even_s } else { by_speed_s })
            })
            .unwrap();
            assert_eq!(b.split.to_string(), want);
            assert_eq!(b.even_seconds, Some(even_s));
            assert!(b.to_string().contains("for speeds 1.00, 0.50"), "{b}");
        }
    }
}
