//! The `generate` suite: the `transformer` suite's MoE model (its sizes and batch) generating
//! text on one device with its key/value cache ([`crate::transformer::decoder`]), against the
//! plain-Rust reference on the host that `gangway generate --host` runs, in the same run.
//!
//! Each of `B` sequences (1, and the suite's batch) starts from a prompt of `T/2` bytes of the
//! bundled corpora: **prefill** times that prompt's forward (`B·T/2` tokens a run), **decode**
//! the `T/2` greedy steps after it, one byte a sequence per step against the cache (`B·T/2`
//! tokens a run, each step's argmax read back and fed to the next). The **host reference**
//! decodes the same steps for one sequence as the host generates: a whole forward of the
//! window per byte. Decoding `B` sequences is compared to it.

use super::harness::{Blocking, BlockingRun, Extras};
use super::moe::Data;
use super::planned::Planned;
use super::transformer::TransformerBenchOptions;
use super::work::{Work, WorkUnit};
use crate::device::{DeviceList, MeshDevice};
use crate::sched::{Client, Runtime};
use crate::transformer::decoder::Decoder;
use crate::transformer::{TransformerParams, VOCAB, reference};
use crate::{Device, Result};

/// Each row's most likely byte.
fn argmax_rows(logits: &[f32]) -> Vec<u32> {
    logits
        .chunks_exact(VOCAB)
        .map(|row| {
            (0..row.len()).fold(0, |best, i| if row[i] > row[best] { i } else { best }) as u32
        })
        .collect()
}

/// What a run does: the prompt's prefill, or the decode steps after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Prefill,
    Decode,
}

/// A decoder with its prompts.
struct Decoding {
    decoder: Decoder,
    prompts: Vec<u32>,
    phase: Phase,
    half: usize,
    /// The bytes after the prompts (decode runs start from them, the caches holding the
    /// prompts from the prefill made when prepared).
    first: Vec<u32>,
}

impl Decoding {
    /// Every sequence's prompt, its forward filling positions `0..T/2` of the caches; the next
    /// bytes.
    fn prefill(&mut self) -> Result<Vec<u32>> {
        let logits = self.decoder.extend(&self.prompts, 0)?;
        let last = logits
            .chunks_exact(self.half * VOCAB)
            .flat_map(|seq| seq[(self.half - 1) * VOCAB..].to_vec())
            .collect::<Vec<f32>>();
        Ok(argmax_rows(&last))
    }
}

impl BlockingRun for Decoding {
    fn run(&mut self) -> Result<()> {
        if self.phase == Phase::Prefill {
            return self.prefill().map(|_| ());
        }
        // Positions T/2.. are overwritten by each run: the prompts' caches stay.
        let mut next = self.first.clone();
        for pos in self.half..2 * self.half {
            next = argmax_rows(&self.decoder.extend(&next, pos)?);
        }
        Ok(())
    }
    fn extras(&mut self) -> Result<Extras> {
        Ok(Extras {
            note: format!("{} sequences", self.decoder.batch()),
            ..Extras::default()
        })
    }
}

/// The host reference decoding one sequence.
struct HostDecoding {
    params: TransformerParams,
    prompt: Vec<u32>,
    half: usize,
}

impl BlockingRun for HostDecoding {
    fn run(&mut self) -> Result<()> {
        let mut text = self.prompt.clone();
        for _ in 0..self.half {
            let logits = reference::logits(&self.params, &text)?;
            let last = &logits[(text.len() - 1) * VOCAB..];
            text.extend(argmax_rows(last));
        }
        Ok(())
    }
}

/// `B` sequences' prompts: the first `T/2` bytes of `B` windows of the corpora.
fn prompts(o: &TransformerBenchOptions, batch: usize) -> Vec<u32> {
    let t = o.config.context;
    let data = Data::new(t, batch, 1, o.seed);
    let windows = data.get(0).map(|(w, _)| w.clone()).unwrap_or_default();
    windows
        .chunks_exact(t)
        .flat_map(|w| w[..t / 2].to_vec())
        .collect()
}

fn decoding(
    client: &Client,
    device: &MeshDevice,
    o: &TransformerBenchOptions,
    batch: usize,
    phase: Phase,
) -> Blocking<impl FnOnce() -> Result<Decoding> + use<>, Decoding> {
    let (client, device, cfg) = (client.clone(), device.clone(), o.config);
    let half = cfg.context / 2;
    let name = match phase {
        Phase::Prefill => format!("prefill B={batch}"),
        Phase::Decode => format!("decode B={batch}"),
    };
    let prompts = prompts(o, batch);
    let work = Work::new((batch * half) as f64, WorkUnit::Token);
    Blocking::new(name, work, move || {
        let params = TransformerParams::init(cfg)?;
        let mut d = Decoding {
            decoder: Decoder::new(&client, &device, &params, batch)?,
            prompts,
            phase,
            half,
            first: Vec::new(),
        };
        if phase == Phase::Decode {
            d.first = d.prefill()?;
        }
        Ok(d)
    })
}

/// The suite's cases on one adapter's first device.
pub fn plan(
    runtime: &Runtime,
    devices: &[Device],
    o: &TransformerBenchOptions,
) -> Result<Vec<Planned>> {
    o.config.validate()?;
    let mesh = devices.mesh_devices();
    let client = runtime.client("bench generate", 1);
    let half = o.config.context / 2;
    let host_name = "host reference decode B=1".to_string();
    let mut out = Vec::new();
    for batch in [1, o.batch] {
        for phase in [Phase::Prefill, Phase::Decode] {
            let case = decoding(&client, &mesh[0], o, batch, phase);
            out.push(Planned::Run(Box::new(if phase == Phase::Decode {
                case.compared_to(host_name.clone())
            } else {
                case
            })));
        }
    }
    let cfg = o.config;
    let prompt = prompts(o, 1);
    let host = Blocking::new(
        host_name,
        Work::new(half as f64, WorkUnit::Token),
        move || {
            let params = TransformerParams::init(cfg)?;
            Ok(HostDecoding {
                params: crate::transformer::generate::routed_for_generation(&params),
                prompt,
                half,
            })
        },
    );
    out.push(Planned::Run(Box::new(host)));
    Ok(out)
}
