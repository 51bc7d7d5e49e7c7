//! Byte embeddings of context windows and their gradient (`shaders/embedding.wgsl`): the
//! [`EmbedGather`] (with a second pair of ids and table, two tables' rows summed: a token's and
//! its position's) and [`EmbedGrad`] (with second ids, both tables' gradients in one launch)
//! kernel types (run them with [`crate::kernels::eager`] or as program nodes), and
//! `*_reference`s in plain Rust.

use crate::device::Recorder;
use crate::kernels::Shader;
use crate::kernels::check::{self, dims2, expect, invalid, to_u32};
use crate::kernels::{Kernel, Prepared, TensorType, sharding_rules};
use crate::named_sharding::NamedSharding;
use crate::{DType, Error, Result, Tensor};

/// `Params` of `embedding.wgsl`, field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    rows: u32,
    context: u32,
    cols: u32,
    vocab: u32,
    vocab2: u32,
    pad: [u32; 3],
}

impl Params {
    fn new(what: &'static str, [t, c, e, v]: [usize; 4]) -> Result<Self> {
        Ok(Self {
            rows: to_u32(what, t)?,
            context: to_u32(what, c)?,
            cols: to_u32(what, e)?,
            vocab: to_u32(what, v)?,
            vocab2: 0,
            pad: [0; 3],
        })
    }
}

pub const EMBEDDING: Shader = Shader {
    name: "embedding",
    source: include_str!("../../shaders/embedding.wgsl"),
    common: crate::kernels::FLAT_COMMON,
    ..crate::kernels::SHADER
};

/// Records `out[t, c·d_e + j] = table[contexts[t, c], j]`, plus `table2[contexts2[t, c], j]`
/// where a second pair is given (a token's and its position's embedding summed in one launch,
/// with the one f32 add a separate add would make). `contexts` u32 `[T, C]`, `table` `[V, d_e]`
/// (`table2` any rows, as wide), `out` `[T, C·d_e]`. Ids past a table read as zero rows (check
/// them on the host).
fn encode_embed_gather(
    encoder: &mut impl Recorder,
    contexts: &Tensor,
    table: &Tensor,
    plus: Option<(&Tensor, &Tensor)>,
    out: &Tensor,
) -> Result<()> {
    const WHAT: &str = "embed_gather";
    let device = table.device();
    let (t, c) = dims2(WHAT, contexts)?;
    let (v, e) = dims2(WHAT, table)?;
    expect(WHAT, contexts, device, DType::U32, &[t, c])?;
    expect(WHAT, table, device, DType::F32, &[v, e])?;
    expect(WHAT, out, device, DType::F32, &[t, c * e])?;
    let mut params = Params::new(WHAT, [t, c, e, v])?;
    let mut bindings = vec![
        (1, contexts.buffer()),
        (2, table.buffer()),
        (3, out.buffer()),
    ];
    let entry = match plus {
        Some((contexts2, table2)) => {
            let (v2, _) = dims2(WHAT, table2)?;
            expect(WHAT, contexts2, device, DType::U32, &[t, c])?;
            expect(WHAT, table2, device, DType::F32, &[v2, e])?;
            params.vocab2 = to_u32(WHAT, v2)?;
            bindings.extend([(6, contexts2.buffer()), (7, table2.buffer())]);
            "embed_gather_sum"
        }
        None => WHAT,
    };
    EMBEDDING.encode_threads(encoder, device, entry, &params, &bindings, t * c * e)
}

/// `EG_IDS` of `shaders/embedding.wgsl`: the ids one workgroup of the gradient sums.
const IDS_PER_WORKGROUP: usize = 8;

