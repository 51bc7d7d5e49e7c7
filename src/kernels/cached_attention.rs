//! Causal attention against a key/value cache (`shaders/cached_attention.wgsl`), what a decoder
//! generating text runs: [`CachedAttention`] takes `P` new rows of `B` sequences (a prompt's
//! prefill, or one row a sequence per decode step), stores their keys and values in the cache at
//! their positions, and attends each query to its sequence's positions up to its own. One
//! launch does both, so a decode step's attention is one kernel a layer.
//!
//! Values are `[B·P, H·Dh]` rows as a projection gives them (head `h`: columns `h·Dh..`), the
//! cache `[B·T, H·Dh]` (sequence `b`'s position `t` at row `b·T + t`), positions u32 `[B·P, 1]`:
//! each sequence's new rows are consecutive positions below `T`, and every position before its
//! first must already be in the cache. f32 only; head dimensions up to
//! [`super::attention::MAX_HEAD_DIM`]. The plain-Rust reference ([`cached_attention_reference`])
//! is computed in f64.

use super::attention::MAX_HEAD_DIM;
use super::check::{self, expect, invalid, to_u32};
use super::{Kernel, Prepared, TensorType};
use crate::device::Recorder;
use crate::kernels::Shader;
use crate::{DType, Result, Tensor};

pub const CACHED_ATTENTION: Shader = Shader {
    name: "cached_attention",
    source: include_str!("../../shaders/cached_attention.wgsl"),
    common: crate::kernels::FLAT_COMMON,
    ..crate::kernels::SHADER
};

/// `Params` of `cached_attention.wgsl`, field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    batch: u32,
    rows: u32,
    capacity: u32,
    heads: u32,
    head_dim: u32,
    pad: [u32; 2],
    scale: f32,
}

/// The sizes of one call: `B` sequences of `P` new rows, a cache of `T` rows a sequence, `H`
/// heads of `Dh`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheShape {
    pub batch: usize,
    pub rows: usize,
    pub capacity: usize,
    pub heads: usize,
    pub head_dim: usize,
}

impl CacheShape {
    /// The shape of `q` (`[B·P, H·Dh]`) against a cache of `cache` (`[B·T, H·Dh]`) with
    /// `capacity` = `T`, or why it is not one.
    fn of(
        what: &'static str,
        q: &TensorType,
        cache: &TensorType,
        kernel: &CachedAttention,
    ) -> Result<Self> {
        let (n, width) = check::rows_cols(what, q)?;
        let (cached, cache_width) = check::rows_cols(what, cache)?;
        let (t, heads) = (kernel.capacity, kernel.heads);
        if heads == 0 || width % heads != 0 || cache_width != width {
            return Err(invalid(
                what,
                format!("width {width} (cache {cache_width}) is not {heads} heads wide alike"),
            ));
        }
        let head_dim = width / heads;
        if head_dim == 0 || head_dim > MAX_HEAD_DIM {
            return Err(invalid(
                what,
                format!("head dimension {head_dim} is outside 1..={MAX_HEAD_DIM}"),
            ));
        }
        if t == 0 || cached == 0 || !cached.is_multiple_of(t) {
            return Err(invalid(
                what,
                format!("a cache of {cached} rows is not whole sequences of {t}"),
            ));
        }
        let batch = cached / t;
        if n == 0 || !n.is_multiple_of(batch) || n / batch > t {
            return Err(invalid(
                what,
                format!("{n} new rows are not 1..={t} rows for each of {batch} sequences"),
            ));
        }
        Ok(Self {
            batch,
            rows: n / batch,
            capacity: t,
            heads,
            head_dim,
        })
    }
}

/// `(q, k, v [B·P, H·Dh], positions u32 [B·P, 1], k_cache, v_cache [B·T, H·Dh]) → (out [B·P,
/// H·Dh], k_cache, v_cache)`, the caches updated in place (see the module). Scores are `scale ·
/// q·k`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CachedAttention {
    pub heads: usize,
    pub scale: f32,
    /// `T`: cache rows a sequence.
    pub capacity: usize,
}

impl Kernel for CachedAttention {
    fn kind(&self) -> &'static str {
        "cached_attention"
    }
    fn outputs(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        let what = self.kind();
        check::arity(what, inputs, 6)?;
        let s = CacheShape::of(what, &inputs[0], &inputs[4], self)?;
        let rows = TensorType::f32(&[s.batch * s.rows, s.heads * s.head_dim]);
        let cache = TensorType::f32(&[s.batch * s.capacity, s.heads * s.head_dim]);
        for (i, want) in [(0, &rows), (1, &rows), (2, &rows), (4, &cache), (5, &cache)] {
            check::expect_type(what, &inputs[i], want)?;
        }
        check::expect_type(what, &inputs[3], &TensorType::u32(&[s.batch * s.rows, 1]))?;
        Ok(vec![rows, cache.clone(), cache])
    }
    fn in_place(&self) -> Vec<(usize, usize)> {
        vec![(1, 4), (2, 5)]
    }
    fn prepare(&self, x: &[Tensor], y: &[Tensor], rec: &mut Prepared) -> Result<()> {
        encode_cached_attention(rec, x, check::output(y, 0)?, self)
    }
}

