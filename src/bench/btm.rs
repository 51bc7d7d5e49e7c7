//! `gangway bench btm`: the throughput of Branch-Train-Merge's branch phase on N devices against
//! one device. The ELMs never communicate, so the expectation is near-linear scaling, as far as
//! the hardware lets the devices run at once.

use crate::btm::branch;
use crate::data::Corpus;
use crate::moe::MoeLmParams;
use crate::moe::training::TrainOptions;
use crate::{Device, Result};
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct BtmBenchResult {
    pub devices: usize,
    pub elms: usize,
    pub steps_per_elm: u32,
    pub tokens: u64,
    pub seconds: f64,
    pub tokens_per_s: f64,
    /// Tokens/s over the one-device run's, measured in the same process.
    pub speedup: f64,
}

/// Branches `seed` once per domain for `opts.steps` steps on 1 device, then on every count in
/// `device_counts` (capped at the devices found).
pub fn run(
    devices: &[Device],
    domains: &[(String, Corpus)],
    seed: &MoeLmParams,
    opts: &TrainOptions,
    device_counts: &[usize],
    mut progress: impl FnMut(&BtmBenchResult),
) -> Result<Vec<BtmBenchResult>> {
    let mut counts: Vec<usize> = std::iter::once(1)
        .chain(device_counts.iter().copied())
        .filter(|&n| n >= 1 && n <= devices.len())
        .collect();
    counts.dedup();
    let mut out: Vec<BtmBenchResult> = Vec::new();
    for n in counts {
        let start = std::time::Instant::now();
        let elms = branch(&devices[..n], domains, seed, opts, None, |_, _| {})?;
        let seconds = start.elapsed().as_secs_f64();
        let tokens: u64 = elms.iter().map(|e| e.report.tokens).sum();
        let tokens_per_s = tokens as f64 / seconds.max(1e-9);
        let base = out.first().map_or(tokens_per_s, |r| r.tokens_per_s);
        let r = BtmBenchResult {
            devices: n,
            elms: elms.len(),
            steps_per_elm: opts.steps,
            tokens,
            seconds,
            tokens_per_s,
            speedup: tokens_per_s / base,
        };
        progress(&r);
        out.push(r);
    }
    Ok(out)
}

pub fn table(results: &[BtmBenchResult]) -> String {
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|r| {
            vec![
                r.devices.to_string(),
                r.elms.to_string(),
                r.steps_per_elm.to_string(),
                format!("{:.1}", r.seconds),
                format!("{:.0}", r.tokens_per_s),
                format!("{:.2}×", r.speedup),
            ]
        })
        .collect();
    super::markdown_table(
        &[
            "devices",
            "ELMs",
            "steps each",
            "seconds",
            "tokens/s",
            "vs 1 device",
        ],
        &rows,
    )
}
