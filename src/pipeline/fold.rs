//! More stages than devices: a [`Fold`] puts a schedule's `p` stages on `d ≤ p` devices, several
//! stages to a device, the way a model cut finer than the machine is placed. Each stage keeps its
//! own op order; a device runs one op at a time, taking whichever of its stages' next ops can
//! start first ([`super::simulate_folded`] models exactly that, and a run on devices issues each
//! device's ops in the simulated order). A hand-off between two stages on one device moves
//! nothing.
//!
//! Two placements, as the literature has them:
//! - **blocks**: consecutive stages share a device (`0, 1 | 2, 3` on two devices), so a device
//!   holds one contiguous slice of the model and half its hand-offs are local;
//! - **round robin**: stage `s` on device `s mod d` (`0, 2 | 1, 3`), as Megatron places an
//!   interleaved schedule's chunks, so every hand-off crosses devices and a device holds slices
//!   from both ends of the model.

use serde::Serialize;

use crate::error::ScheduleError;

/// Where a schedule's stages run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum Fold {
    /// One device per stage (`d = p`): the textbook's picture.
    #[default]
    OnePerStage,
    /// Consecutive stages share a device: stage `s` on device `s · d / p`.
    Blocks { devices: usize },
    /// Stage `s` on device `s mod d`.
    RoundRobin { devices: usize },
}

impl Fold {
    /// Parses the CLI's `--fold`: `blocks` or `round-robin`, onto `devices` devices.
    pub fn parse(placement: &str, devices: usize) -> Result<Fold, ScheduleError> {
        match placement {
            "blocks" => Ok(Fold::Blocks { devices }),
            "round-robin" => Ok(Fold::RoundRobin { devices }),
            other => Err(ScheduleError::InvalidFold {
                reason: format!("no placement {other:?}: use blocks or round-robin"),
            }),
        }
    }

    /// The device count this fold asks for, `None` for one per stage.
    pub fn requested_devices(self) -> Option<usize> {
        match self {
            Fold::OnePerStage => None,
            Fold::Blocks { devices } | Fold::RoundRobin { devices } => Some(devices),
        }
    }

    /// "blocks", "round robin" or "one per stage".
    pub fn placement_name(self) -> &'static str {
        match self {
            Fold::OnePerStage => "one per stage",
            Fold::Blocks { .. } => "blocks",
            Fold::RoundRobin { .. } => "round robin",
        }
    }

    /// Each of `stages` stages' device, or why this fold cannot take them.
    pub fn devices_of(self, stages: usize) -> Result<Vec<usize>, ScheduleError> {
        let d = match self.requested_devices() {
            None => return Ok((0..stages).collect()),
            Some(d) => d,
        };
        if d == 0 || d > stages {
            return Err(ScheduleError::InvalidFold {
                reason: format!(
                    "{stages} stages fold onto 1 to {stages} devices, not {d}",
                    stages = stages.max(1)
                ),
            });
        }
        Ok((0..stages)
            .map(|s| match self {
                Fold::Blocks { .. } => s * d / stages,
                _ => s % d,
            })
            .collect())
    }

    /// How many devices `stages` stages use (`stages` when one per stage).
    pub fn device_count(self, stages: usize) -> usize {
        self.requested_devices().unwrap_or(stages).min(stages)
    }

    /// Whether some device holds more than one stage.
    pub fn shares(self, stages: usize) -> bool {
        self.device_count(stages) < stages
    }
}

/// An op's trace name on its device: `base` (`F`, `B`, `W`, `act`, `grad`), with `.c<k>` when
/// the device holds more than one model chunk, `k` counting the device's chunks in stage order
/// (for one stage per device, the schedule's chunk). The simulator and a run on devices both
/// name ops so.
pub(super) fn op_name(
    base: &str,
    device_of: &[usize],
    chunks: usize,
    stage: usize,
    chunk: usize,
) -> String {
    let dev = device_of.get(stage).copied().unwrap_or(stage);
    let held = |s: &usize| device_of.get(*s).copied().unwrap_or(*s) == dev;
    let count = (0..device_of.len().max(stage + 1)).filter(held).count();
    if chunks * count > 1 {
        let rank = (0..stage).filter(held).count();
        format!("{base}.c{}", rank * chunks + chunk)
    } else {
        base.to_owned()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn placements_put_stages_where_their_names_say() {
        assert_eq!(Fold::OnePerStage.devices_of(3).unwrap(), [0, 1, 2]);
        assert_eq!(
            Fold::Blocks { devices: 2 }.devices_of(4).unwrap(),
            [0, 0, 1, 1]
        );
        assert_eq!(
            Fold::Blocks { devices: 2 }.devices_of(5).unwrap(),
            [0, 0, 0, 1, 1]
        );
        assert_eq!(
            Fold::RoundRobin { devices: 2 }.devices_of(5).unwrap(),
            [0, 1, 0, 1, 0]
        );
        assert_eq!(
            Fold::Blocks { devices: 3 }.devices_of(3).unwrap(),
            [0, 1, 2]
        );
        // Every device gets a stage, whatever p and d are.
        for p in 1..=9 {
            for d in 1..=p {
                for fold in [Fold::Blocks { devices: d }, Fold::RoundRobin { devices: d }] {
                    let mut used = fold.devices_of(p).unwrap();
                    used.sort_unstable();
                    used.dedup();
                    assert_eq!(used, (0..d).collect::<Vec<_>>(), "{fold:?} p={p}");
                    assert_eq!(fold.device_count(p), d);
                    assert_eq!(fold.shares(p), d < p);
                }
            }
        }
        for bad in [Fold::Blocks { devices: 0 }, Fold::RoundRobin { devices: 5 }] {
            let e = bad.devices_of(4).unwrap_err();
            assert!(e.to_string().contains("1 to 4 devices"), "{e}");
        }
        assert!(Fold::parse("zigzag", 2).is_err());
        assert_eq!(
            Fold::parse("round-robin", 2).unwrap(),
            Fold::RoundRobin { devices: 2 }
        );
    }
}
