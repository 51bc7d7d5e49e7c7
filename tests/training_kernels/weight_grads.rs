//! The expert weight gradient: against the reference, in blocks, past each block's live count,
//! and in pairs whose products keep their bits.

use super::*;

pub(super) fn expert_weight_grad_matches_the_reference(device: &Device) {
    // Equal slot blocks, and uneven all-to-all groups with an empty one and unused tail rows.
    let cases: [(&[u32], usize, usize, usize); 4] = [
        (&[0, 1], 1, 1, 1),
        (&[0, 7, 14, 21], 21, 5, 9),
        (&[0, 40, 40, 97, 130], 140, 17, 20),
        (&[0, 3], 300, 2, 3),
    ];
    for (offsets, rows, inner, n) in cases {
        let mut rng = Rng::new((rows * inner * n) as u64);
        let a = rng.vec(rows * inner);
        let b = rng.vec(rows * n);
        let want = expert_grad::expert_weight_grad_reference(&a, &b, offsets, inner, n);
        for block in [0, 1, 3] {
            let got = expert_weight_grad(
                &up(device, &[rows, inner], &a),
                &up(device, &[rows, n], &b),
                offsets,
                block,
            )
            .unwrap();
            assert_eq!(got.shape(), &[offsets.len() - 1, inner, n]);
            let what = format!("expert_weight_grad, blocks of {block}");
            assert_close(&what, &got.to_f32().unwrap(), &want, 1e-5);
        }
    }
}

/// One group made of D blocks of `capacity` rows, summed in blocks, gives the bits that D steps
/// of one block each give when their results are accumulated in order: what lets D devices'
/// expert gradients equal one device's over D rounds.
pub(super) fn expert_weight_grad_in_blocks_equals_accumulating_each_block(device: &Device) {
    let (cap, blocks, inner, n) = (5, 4, 6, 7);
    let rows = cap * blocks;
    let mut rng = Rng::new(99);
    let a = rng.vec(rows * inner);
    let b = rng.vec(rows * n);
    let whole = expert_weight_grad(
        &up(device, &[rows, inner], &a),
        &up(device, &[rows, n], &b),
        &[0, rows as u32],
        cap,
    )
    .unwrap()
    .to_f32()
    .unwrap();
    let mut acc: Option<Vec<f32>> = None;
    for k in 0..blocks {
        let part = expert_weight_grad(
            &up(
                device,
                &[cap, inner],
                &a[k * cap * inner..(k + 1) * cap * inner],
            ),
            &up(device, &[cap, n], &b[k * cap * n..(k + 1) * cap * n]),
            &[0, cap as u32],
            cap,
        )
        .unwrap()
        .to_f32()
        .unwrap();
        acc = Some(match acc {
            None => part,
            Some(acc) => acc.iter().zip(&part).map(|(x, y)| x + y).collect(),
        });
    }
    let acc = acc.unwrap();
    let same = whole
        .iter()
        .zip(&acc)
        .all(|(x, y)| x.to_bits() == y.to_bits());
    assert!(same, "on {}: {whole:?} vs {acc:?}", device.label());
}

