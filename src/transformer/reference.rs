//! A plain-Rust reference of the Transformer's forward ([`super`] documents the model), built
//! from the kernels' own references (each accumulates in f64 and rounds its output to f32, as
//! the kernels store it), so the GPU step must match it to f32 rounding. The gradients are
//! checked against central differences of its loss (`tests`).

use super::params::{POS_EMB, TOK_EMB};
use super::{FfnIndex, TransformerParams, VOCAB};
use crate::kernels::attention::{AttentionShape, attention_reference, default_scale};
use crate::kernels::elementwise::{self, ElementwiseOp};
use crate::kernels::layer_norm::layer_norm_reference;
use crate::kernels::loss::{cross_entropy_reference, row_logsumexp_reference};
use crate::kernels::matmul::{self, MatmulShape};
use crate::kernels::router::{self, load_balancing_loss};
use crate::{DType, Error, Result};

/// What the forward gives.
#[derive(Debug, Clone, PartialEq)]
pub struct ReferenceForward {
    /// Cross-entropy (nats) of every token, batch order.
    pub token_nats: Vec<f64>,
    /// Mean cross-entropy.
    pub ce: f64,
    /// Load-balancing and z losses: summed over expert layers, averaged over groups.
    pub aux: f64,
    pub z: f64,
    /// `ce + aux + z`.
    pub loss: f64,
    /// Per expert layer: kept (token, choice) pairs per expert, and dropped choices, summed over
    /// groups.
    pub kept: Vec<Vec<usize>>,
    pub dropped: Vec<usize>,
}

/// `a [m, k] · b [k, n]` (`b` transposed, `[n, k]`, with `trans_b`).
fn mm(a: &[f32], b: &[f32], m: usize, n: usize, k: usize, trans_b: bool) -> Vec<f32> {
    let shape = MatmulShape {
        trans_b,
        ..MatmulShape::plain(m, n, k, DType::F32)
    };
    matmul::reference(a, b, &[0, m as u32], &shape)
}

fn add(x: &[f32], z: &[f32]) -> Vec<f32> {
    x.iter().zip(z).map(|(a, b)| a + b).collect()
}

fn gelu(x: &[f32]) -> Vec<f32> {
    elementwise::reference(ElementwiseOp::Gelu, x, None)
}

/// Checks a batch of `tokens`/`targets` (`[B, T]` byte ids) routed in `groups`; returns `B`.
pub fn check_batch(
    config: &super::TransformerConfig,
    tokens: &[u32],
    targets: &[u32],
    groups: usize,
) -> Result<usize> {
    const WHAT: &str = "transformer batch";
    let t = config.context;
    if tokens.is_empty() || !tokens.len().is_multiple_of(t) || targets.len() != tokens.len() {
        return Err(Error::ShapeMismatch {
            what: WHAT,
            expected: format!("B ≥ 1 sequences of {t} byte ids and as many targets"),
            got: format!("{} ids, {} targets", tokens.len(), targets.len()),
        });
    }
    if let Some(bad) = tokens.iter().chain(targets).find(|&&v| v as usize >= VOCAB) {
        return Err(Error::InvalidArgument {
            what: WHAT,
            reason: format!("byte id {bad} is not below {VOCAB}"),
        });
    }
    let batch = tokens.len() / t;
    if groups == 0 || !batch.is_multiple_of(groups) {
        return Err(Error::InvalidArgument {
            what: WHAT,
            reason: format!("{batch} sequences cannot be split into {groups} routing groups"),
        });
    }
    Ok(batch)
}

/// Routing sums over groups, per expert layer.
#[derive(Debug)]
struct GroupStats {
    kept: Vec<Vec<usize>>,
    dropped: Vec<usize>,
    aux: f64,
    z: f64,
}

impl GroupStats {
    fn new(cfg: &super::TransformerConfig) -> Self {
        Self {
            kept: vec![vec![0; cfg.experts]; cfg.moe_layers()],
            dropped: vec![0; cfg.moe_layers()],
            aux: 0.0,
            z: 0.0,
        }
    }
}