/// Records `d_table[v, j] = Σ_{(t,c): contexts[t,c] = v} d_x[t, c·d_e + j]` into `d_table`
/// (`[V, d_e]`, overwritten), and where a second pair `(contexts2, d_table2)` is given, the same
/// sum over `contexts2` into `d_table2` in the same launch (a token's and its position's
/// embeddings). Each output adds its positions in ascending order from zero, with one writer and
/// no float atomics; a workgroup lists a block of ids' positions once, so the positions are
/// scanned `V / 8` times, not `V` (the shader says how).
fn encode_embed_grad(
    encoder: &mut impl Recorder,
    contexts: &Tensor,
    d_x: &Tensor,
    d_table: &Tensor,
    second: Option<(&Tensor, &Tensor)>,
) -> Result<()> {
    const WHAT: &str = "embed_grad";
    let device = d_table.device();
    let (t, c) = dims2(WHAT, contexts)?;
    let (v, e) = dims2(WHAT, d_table)?;
    expect(WHAT, contexts, device, DType::U32, &[t, c])?;
    expect(WHAT, d_x, device, DType::F32, &[t, c * e])?;
    expect(WHAT, d_table, device, DType::F32, &[v, e])?;
    let mut params = Params::new(WHAT, [t, c, e, v])?;
    // Without a second table, its ids are the first's (read by no block) and its output the
    // device's unused buffer (written by no block).
    let unused;
    let (contexts2, d_table2, v2) = match second {
        Some((contexts2, d_table2)) => {
            let (v2, _) = dims2(WHAT, d_table2)?;
            expect(WHAT, contexts2, device, DType::U32, &[t, c])?;
            expect(WHAT, d_table2, device, DType::F32, &[v2, e])?;
            (contexts2.buffer(), d_table2.buffer(), v2)
        }
        None => {
            unused = device.unused_storage()?;
            (contexts.buffer(), &unused, 0)
        }
    };
    params.vocab2 = to_u32(WHAT, v2)?;
    let bindings = [
        (1, contexts.buffer()),
        (4, d_x.buffer()),
        (5, d_table.buffer()),
        (6, contexts2),
        (8, d_table2),
    ];
    // One workgroup per block of `IDS_PER_WORKGROUP` ids of either table (the shader says why):
    // `grid_1d` counts workgroups of `WORKGROUP` threads, so ask for that many threads per block.
    let blocks = v.div_ceil(IDS_PER_WORKGROUP) + v2.div_ceil(IDS_PER_WORKGROUP);
    EMBEDDING.encode_threads(
        encoder,
        device,
        WHAT,
        &params,
        &bindings,
        blocks * crate::kernels::WORKGROUP,
    )
}

pub(crate) fn check_ids(what: &'static str, ids: &[u32], bound: usize) -> Result<()> {
    match ids.iter().find(|&&i| i as usize >= bound) {
        Some(i) => Err(invalid(what, format!("id {i} is not below {bound}"))),
        None => Ok(()),
    }
}

/// Reference of [`EmbedGather`]: `contexts` flat `[T·C]`, `table` flat `[V, embed]`.
pub fn embed_gather_reference(contexts: &[u32], table: &[f32], embed: usize) -> Result<Vec<f32>> {
    if embed == 0 || !table.len().is_multiple_of(embed) {
        return Err(invalid(
            "embed_gather_reference",
            format!("table of {} values is not [V, {embed}]", table.len()),
        ));
    }
    check_ids("embed_gather_reference", contexts, table.len() / embed)?;
    Ok(contexts
        .iter()
        .flat_map(|&id| &table[id as usize * embed..(id as usize + 1) * embed])
        .copied()
        .collect())
}

/// Reference of [`EmbedGather`] with a second pair: the two gathers, added.
pub fn embed_gather_sum_reference(
    (contexts, table): (&[u32], &[f32]),
    (contexts2, table2): (&[u32], &[f32]),
    embed: usize,
) -> Result<Vec<f32>> {
    if contexts.len() != contexts2.len() {
        return Err(Error::ShapeMismatch {
            what: "embed_gather_sum_reference",
            expected: format!("{} ids in both", contexts.len()),
            got: format!("{}", contexts2.len()),
        });
    }
    let a = embed_gather_reference(contexts, table, embed)?;
    let b = embed_gather_reference(contexts2, table2, embed)?;
    Ok(a.iter().zip(&b).map(|(x, y)| x + y).collect())
}

