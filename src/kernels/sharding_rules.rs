//! How each kernel's outputs lie over a gang given its inputs' layouts ([`NamedSharding`]): the
//! rules a program builder checks a graph with, so a value's layout is derived, never guessed.
//! Every kernel runs shard by shard; a rule says what that local computation means globally, and
//! refuses layouts for which it would compute something else (a nonlinear kernel over partial
//! sums, factors split differently along a contracted dimension).

use super::tensor_type::TensorType;
use crate::named_sharding::NamedSharding;

pub type Rule = std::result::Result<Vec<NamedSharding>, String>;

/// Kernels that work row by row (routing, dispatch, losses, activations' backwards, permutes,
/// per-group expert gradients): the inputs split rows alike or hold copies, and every output's
/// rows are split as theirs. Nonlinear, so no partial sums.
pub fn rows(inputs: &[NamedSharding], outputs: &[TensorType]) -> Rule {
    let first = inputs.first().ok_or("no inputs")?;
    let mut split: Option<&NamedSharding> = None;
    for s in inputs {
        if !s.partial().is_empty() {
            return Err(format!(
                "a nonlinear kernel over partial sums ({s}); all-reduce them first"
            ));
        }
        if !s.splits_only_rows() {
            return Err(format!("works row by row, but an input is {s}"));
        }
        if s.row_axes().is_empty() {
            continue;
        }
        match split {
            Some(r) if r.row_axes() != s.row_axes() => {
                return Err(format!("inputs split rows differently: {r} and {s}"));
            }
            _ => split = Some(s),
        }
    }
    let base = split.unwrap_or(first);
    Ok(outputs
        .iter()
        .map(|t| base.with_rows_of(t.shape.len()))
        .collect())
}

/// `op(a) · op(b)`: rows from `a`, columns from `b`, partial sums over the axes that split the
/// contracted dimension (a weight gradient `xᵀ · dy` over row-split tokens is partial over the
/// token axis). Grouped (`b` of `[groups, k, n]`): `b`'s groups are split like `a`'s rows, or along
/// some of the axes splitting them with `b` replicated along the rest, or not at all, since each
/// row group meets its own `b`. Linear in each factor, so one of them may be a
/// partial sum.
pub fn matmul(inputs: &[NamedSharding], trans_a: bool, trans_b: bool) -> Rule {
    let [a, b] = inputs else {
        return Err(format!("{} inputs, a matmul takes 2", inputs.len()));
    };
    if !a.partial().is_empty() && !b.partial().is_empty() {
        return Err(format!(
            "both factors are partial sums ({a} · {b}); all-reduce one first"
        ));
    }
    let (ad, bd) = (a.dims(), b.dims());
    let (m, ka) = match (ad, trans_a) {
        ([r, c], false) => (r, c),
        ([r, c], true) => (c, r),
        _ => return Err(format!("a is laid out as {a}")),
    };
    let (kb, n) = match (bd, trans_b) {
        ([r, c], false) | ([_, r, c], false) => (r, c),
        ([r, c], true) | ([_, r, c], true) => (c, r),
        _ => return Err(format!("b is laid out as {b}")),
    };
    if ka != kb {
        return Err(format!(
            "the contracted dimension is split differently: {a} · {b}"
        ));
    }
    if let [groups, _, _] = bd
        && !groups.is_empty()
        && !groups_follow_rows(groups, m, b)
    {
        return Err(format!("b's groups are split unlike a's rows: {a} · {b}"));
    }
    // The output is new: an axis used twice (say rows and partial sums) is an error there.
    let partial: Vec<&str> = ka
        .iter()
        .chain(a.partial())
        .chain(b.partial())
        .map(String::as_str)
        .collect();
    let out = NamedSharding::new(a.mesh(), &[&strs(m), &strs(n)], &partial)
        .map_err(|e| format!("{a} · {b}: {e}"))?;
    Ok(vec![out])
}

/// Whether `b`'s groups, split over `groups`, meet their own rows of `a` (split over `rows`): the
/// group axes split the rows in the same order, and any other axis splitting the rows is one
/// over which `b` is replicated (the data axis of a `{data, expert}` mesh: every data row holds
/// every expert once).
fn groups_follow_rows(groups: &[String], rows: &[String], b: &NamedSharding) -> bool {
    let ordered = rows
        .iter()
        .filter(|ax| groups.contains(ax))
        .eq(groups.iter());
    let used_by_b =
        |ax: &String| b.dims().iter().flatten().any(|x| x == ax) || b.partial().contains(ax);
    ordered
        && rows
            .iter()
            .filter(|ax| !groups.contains(ax))
            .all(|ax| !used_by_b(ax))
}

/// A grouped weight gradient (`aᵀ·b` per row group, `[G, I, N]`) over rows split along `axis` and
/// others: the groups split along `axis` (each device holds its experts), partial over the
/// other axes that split the rows (each data row's replica saw its own tokens).
pub fn grouped_sums(inputs: &[NamedSharding], axis: &str) -> Rule {
    let a = inputs.first().ok_or("no inputs")?;
    // An axis of one device splits nothing, so the rows do not name it: the groups are whole.
    let split: &[&str] = if a.row_axes().iter().any(|ax| ax == axis) {
        &[axis]
    } else {
        &[]
    };
    let partial: Vec<&str> = a
        .row_axes()
        .iter()
        .filter(|ax| *ax != axis)
        .chain(inputs.iter().flat_map(|s| s.partial()))
        .map(String::as_str)
        .collect();
    let out = NamedSharding::new(a.mesh(), &[split, &[], &[]], &partial)
        .map_err(|e| format!("{a}: {e}"))?;
    Ok(vec![out])
}

