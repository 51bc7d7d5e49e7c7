//! Checks a schedule by running it symbolically: each stage in its own order, a receive waiting
//! for its send, no costs. A schedule that passes runs to completion on real devices whatever
//! the op durations are, because only the order of ops, never their timing, decides progress.

use serde::Serialize;

use super::engine::{self, Timing};
use super::schedule::Schedule;
use crate::error::ScheduleError;

/// What validation learned about a schedule that is correct.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Validation {
    /// Per stage, the most microbatch-chunks whose activations it holds at once: from F until
    /// W, or until B when B also computes the weight gradient.
    pub peak_activations: Vec<usize>,
}

/// Checks that every F, B (and W) runs exactly once per (microbatch, virtual stage), that each
/// op's inputs exist when it runs (F after the previous virtual stage's F, B after its own F and
/// the next virtual stage's B, W after B), that every send has its receive and the peers are
/// right, and that no set of stages waits on each other forever. The error names the first rule
/// broken, or for a deadlock every stuck stage and the op it waits at.
pub fn validate(s: &Schedule) -> Result<Validation, ScheduleError> {
    let run = engine::execute(s, Timing::default(), &[], &[], false)?;
    Ok(Validation {
        peak_activations: run.peak_activations,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::pipeline::{Op, OpKind, ScheduleKind};

    /// Every shape each kind accepts up to p = 8, m = 12 (v = 2..4 where the kind takes it).
    fn shapes() -> Vec<(ScheduleKind, usize, usize, usize)> {
        let mut out = Vec::new();
        for p in 1..=8 {
            for m in 1..=12 {
                for kind in ScheduleKind::ALL {
                    let vs = if kind.takes_chunks() { 2..=4 } else { 1..=1 };
                    for v in vs.map(|v| kind.chunks(v)) {
                        if Schedule::new(kind, p, m, v).is_ok() {
                            out.push((kind, p, m, v));
                        }
                    }
                }
            }
        }
        out
    }

    #[test]
    fn every_kind_validates() {
        for (kind, p, m, v) in shapes() {
            let s = Schedule::new(kind, p, m, v).unwrap();
            let r = validate(&s);
            assert!(r.is_ok(), "{kind} p={p} m={m} v={v}: {}", r.unwrap_err());
        }
    }

    #[test]
    fn one_f_one_b_holds_p_minus_s_activations() {
        for p in 1..=8 {
            for m in 1..=12 {
                let s = Schedule::new(ScheduleKind::OneFOneB, p, m, 1).unwrap();
                let peak = validate(&s).unwrap().peak_activations;
                let want: Vec<usize> = (0..p).map(|st| (p - st).min(m)).collect();
                assert_eq!(peak, want, "p={p} m={m}");
            }
        }
    }

    #[test]
    fn gpipe_holds_every_microbatch() {
        let s = Schedule::new(ScheduleKind::GPipe, 4, 7, 1).unwrap();
        assert_eq!(validate(&s).unwrap().peak_activations, vec![7; 4]);
    }

    #[test]
    fn zb_h1_peak_matches_1f1b_stage_zero() {
        for p in 1..=8 {
            for m in 1..=12 {
                let s = Schedule::new(ScheduleKind::ZbH1, p, m, 1).unwrap();
                let peak = validate(&s).unwrap().peak_activations;
                assert_eq!(peak.iter().max().copied(), Some(p.min(m)), "p={p} m={m}");
            }
        }
    }

    #[test]
    fn interleaved_peak_is_its_warmup_plus_one() {
        let (p, m, v) = (4, 8, 2);
        let s = Schedule::new(ScheduleKind::Interleaved, p, m, v).unwrap();
        let peak = validate(&s).unwrap().peak_activations;
        let want: Vec<usize> = (0..p)
            .map(|st| 2 * (p - st - 1) + (v - 1) * p + 1)
            .collect();
        assert_eq!(peak, want);
    }

    #[test]
    fn backward_before_forward_is_rejected() {
        let mut s = Schedule::new(ScheduleKind::GPipe, 2, 2, 1).unwrap();
        // Stage 1 (last) has no transfers around B: recv-act, F, recv-act, F, B, send, B, send.
        let ops = &mut s.ops[1];
        let f0 = ops.iter().position(|o| o.kind == OpKind::Forward).unwrap();
        let b0 = ops.iter().position(|o| o.kind == OpKind::Backward).unwrap();
        let b = ops.remove(b0);
        ops.insert(f0, b);
        let err = validate(&s).unwrap_err();
        assert_eq!(
            err.to_string(),
            "stage 1, op #1: B(mb 0, chunk 0) runs before its own F(mb 0, chunk 0)"
        );
    }

    #[test]
    fn swapped_order_deadlocks() {
        // Stage 0 runs F0 B0 F1 B1 (no warm-up), stage 1 takes microbatch 1 first: stage 0 waits
        // for the gradient of mb 0, stage 1 for the activation of mb 1, sent only after it.
        use OpKind::*;
        let mut s = Schedule::new(ScheduleKind::OneFOneB, 2, 2, 1).unwrap();
        s.ops[0] = (0..2)
            .flat_map(|mb| {
                [
                    Op::compute(Forward, mb, 0),
                    Op::transfer(SendActivation, mb, 0, 1),
                    Op::transfer(RecvGradient, mb, 0, 1),
                    Op::compute(Backward, mb, 0),
                ]
            })
            .collect();
        for op in &mut s.ops[1] {
            op.microbatch = 1 - op.microbatch;
        }
        let err = validate(&s).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the schedule deadlocks: stage 0 waits at op #2 recv-grad(mb 0, chunk 0 <- stage 1), \
             which stage 1 sends only at its op #7; stage 1 waits at op #0 recv-act(mb 1, chunk 0 \
             <- stage 0), which stage 0 sends only at its op #5"
        );
    }

    #[test]
    fn missing_and_foreign_ops_are_named() {
        let mut s = Schedule::new(ScheduleKind::GPipe, 1, 2, 1).unwrap();
        s.ops[0].pop();
        assert_eq!(
            validate(&s).unwrap_err().to_string(),
            "B(mb 1, chunk 0) never runs on stage 0"
        );
        let mut s = Schedule::new(ScheduleKind::OneFOneB, 2, 2, 1).unwrap();
        s.ops[1].push(Op::compute(OpKind::WeightGrad, 0, 0));
        assert_eq!(
            validate(&s).unwrap_err().to_string(),
            "stage 1, op #8 (W(mb 0, chunk 0)): 1f1b folds the weight gradient into B, so it has \
             no W ops"
        );
        let mut s = Schedule::new(ScheduleKind::OneFOneB, 3, 2, 1).unwrap();
        s.ops[1][0].peer = Some(2);
        assert_eq!(
            validate(&s).unwrap_err().to_string(),
            "stage 1, op #0 (recv-act(mb 0, chunk 0 <- stage 2)): that tensor lives on stage 0"
        );
        let mut s = Schedule::new(ScheduleKind::OneFOneB, 2, 1, 1).unwrap();
        s.ops[1].retain(|o| o.kind != OpKind::RecvActivation);
        assert_eq!(
            validate(&s).unwrap_err().to_string(),
            "stage 1, op #0: F(mb 0, chunk 0) runs before receiving its activation from stage 0"
        );
    }

    #[test]
    fn unreceived_send_is_rejected() {
        let mut s = Schedule::new(ScheduleKind::GPipe, 2, 1, 1).unwrap();
        s.ops[0].retain(|o| matches!(o.kind, OpKind::Forward | OpKind::SendActivation));
        assert_eq!(
            validate(&s).unwrap_err().to_string(),
            "stage 1 sends the gradient of mb 0 for chunk 0 that stage 0 never receives"
        );
    }

    #[test]
    fn bad_stage_count_is_rejected() {
        let mut s = Schedule::new(ScheduleKind::GPipe, 2, 1, 1).unwrap();
        s.ops.pop();
        assert_eq!(
            validate(&s).unwrap_err(),
            ScheduleError::StageCount { stages: 2, got: 1 }
        );
    }
}
