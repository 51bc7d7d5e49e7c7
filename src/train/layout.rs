//! How a model's parameters and statistics lie on a gang: uploading parameters and Adam's
//! moments (expert tensors cut by device: [`ShardLayout`]), reading them and gradients back
//! ([`gather_read`], [`unpack_grads`]), and the sums of a step's statistics packs
//! ([`StatsLayout`]).

use super::ExpertRouting;
use super::GroupSplit;
use super::step_program::{m_var, param_var, v_var};
use crate::device::MeshDevice;
use crate::kernels::router::{ExpertStat, RouterLoss, STAT_WORDS, load_balancing_loss};
use crate::program::Variables;
use crate::sched::Client;
use crate::{DType, Error, Result, Tensor};

fn invalid(what: &'static str, reason: String) -> Error {
    Error::InvalidArgument { what, reason }
}

/// Loss and routing sums of a step's rounds.
#[derive(Default)]
pub(crate) struct RoundSums {
    pub ce_sum: f64,
    pub aux_sum: f64,
    pub z_sum: f64,
    /// `[block][expert]` kept pairs.
    pub kept: Vec<Vec<usize>>,
    /// `[block]` dropped pairs.
    pub dropped: Vec<usize>,
    /// `[block]` aux and z sums over groups.
    pub block_aux: Vec<f64>,
    pub block_z: Vec<f64>,
}

/// What a step program's statistics pack holds per round and device: `rows` row losses, then per
/// expert layer the router's expert statistics and, with `logsumexps` (a training step's pack,
/// not a forward pass's), the row logsumexps of its logits.
pub(crate) struct StatsLayout {
    pub rows: usize,
    /// The model's expert layers and their router; `None`: a dense model, rows only.
    pub routing: Option<ExpertRouting>,
    pub logsumexps: bool,
}

impl StatsLayout {
    /// Words of one pack.
    pub fn words(&self) -> usize {
        self.rows
            + self.routing.map_or(0, |r| {
                r.layers * (r.router.experts * STAT_WORDS + self.lse_words())
            })
    }

    fn lse_words(&self) -> usize {
        if self.logsumexps { self.rows } else { 0 }
    }

    /// The sums over every round's packs (each a device's pack after another), but for the packs
    /// of devices `split` leaves idle in a round.
    pub fn sums(&self, results: &[Vec<u8>], split: &GroupSplit) -> Result<RoundSums> {
        self.sums_with(results, split, |_, _| {})
    }

    /// [`Self::sums`], handing each routing group's row losses to `rows` on the way:
    /// `(group, losses)`.
    pub fn sums_with(
        &self,
        results: &[Vec<u8>],
        split: &GroupSplit,
        mut rows_of: impl FnMut(usize, &[f32]),
    ) -> Result<RoundSums> {
        let (layers, experts, k, loss) = match self.routing {
            Some(r) => (r.layers, r.router.experts, r.router.k, r.loss),
            None => (
                0,
                0,
                0,
                RouterLoss {
                    alpha: 0.0,
                    z_loss: 0.0,
                },
            ),
        };
        let tg = self.rows;
        let mut sums = RoundSums {
            kept: vec![vec![0; experts]; layers],
            dropped: vec![0; layers],
            block_aux: vec![0.0; layers],
            block_z: vec![0.0; layers],
            ..RoundSums::default()
        };
        let short = || invalid("trainer", "a statistics pack is short".into());
        for (r, round) in results.iter().enumerate() {
            for (i, device) in round.chunks(self.words() * 4).enumerate() {
                let Some(group) = split.group(i, r) else {
                    continue;
                };
                let f32s = |at: usize, n: usize| -> Result<Vec<f32>> {
                    let b = device.get(at * 4..(at + n) * 4).ok_or_else(short)?;
                    Ok(bytemuck::pod_collect_to_vec(b))
                };
                let rows = f32s(0, tg)?;
                sums.ce_sum += rows.iter().map(|&v| f64::from(v)).sum::<f64>();
                rows_of(group, &rows);
                let mut at = tg;
                for l in 0..layers {
                    let n = experts * STAT_WORDS;
                    let b = device.get(at * 4..(at + n) * 4).ok_or_else(short)?;
                    let stats: Vec<ExpertStat> = bytemuck::pod_collect_to_vec(b);
                    let lse = f32s(at + n, self.lse_words())?;
                    at += n + self.lse_words();
                    let kept: usize = stats.iter().map(|s| s.kept as usize).sum();
                    for (acc, s) in sums.kept[l].iter_mut().zip(&stats) {
                        *acc += s.kept as usize;
                    }
                    sums.dropped[l] += (tg * k).saturating_sub(kept);
                    let aux = f64::from(load_balancing_loss(&stats, loss.alpha));
                    let z = f64::from(loss.z_loss)
                        * lse.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>()
                        / tg as f64;
                    sums.aux_sum += aux;
                    sums.z_sum += z;
                    sums.block_aux[l] += f64::from(aux as f32);
                    sums.block_z[l] += f64::from(z as f32);
                }
            }
        }
        Ok(sums)
    }
}