/// Blocks of `cap` slot rows with a live count each (in strided records, as the router's): rows
/// past a count are skipped. Where they are zero (empty slots), the bits are those of summing
/// every row; where they are noise, the result is the reference over the live rows alone.
pub(super) fn expert_weight_grad_skips_rows_past_each_blocks_live_count(device: &Device) {
    let (groups, per_group, cap, inner, n) = (3, 2, 11, 6, 9);
    let blocks = groups * per_group;
    let rows = blocks * cap;
    let live: Vec<usize> = (0..blocks).map(|j| [0, cap, 4, 1, 10, 7][j]).collect();
    let records: Vec<u32> = live.iter().flat_map(|&c| [c as u32, 99, 99]).collect();
    let offsets: Vec<u32> = (0..=groups).map(|g| (g * per_group * cap) as u32).collect();
    let node = |limits: Option<usize>| ExpertWeightGrad {
        offsets: offsets.clone(),
        block: cap,
        limits,
        axis: None,
        paired: false,
    };
    let counts = Tensor::from_u32(device, &[records.len()], &records).unwrap();
    let mut rng = Rng::new(31);
    let zero_dead = |mut v: Vec<f32>, width: usize| {
        for (j, &c) in live.iter().enumerate() {
            v[(j * cap + c) * width..(j + 1) * cap * width].fill(0.0);
        }
        v
    };
    let (a_noisy, b_noisy) = (rng.vec(rows * inner), rng.vec(rows * n));
    let (a, b) = (
        zero_dead(a_noisy.clone(), inner),
        zero_dead(b_noisy.clone(), n),
    );
    let run = |a: &[f32], b: &[f32], limits: Option<usize>| {
        let (a, b) = (up(device, &[rows, inner], a), up(device, &[rows, n], b));
        let mut inputs = vec![&a, &b];
        if limits.is_some() {
            inputs.push(&counts);
        }
        eager::run_one(&node(limits), &inputs)
            .unwrap()
            .to_f32()
            .unwrap()
    };
    let whole = run(&a, &b, None);
    let limited = run(&a, &b, Some(3));
    let same = whole
        .iter()
        .zip(&limited)
        .all(|(x, y)| x.to_bits() == y.to_bits());
    assert!(
        same,
        "on {}: skipping zero rows changed bits",
        device.label()
    );
    let want = expert_grad::expert_weight_grad_reference(&a, &b, &offsets, inner, n);
    let got = run(&a_noisy, &b_noisy, Some(3));
    assert_close("expert_weight_grad over live rows", &got, &want, 1e-5);
    // Offsets that cut a block are refused, not summed against the wrong counts.
    let bad = ExpertWeightGrad {
        offsets: vec![0, 5, rows as u32],
        ..node(Some(3))
    };
    let (a, b) = (up(device, &[rows, inner], &a), up(device, &[rows, n], &b));
    assert!(eager::run_one(&bad, &[&a, &b, &counts]).is_err());
    // Too few counts for the blocks are refused, not read past.
    let short = Tensor::from_u32(device, &[4], &[1, 2, 3, 4]).unwrap();
    let err = eager::run_one(&node(Some(3)), &[&a, &b, &short]).unwrap_err();
    assert!(err.to_string().contains("live-row counts"), "{err}");
}

/// An expert layer's two weight gradients in one launch (`[G, d, h]` and `[G, h, d]`, over the
/// same blocks and live rows): each output has the bits of its product run alone, with and
/// without live-row counts; operands of other row counts are refused.
pub(super) fn paired_expert_weight_grads_give_each_products_bits(device: &Device) {
    let (groups, per_group, cap, d, h) = (3, 2, 5, 6, 13);
    let rows = groups * per_group * cap;
    let live: Vec<u32> = [5, 0, 3, 1, 5, 2]
        .iter()
        .flat_map(|&c| [c, 99, 99])
        .collect();
    let counts = Tensor::from_u32(device, &[live.len()], &live).unwrap();
    let offsets: Vec<u32> = (0..=groups).map(|g| (g * per_group * cap) as u32).collect();
    let mut rng = Rng::new(41);
    let x = up(device, &[rows, d], &rng.vec(rows * d));
    let dh = up(device, &[rows, h], &rng.vec(rows * h));
    let hid = up(device, &[rows, h], &rng.vec(rows * h));
    let dy = up(device, &[rows, d], &rng.vec(rows * d));
    let bits =
        |t: &Tensor| -> Vec<u32> { t.to_f32().unwrap().iter().map(|v| v.to_bits()).collect() };
    for limits in [None, Some(3)] {
        let node = |paired| ExpertWeightGrad {
            offsets: offsets.clone(),
            block: cap,
            limits,
            axis: None,
            paired,
        };
        let alone = |a: &Tensor, b: &Tensor| {
            let mut inputs = vec![a, b];
            if limits.is_some() {
                inputs.push(&counts);
            }
            eager::run_one(&node(false), &inputs).unwrap()
        };
        let (w2, w1) = (alone(&hid, &dy), alone(&x, &dh));
        let mut inputs = vec![&hid, &dy, &x, &dh];
        if limits.is_some() {
            inputs.push(&counts);
        }
        let [p2, p1] = eager::run_n(&node(true), &inputs).unwrap();
        assert_eq!(p2.shape(), &[groups, h, d]);
        assert_eq!(p1.shape(), &[groups, d, h]);
        assert_eq!(bits(&p2), bits(&w2), "limits {limits:?}: the first product");
        assert_eq!(
            bits(&p1),
            bits(&w1),
            "limits {limits:?}: the second product"
        );
    }
    let short = up(device, &[rows - 1, d], &rng.vec((rows - 1) * d));
    let node = ExpertWeightGrad {
        offsets,
        block: cap,
        limits: None,
        axis: None,
        paired: true,
    };
    let err = eager::run_n::<2>(&node, &[&hid, &dy, &short, &dh]).unwrap_err();
    assert!(err.to_string().contains("rows"), "{err}");
}