/// The embedding table's gradient: a scatter-add of row-split tokens, so a partial sum over the
/// axes splitting them (the table itself is not split).
pub fn embed_grad(inputs: &[NamedSharding], outputs: &[TensorType]) -> Rule {
    rows_then_sums(inputs, outputs, 0)
}

/// Row-wise kernels whose first `row_outputs` outputs split like the rows and whose others are
/// sums over the rows (a norm's parameter gradients, an embedding's gradient): whole shapes,
/// partial sums over the axes that split the rows.
pub fn rows_then_sums(
    inputs: &[NamedSharding],
    outputs: &[TensorType],
    row_outputs: usize,
) -> Rule {
    let mut laid = rows(inputs, outputs)?;
    let first = inputs.first().ok_or("no inputs")?;
    for (s, t) in laid.iter_mut().zip(outputs).skip(row_outputs) {
        *s = NamedSharding::replicated(first.mesh(), t.shape.len()).with_partial(first.row_axes());
    }
    Ok(laid)
}

/// In-place updates (`acc += x`, optimizer steps): the first `updated` inputs keep their layout,
/// and every input but the trailing `scalars` (replicated step constants) is laid out alike.
pub fn in_place(inputs: &[NamedSharding], updated: usize, scalars: usize) -> Rule {
    let laid = inputs.len().saturating_sub(scalars);
    let first = inputs.first().ok_or("no inputs")?;
    if let Some(other) = inputs[..laid].iter().find(|s| *s != first) {
        return Err(format!("updates {first} with a value laid out as {other}"));
    }
    if let Some(s) = inputs[laid..].iter().find(|s| !s.is_replicated()) {
        return Err(format!("a step constant must be replicated, not {s}"));
    }
    Ok(inputs[..updated.min(laid)].to_vec())
}

/// Values packed one after another into one flat value per device: laid out as the inputs when
/// they agree on a row-only layout; otherwise the pack is each device's own piece (rows over
/// every axis), readable as a whole but not unpacked into anything but pieces.
pub fn pack(inputs: &[NamedSharding]) -> Rule {
    let first = inputs.first().ok_or("no inputs")?;
    let alike = inputs.iter().all(|s| {
        s.splits_only_rows() && s.row_axes() == first.row_axes() && s.partial() == first.partial()
    });
    Ok(vec![if alike {
        first.with_rows_of(1)
    } else {
        NamedSharding::rows(first.mesh(), 1)
    }])
}

/// One flat value cut into values: only a value whose shards are whole (copies or partial sums)
/// cuts into whole values.
pub fn unpack(inputs: &[NamedSharding], outputs: &[TensorType]) -> Rule {
    let [x] = inputs else {
        return Err(format!("{} inputs, unpack takes 1", inputs.len()));
    };
    if !x.row_axes().is_empty() {
        return Err(format!("cuts a value whose shards are pieces of it ({x})"));
    }
    Ok(outputs
        .iter()
        .map(|t| NamedSharding::replicated(x.mesh(), t.shape.len()).with_partial(x.partial()))
        .collect())
}

fn strs(axes: &[String]) -> Vec<&str> {
    axes.iter().map(String::as_str).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mesh::MeshShape;

    fn mesh() -> MeshShape {
        MeshShape::new(&[("data", 2), ("expert", 2)], 4).unwrap()
    }

    fn laid(dims: &[&[&str]], partial: &[&str]) -> NamedSharding {
        NamedSharding::new(&mesh(), dims, partial).unwrap()
    }

    #[test]
    fn grouped_matmul_rows_may_split_along_axes_that_replicate_the_groups() {
        let rows = laid(&[&["data", "expert"], &[]], &[]);
        let experts = laid(&[&["expert"], &[], &[]], &[]);
        let [out] = &matmul(&[rows.clone(), experts], false, false).unwrap()[..] else {
            panic!("one output");
        };
        assert_eq!(out.row_axes(), ["data", "expert"]);
        // Groups split along an axis the rows are not, in another order, or b split along the
        // extra row axis as well: each row group would meet another group's weights.
        for (a, b) in [
            (
                laid(&[&["data"], &[]], &[]),
                laid(&[&["expert"], &[], &[]], &[]),
            ),
            (
                laid(&[&["expert", "data"], &[]], &[]),
                laid(&[&["data", "expert"], &[], &[]], &[]),
            ),
            (rows, laid(&[&["expert"], &[], &["data"]], &[])),
        ] {
            let e = matmul(&[a, b], false, false).unwrap_err();
            assert!(e.contains("groups are split unlike"), "{e}");
        }
    }

    #[test]
    fn a_grouped_weight_gradient_is_partial_over_the_data_axis() {
        let rows = laid(&[&["data", "expert"], &[]], &[]);
        let [g] = &grouped_sums(&[rows.clone(), rows], "expert").unwrap()[..] else {
            panic!("one output");
        };
        assert_eq!(g.dims()[0], ["expert"]);
        assert_eq!(g.partial(), ["data"]);
        // With one device along the expert axis the rows do not name it: whole groups.
        let one = MeshShape::new(&[("data", 4), ("expert", 1)], 4).unwrap();
        let rows = NamedSharding::new(&one, &[&["data"], &[]], &[]).unwrap();
        let [g] = &grouped_sums(&[rows.clone(), rows], "expert").unwrap()[..] else {
            panic!("one output");
        };
        assert!(g.dims()[0].is_empty());
        assert_eq!(g.partial(), ["data"]);
    }
}