/// Errors unless `devices` are some, all `client`'s, and split `groups` evenly.
pub(crate) fn check_gang(
    what: &'static str,
    client: &Client,
    devices: &[MeshDevice],
    groups: usize,
) -> Result<()> {
    let n = devices.len();
    if n == 0 {
        return Err(invalid(what, "no devices".into()));
    }
    if let Some(d) = devices.iter().find(|d| !client.mesh().contains(d)) {
        return Err(invalid(
            what,
            format!("device {} is not in the client's runtime", d.label()),
        ));
    }
    if groups == 0 || !groups.is_multiple_of(n) {
        return Err(invalid(
            what,
            format!("{groups} routing groups cannot be split evenly over {n} devices"),
        ));
    }
    Ok(())
}

/// Adam's first and second moments, one vector per parameter.
pub(crate) type Moments<'a> = (&'a [Vec<f32>], &'a [Vec<f32>]);

/// How a model's parameters lie on a gang: per-device shapes, and which tensors are split by their
/// first axis (experts) rather than replicated. Shared by every trainer of the step programs.
pub(crate) struct ShardLayout<'a> {
    pub devices: &'a [MeshDevice],
    /// Devices along the expert axis: device `i` holds expert shard `i mod expert_devices` (all
    /// of them, with one axis).
    pub expert_devices: usize,
    pub shapes: &'a [Vec<usize>],
    pub expert: &'a [bool],
    pub names: &'a [String],
}

impl ShardLayout<'_> {
    /// This process's shards of `values` (other ranks upload theirs): replicated tensors whole on
    /// every device, expert tensors cut by their first axis in device order; `None`: zeros.
    fn shards(&self, p: usize, values: Option<&[f32]>) -> Result<Vec<Option<Tensor>>> {
        let shape = &self.shapes[p];
        let per_device: usize = shape.iter().product();
        self.devices
            .iter()
            .enumerate()
            .map(|(i, device)| {
                let Some(device) = device.local() else {
                    return Ok(None);
                };
                let Some(values) = values else {
                    return Tensor::zeros(device, shape, DType::F32).map(Some);
                };
                let shard = i % self.expert_devices.max(1);
                let start = if self.expert[p] {
                    shard * per_device
                } else {
                    0
                };
                let part = values.get(start..start + per_device).ok_or_else(|| {
                    invalid(
                        "trainer upload",
                        format!("{} is shorter than its shape", self.names[p]),
                    )
                })?;
                Tensor::from_f32(device, shape, DType::F32, part).map(Some)
            })
            .collect()
    }

    /// The step programs' variables: every parameter, and Adam's two moments (`moments`, or
    /// zeros).
    pub fn variables(&self, params: &[Vec<f32>], moments: Option<Moments>) -> Result<Variables> {
        let mut variables = self.param_variables(params)?;
        for p in 0..self.shapes.len() {
            let (m, v) = match moments {
                Some((m, v)) => (m.get(p), v.get(p)),
                None => (None, None),
            };
            let (m, v) = (m.map(Vec::as_slice), v.map(Vec::as_slice));
            if moments.is_some() && (m.is_none() || v.is_none()) {
                return Err(invalid(
                    "trainer upload",
                    format!("the moments lack {}", self.names[p]),
                ));
            }
            variables.insert_shards(m_var(p), self.shards(p, m)?);
            variables.insert_shards(v_var(p), self.shards(p, v)?);
        }
        Ok(variables)
    }

    /// Every parameter's variable, and nothing else: what forward-only programs (a decoder's)
    /// bind.
    pub fn param_variables(&self, params: &[Vec<f32>]) -> Result<Variables> {
        let mut variables = Variables::new();
        for p in 0..self.shapes.len() {
            let values = params.get(p).map(Vec::as_slice).unwrap_or_default();
            variables.insert_shards(param_var(p), self.shards(p, Some(values))?);
        }
        Ok(variables)
    }
}

/// A gradient program's one result (every device's pack of its per-device gradients, one after
/// another) as whole tensors: replicated ones from device 0, expert ones gathered from the first
/// `expert_devices` devices (one of each expert shard) in order.
pub(crate) fn unpack_grads(
    results: &[Vec<u8>],
    shapes: &[Vec<usize>],
    expert: &[bool],
    expert_devices: usize,
) -> Result<Vec<Vec<f32>>> {
    let words: Vec<f32> = bytemuck::pod_collect_to_vec(results.first().map_or(&[][..], |v| v));
    let per_device: usize = shapes.iter().map(|s| s.iter().product::<usize>()).sum();
    let mut tensors = vec![Vec::new(); shapes.len()];
    for d in 0..expert_devices {
        let mut at = d * per_device;
        for (p, s) in shapes.iter().enumerate() {
            let len: usize = s.iter().product();
            let part = words
                .get(at..at + len)
                .ok_or_else(|| invalid("trainer", "the gradient pack is short".into()))?;
            if d == 0 || expert[p] {
                tensors[p].extend_from_slice(part);
            }
            at += len;
        }
    }
    Ok(tensors)
}

/// A read program's results as whole tensors (every device's shard comes one after another):
/// replicated ones from device 0, expert ones from the first `expert_devices` devices, which
/// hold one of each expert shard in order.
pub(crate) fn gather_read(
    results: Vec<Vec<f32>>,
    expert: &[bool],
    devices: usize,
    expert_devices: usize,
) -> Vec<Vec<f32>> {
    results
        .into_iter()
        .enumerate()
        .map(|(p, mut all)| {
            let shard = all.len() / devices.max(1);
            let keep = if expert.get(p).copied().unwrap_or(false) {
                shard * expert_devices
            } else {
                shard
            };
            all.truncate(keep);
            all
        })
        .collect()
}