/// Records the kernel: `x` the six inputs, `out` caller-allocated.
fn encode_cached_attention(
    encoder: &mut impl Recorder,
    x: &[Tensor],
    out: &Tensor,
    kernel: &CachedAttention,
) -> Result<()> {
    const WHAT: &str = "cached_attention";
    let [q, k, v, positions, k_cache, v_cache] = x else {
        return Err(invalid(WHAT, format!("takes 6 inputs, got {}", x.len())));
    };
    if !kernel.scale.is_finite() {
        return Err(invalid(
            WHAT,
            format!("scale must be finite, got {}", kernel.scale),
        ));
    }
    let ty = |t: &Tensor| TensorType::new(t.dtype(), t.shape());
    let s = CacheShape::of(WHAT, &ty(q), &ty(k_cache), kernel)?;
    let device = q.device();
    let rows = [s.batch * s.rows, s.heads * s.head_dim];
    let cache = [s.batch * s.capacity, s.heads * s.head_dim];
    for t in [q, k, v, out] {
        expect(WHAT, t, device, DType::F32, &rows)?;
    }
    for t in [k_cache, v_cache] {
        expect(WHAT, t, device, DType::F32, &cache)?;
    }
    expect(WHAT, positions, device, DType::U32, &[rows[0], 1])?;
    let params = Params {
        batch: to_u32(WHAT, s.batch)?,
        rows: to_u32(WHAT, s.rows)?,
        capacity: to_u32(WHAT, s.capacity)?,
        heads: to_u32(WHAT, s.heads)?,
        head_dim: to_u32(WHAT, s.head_dim)?,
        pad: [0; 2],
        scale: kernel.scale,
    };
    let bindings = [
        (1, q.buffer()),
        (2, k.buffer()),
        (3, v.buffer()),
        (4, positions.buffer()),
        (5, k_cache.buffer()),
        (6, v_cache.buffer()),
        (7, out.buffer()),
    ];
    CACHED_ATTENTION.encode_threads(
        encoder,
        device,
        WHAT,
        &params,
        &bindings,
        s.batch * s.rows * s.heads,
    )
}

/// Checks that each sequence's positions (`[B·P]`) are consecutive and below `capacity`: what
/// the kernel relies on (a shader cannot report an error).
pub fn check_positions(positions: &[u32], batch: usize, capacity: usize) -> Result<()> {
    const WHAT: &str = "cached attention positions";
    if batch == 0 || !positions.len().is_multiple_of(batch) {
        return Err(invalid(
            WHAT,
            format!("{} positions for {batch} sequences", positions.len()),
        ));
    }
    for seq in positions.chunks(positions.len() / batch) {
        let first = seq[0] as usize;
        let consecutive = seq
            .iter()
            .enumerate()
            .all(|(r, &p)| p as usize == first + r);
        if !consecutive || first + seq.len() > capacity {
            return Err(invalid(
                WHAT,
                format!("{seq:?} are not consecutive positions below {capacity}"),
            ));
        }
    }
    Ok(())
}

/// [`CachedAttention`] in f64 (outputs rounded to f32): `(out, k_cache, v_cache)` for inputs as
/// the kernel takes them, flat.
pub fn cached_attention_reference(
    (q, k, v): (&[f32], &[f32], &[f32]),
    positions: &[u32],
    (k_cache, v_cache): (&[f32], &[f32]),
    s: &CacheShape,
    scale: f32,
) -> Result<[Vec<f32>; 3]> {
    let width = s.heads * s.head_dim;
    let n = s.batch * s.rows;
    if [q.len(), k.len(), v.len()] != [n * width; 3]
        || [k_cache.len(), v_cache.len()] != [s.batch * s.capacity * width; 2]
    {
        return Err(invalid(
            "cached_attention_reference",
            format!("inputs do not have shape {s:?}"),
        ));
    }
    check_positions(positions, s.batch, s.capacity)?;
    let (mut kc, mut vc) = (k_cache.to_vec(), v_cache.to_vec());
    for (row, &pos) in positions.iter().enumerate() {
        let (b, pos) = (row / s.rows, pos as usize);
        let (at, slot) = (row * width, (b * s.capacity + pos) * width);
        kc[slot..slot + width].copy_from_slice(&k[at..at + width]);
        vc[slot..slot + width].copy_from_slice(&v[at..at + width]);
    }
    let mut out = vec![0.0f32; n * width];
    for row in 0..n {
        let (b, pos) = (row / s.rows, positions[row] as usize);
        for h in 0..s.heads {
            let col = h * s.head_dim;
            let key = |t: usize| (b * s.capacity + t) * width + col;
            let qh = &q[row * width + col..][..s.head_dim];
            let scores: Vec<f64> = (0..=pos)
                .map(|t| {
                    let kt = &kc[key(t)..][..s.head_dim];
                    let dot: f64 = qh
                        .iter()
                        .zip(kt)
                        .map(|(&a, &c)| f64::from(a) * f64::from(c))
                        .sum();
                    dot * f64::from(scale)
                })
                .collect();
            let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
            let total: f64 = w.iter().sum();
            for j in 0..s.head_dim {
                let o: f64 = (0..=pos).map(|t| w[t] * f64::from(vc[key(t) + j])).sum();
                out[row * width + col + j] = (o / total) as f32;
            }
        }
    }
    Ok([out, kc, vc])
}