/// Reference of [`EmbedGrad`]: `[vocab, embed]`.
pub fn embed_grad_reference(
    contexts: &[u32],
    d_x: &[f32],
    vocab: usize,
    embed: usize,
) -> Result<Vec<f32>> {
    check_ids("embed_grad_reference", contexts, vocab)?;
    if d_x.len() != contexts.len() * embed {
        return Err(Error::ShapeMismatch {
            what: "embed_grad_reference",
            expected: format!("{} values", contexts.len() * embed),
            got: format!("{} values", d_x.len()),
        });
    }
    let mut out = vec![0.0f32; vocab * embed];
    for (q, &id) in contexts.iter().enumerate() {
        let row = &mut out[id as usize * embed..(id as usize + 1) * embed];
        row.iter_mut()
            .zip(&d_x[q * embed..(q + 1) * embed])
            .for_each(|(o, &g)| *o += g);
    }
    Ok(out)
}

/// `(contexts u32 [T, C], table [V, E][, contexts2 u32 [T, C], table2 [V2, E]]) → [T, C·E]` as
/// a program node: with the second pair, the two gathers summed in one launch.
#[derive(Debug, Clone)]
pub struct EmbedGather;

impl Kernel for EmbedGather {
    fn kind(&self) -> &'static str {
        "embed_gather"
    }
    fn outputs(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        if inputs.len() != 4 {
            check::arity(self.kind(), inputs, 2)?;
        }
        let (t, c) = check::rows_cols(self.kind(), &inputs[0])?;
        let (_, e) = check::rows_cols(self.kind(), &inputs[1])?;
        Ok(vec![TensorType::f32(&[t, c * e])])
    }
    fn prepare(&self, x: &[Tensor], y: &[Tensor], rec: &mut Prepared) -> Result<()> {
        let plus = x.get(2).zip(x.get(3));
        encode_embed_gather(rec, &x[0], &x[1], plus, check::output(y, 0)?)
    }
}

/// `(contexts, d_x [T, C·E]) → [vocab, E]` as a program node; with `second: Some(vocab2)`,
/// `(contexts, d_x, contexts2) → ([vocab, E], [vocab2, E])`, both tables' gradients in one launch.
#[derive(Debug, Clone)]
pub struct EmbedGrad {
    pub vocab: usize,
    pub second: Option<usize>,
}

impl EmbedGrad {
    /// One table's gradient.
    pub fn one(vocab: usize) -> Self {
        Self {
            vocab,
            second: None,
        }
    }
}

impl Kernel for EmbedGrad {
    fn kind(&self) -> &'static str {
        "embed_grad"
    }
    fn outputs(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        check::arity(self.kind(), inputs, 2 + usize::from(self.second.is_some()))?;
        let (_, c) = check::rows_cols(self.kind(), &inputs[0])?;
        let (_, w) = check::rows_cols(self.kind(), &inputs[1])?;
        if c == 0 || !w.is_multiple_of(c) {
            return Err(check::invalid(
                self.kind(),
                format!("width {w} for context {c}"),
            ));
        }
        let vocabs = std::iter::once(self.vocab).chain(self.second);
        Ok(vocabs.map(|v| TensorType::f32(&[v, w / c])).collect())
    }
    fn shardings(&self, inputs: &[NamedSharding], outputs: &[TensorType]) -> sharding_rules::Rule {
        sharding_rules::embed_grad(inputs, outputs)
    }
    fn prepare(&self, x: &[Tensor], y: &[Tensor], rec: &mut Prepared) -> Result<()> {
        let second = match self.second {
            Some(_) => Some((&x[2], check::output(y, 1)?)),
            None => None,
        };
        encode_embed_grad(rec, &x[0], &x[1], check::output(y, 0)?, second)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The launcher's block of ids is the shader's: with a smaller one in the shader, the last
    /// ids would go unsummed; with a larger one, workgroups would be launched for nothing.
    #[test]
    fn the_launcher_and_the_shader_agree_on_the_id_block() {
        let line = format!("const EG_IDS: u32 = {IDS_PER_WORKGROUP}u;");
        assert!(
            EMBEDDING.source.contains(&line),
            "embedding.wgsl lacks `{line}`"
        );
    }
}