/// Two linear layers' weight gradients in one launch ([`WeightGradPair`]): each has the bits of
/// the `Aᵀ·B` matmul a step would run (vec4, and subgroup where the adapter has it), at row
/// counts and widths no tile divides; operands of other row counts are a shape error.
pub(super) fn a_weight_grad_pair_gives_the_vec4_products_bits(device: &Device) {
    use gangway::kernels::Matmul;
    use gangway::kernels::matmul::{Epilogue, MatmulVariant, VariantChoice};
    let bits =
        |t: &Tensor| -> Vec<u32> { t.to_f32().unwrap().iter().map(|v| v.to_bits()).collect() };
    for (rows, (d, n), (d2, n2)) in [(37, (13, 12), (6, 8)), (300, (64, 8), (16, 64))] {
        let mut rng = Rng::new(rows as u64);
        let a = up(device, &[rows, d], &rng.vec(rows * d));
        let b = up(device, &[rows, n], &rng.vec(rows * n));
        let a2 = up(device, &[rows, d2], &rng.vec(rows * d2));
        let b2 = up(device, &[rows, n2], &rng.vec(rows * n2));
        let [g, g2] = eager::run_n(&WeightGradPair, &[&a, &b, &a2, &b2]).unwrap();
        assert_eq!((g.shape(), g2.shape()), (&[d, n][..], &[d2, n2][..]));
        for variant in [MatmulVariant::Vec4, MatmulVariant::Subgroup] {
            let tn = Matmul {
                limits: None,
                trans_a: true,
                trans_b: false,
                offsets: None,
                choice: VariantChoice::Fixed(variant),
                f16_accumulate: false,
                epilogue: Epilogue::NONE,
            };
            let (Ok(want), Ok(want2)) = (
                eager::run_one(&tn, &[&a, &b]),
                eager::run_one(&tn, &[&a2, &b2]),
            ) else {
                assert!(
                    variant == MatmulVariant::Subgroup,
                    "vec4 takes these shapes"
                );
                continue;
            };
            let label = format!("{variant:?} rows {rows} on {}", device.label());
            assert_eq!(bits(&g), bits(&want), "{label}: the first product");
            assert_eq!(bits(&g2), bits(&want2), "{label}: the second product");
        }
    }
    let (a, b) = (
        up(device, &[5, 4], &[1.0; 20]),
        up(device, &[5, 4], &[1.0; 20]),
    );
    let short = up(device, &[4, 4], &[1.0; 16]);
    let err = eager::run_n::<2>(&WeightGradPair, &[&a, &b, &short, &b]).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { .. }), "{err}");
}