/// The logits `[n, V]` of one routing group: `ids` holds whole sequences of `seq` bytes
/// (`seq ≤ T`; positions count from 0 in each).
fn group_logits(
    params: &TransformerParams,
    ids: &[u32],
    seq: usize,
    stats: &mut GroupStats,
) -> Result<Vec<f32>> {
    let cfg = params.config;
    let (d, ff, e) = (cfg.model, cfg.hidden, cfg.experts);
    let n = ids.len();
    let w = |i: usize| -> &[f32] { &params.tensors[i] };
    let shape = AttentionShape {
        batch: n / seq,
        seq,
        heads: cfg.heads,
        head_dim: cfg.head_dim(),
    };
    let scale = default_scale(cfg.head_dim());
    let mut h: Vec<f32> = Vec::with_capacity(n * d);
    for (i, &id) in ids.iter().enumerate() {
        let (tok, pos) = (id as usize * d, (i % seq) * d);
        h.extend((0..d).map(|c| w(TOK_EMB)[tok + c] + w(POS_EMB)[pos + c]));
    }
    let mut moe_l = 0;
    for l in 0..cfg.layers {
        let ix = cfg.layer_index(l);
        let (a, _) = layer_norm_reference(&h, w(ix.ln1[0]), w(ix.ln1[1]), cfg.eps)?;
        let q = mm(&a, w(ix.wq), n, d, d, false);
        let k = mm(&a, w(ix.wk), n, d, d, false);
        let v = mm(&a, w(ix.wv), n, d, d, false);
        let (o, _) = attention_reference(&shape, &q, &k, &v, true, scale)?;
        h = add(&h, &mm(&o, w(ix.wo), n, d, d, false));
        let (f, _) = layer_norm_reference(&h, w(ix.ln2[0]), w(ix.ln2[1]), cfg.eps)?;
        let y = match ix.ffn {
            FfnIndex::Dense { w1, w2 } => {
                let hidden = gelu(&mm(&f, w(w1), n, ff, d, false));
                mm(&hidden, w(w2), n, d, ff, false)
            }
            FfnIndex::Moe { router, w1, w2 } => {
                let logits = mm(&f, w(router), n, e, d, false);
                let routing = router::reference(&logits, n, cfg.router())?;
                let mut y = vec![0f32; n * d];
                for (i, row) in y.chunks_exact_mut(d).enumerate() {
                    for r in &routing.routes[i * cfg.top_k..(i + 1) * cfg.top_k] {
                        if r.kept == 0 {
                            continue;
                        }
                        let x = r.expert as usize;
                        let token = &f[i * d..(i + 1) * d];
                        let fe = cfg.expert_width();
                        let w1 = &w(w1)[x * d * fe..(x + 1) * d * fe];
                        let w2 = &w(w2)[x * fe * d..(x + 1) * fe * d];
                        let o = mm(&gelu(&mm(token, w1, 1, fe, d, false)), w2, 1, d, fe, false);
                        for (acc, v) in row.iter_mut().zip(o) {
                            *acc += r.gate * v;
                        }
                    }
                }
                for (acc, s) in stats.kept[moe_l].iter_mut().zip(&routing.stats) {
                    *acc += s.kept as usize;
                }
                stats.dropped[moe_l] += routing.dropped();
                stats.aux += f64::from(load_balancing_loss(&routing.stats, cfg.aux_alpha));
                let lse = row_logsumexp_reference(&logits, e);
                stats.z += f64::from(cfg.z_loss)
                    * lse.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>()
                    / n as f64;
                moe_l += 1;
                y
            }
        };
        h = add(&h, &y);
    }
    let [gf, bf] = cfg.final_norm_index();
    let (z, _) = layer_norm_reference(&h, w(gf), w(bf), cfg.eps)?;
    Ok(mm(&z, w(cfg.head_index()), n, VOCAB, d, cfg.tied))
}

/// The logits `[len, V]` of one sequence of `1..=T` byte ids, routed as one group: what
/// `gangway generate` samples from.
pub fn logits(params: &TransformerParams, ids: &[u32]) -> Result<Vec<f32>> {
    params.check()?;
    let t = params.config.context;
    if ids.is_empty() || ids.len() > t {
        return Err(Error::ShapeMismatch {
            what: "transformer logits",
            expected: format!("1 to {t} byte ids"),
            got: format!("{}", ids.len()),
        });
    }
    if let Some(bad) = ids.iter().find(|&&v| v as usize >= VOCAB) {
        return Err(Error::InvalidArgument {
            what: "transformer logits",
            reason: format!("byte id {bad} is not below {VOCAB}"),
        });
    }
    group_logits(params, ids, ids.len(), &mut GroupStats::new(&params.config))
}

/// The forward of a batch (`tokens`, `targets`: `[B, T]` byte ids) routed in `groups` groups of
/// `B / groups` sequences.
pub fn forward(
    params: &TransformerParams,
    tokens: &[u32],
    targets: &[u32],
    groups: usize,
) -> Result<ReferenceForward> {
    params.check()?;
    let cfg = params.config;
    let batch = check_batch(&cfg, tokens, targets, groups)?;
    let n = batch / groups * cfg.context;
    let mut stats = GroupStats::new(&cfg);
    let mut token_nats = Vec::with_capacity(tokens.len());
    for g in 0..groups {
        let logits = group_logits(params, &tokens[g * n..(g + 1) * n], cfg.context, &mut stats)?;
        let (nats, _) = cross_entropy_reference(&logits, &targets[g * n..(g + 1) * n], VOCAB)?;
        token_nats.extend(nats.iter().map(|&v| f64::from(v)));
    }
    let g = groups as f64;
    let ce = token_nats.iter().sum::<f64>() / tokens.len() as f64;
    let (aux, z) = (stats.aux / g, stats.z / g);
    Ok(ReferenceForward {
        token_nats,
        ce,
        aux,
        z,
        loss: ce + aux + z,
        kept: stats.kept,
        dropped: stats.dropped,
    })
}
