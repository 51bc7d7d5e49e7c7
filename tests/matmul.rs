//! Every matmul variant against the plain-Rust reference on every adapter, on random shapes that
//! are mostly not multiples of any tile, with both transposes, plain and grouped, f32 and f16.

#![allow(clippy::unwrap_used)]

mod common;

use common::{Need, assert_close, case};
use gangway::kernels::matmul::Activation;
use gangway::kernels::matmul::{
    self, Matmul, MatmulOptions, MatmulShape, MatmulVariant, VariantChoice,
};
use gangway::kernels::{ElementwiseOp, Epilogue, eager};
use gangway::{DType, Device, Error, Rng, Tensor};
use proptest::prelude::*;

/// Rows `offsets[g]..offsets[g+1]` of `op(a)` times `op(b[g])`, run now through the kernel type.
fn grouped_matmul(
    a: &Tensor,
    b: &Tensor,
    offsets: &[u32],
    options: MatmulOptions,
) -> gangway::Result<Tensor> {
    let kernel = Matmul {
        trans_a: options.trans_a,
        trans_b: options.trans_b,
        offsets: Some(offsets.to_vec()),
        limits: None,
        choice: options.variant,
        f16_accumulate: options.f16_accumulate,
        epilogue: gangway::kernels::Epilogue::NONE,
    };
    eager::run_one(&kernel, &[a, b])
}

/// `op(a) · op(b)`, run now through the kernel type.
fn plain_matmul(a: &Tensor, b: &Tensor, options: MatmulOptions) -> gangway::Result<Tensor> {
    let kernel = Matmul {
        trans_a: options.trans_a,
        trans_b: options.trans_b,
        offsets: None,
        limits: None,
        choice: options.variant,
        f16_accumulate: options.f16_accumulate,
        epilogue: gangway::kernels::Epilogue::NONE,
    };
    eager::run_one(&kernel, &[a, b])
}

fn check(
    device: &Device,
    variant: MatmulVariant,
    shape: MatmulShape,
    offsets: &[u32],
    seed: u64,
) -> Result<(), TestCaseError> {
    // A variant that cannot take the shape has nothing to check; the dtype is the case's `Need`.
    if !variant.supports(device, &shape) {
        return Ok(());
    }
    let mut rng = Rng::new(seed);
    let a_host = rng.vec(shape.a_shape().iter().product());
    let b_host = rng.vec(shape.b_shape().iter().product());
    // Round inputs to the storage type so the reference sees what the GPU sees.
    let round = |v: Vec<f32>| -> Vec<f32> {
        if shape.dtype == DType::F16 {
            v.into_iter()
                .map(|x| half::f16::from_f32(x).to_f32())
                .collect()
        } else {
            v
        }
    };
    let (a_host, b_host) = (round(a_host), round(b_host));
    let a = Tensor::from_f32(device, &shape.a_shape(), shape.dtype, &a_host).unwrap();
    let b = Tensor::from_f32(device, &shape.b_shape(), shape.dtype, &b_host).unwrap();
    let options = MatmulOptions {
        trans_a: shape.trans_a,
        trans_b: shape.trans_b,
        variant: VariantChoice::Fixed(variant),
        f16_accumulate: shape.f16_accumulate,
    };
    let c = grouped_matmul(&a, &b, offsets, options).unwrap();
    let want = matmul::reference(&a_host, &b_host, offsets, &shape);
    // f16 sums add a rounding of about 2⁻¹¹ of the running sum at each of the K steps.
    let tol = if shape.f16_accumulate {
        2e-2 * (shape.k as f32).sqrt().max(1.0) + 2e-3 * shape.k as f32
    } else if shape.dtype == DType::F16 {
        2e-2 * (shape.k as f32).sqrt().max(1.0)
    } else {
        1e-5 * (shape.k as f32).max(1.0)
    };
    assert_close(
        &format!("{variant:?} {shape:?} on {}", device.label()),
        &c.to_f32().unwrap(),
        &want,
        tol,
    );
    Ok(())
}

/// f32, and f16 where the adapter has it.
fn float_dtypes(device: &Device) -> &'static [DType] {
    if device.supports(DType::F16) {
        &[DType::F32, DType::F16]
    } else {
        &[DType::F32]
    }
}

/// Whether two outputs are equal bit for bit.
fn same_bits(x: &[f32], y: &[f32]) -> bool {
    x.len() == y.len() && x.iter().zip(y).all(|(a, b)| a.to_bits() == b.to_bits())
}

/// Offsets for `groups` groups over `m` rows, with empty and uneven groups.
fn random_offsets(rng: &mut Rng, groups: usize, m: usize) -> Vec<u32> {
    let mut cuts: Vec<u32> = (0..groups - 1).map(|_| rng.below(m + 1) as u32).collect();
    cuts.sort_unstable();
    let mut offsets = vec![0];
    offsets.extend(cuts);
    offsets.push(m as u32);
    offsets
}

fn main() -> std::process::ExitCode {
    common::run(vec![
        case!(device: plain_matmul_matches_reference),
        case!(device: plain_matmul_matches_reference_f16).needs(Need::F16),
        case!(device: vec4_aligned_shapes_match_reference),
        case!(device: subgroup_kernel_gives_the_bits_of_vec4).needs(Need::Subgroups),
        case!(device: transpose_variant_gives_the_bits_of_the_untransposed_kernel),
        case!(device: f16_sums_match_the_reference_and_round_where_f32_sums_do_not)
            .needs(Need::F16),
        case!(device: grouped_matmul_matches_reference),
        case!(device: larger_than_one_tile_in_every_dimension),
        case!(device: rows_split_over_devices_sum_in_the_same_order),
        case!(device: live_row_limits_skip_empty_slots_without_changing_a_bit),
        case!(device: epilogues_give_the_bits_of_the_kernels_they_replace),
        case!(device: bad_shapes_are_typed_errors),
        case!(device: buffer_over_the_adapter_limit_is_refused_before_dispatch),
    ])
}

fn plain_matmul_matches_reference(device: &Device) {
    plain_matmul_property(device, DType::F32);
}

fn plain_matmul_matches_reference_f16(device: &Device) {
    plain_matmul_property(device, DType::F16);
}

fn plain_matmul_property(device: &Device, dtype: DType) {
    proptest!(common::proptest_config(10), |(
        m in 1usize..90, n in 1usize..90, k in 1usize..90,
        trans_a: bool, trans_b: bool, seed: u64,
    )| {
        let shape = MatmulShape { trans_a, trans_b, ..MatmulShape::plain(m, n, k, dtype) };
        for variant in MatmulVariant::ALL {
            check(device, variant, shape, &[0, m as u32], seed)?;
        }
    });
}

fn vec4_aligned_shapes_match_reference(device: &Device) {
    proptest!(common::proptest_config(10), |(
        m in 1usize..70, n4 in 1usize..24, k4 in 1usize..24, seed: u64,
    )| {
        let shape = MatmulShape::plain(m, n4 * 4, k4 * 4, DType::F32);
        check(device, MatmulVariant::Vec4, shape, &[0, m as u32], seed)?;
    });
}

/// The subgroup kernels broadcast A's rows where vec4 loads them per lane; the sums are the same,
/// so the bits are too. `A·B`, `A·Bᵀ` and `Aᵀ·B`; a partial last row block, N below, between and
/// above the 256-column tile, uneven and empty groups, f32 and (where the adapter has it) f16.
fn subgroup_kernel_gives_the_bits_of_vec4(device: &Device) {
    let mut rng = Rng::new(5);
    for &dtype in float_dtypes(device) {
        let shapes = [
            (37, 4, 8, 1),
            (61, 132, 68, 3),
            (19, 264, 36, 4),
            (8, 512, 4, 2),
        ];
        let transposes = [(false, false), (false, true), (true, false)];
        for ((m, n, k, groups), (trans_a, trans_b)) in
            shapes.into_iter().flat_map(|s| transposes.map(|t| (s, t)))
        {
            let offsets = random_offsets(&mut rng, groups, m);
            let shape = MatmulShape {
                groups,
                max_group_rows: matmul::check_offsets(&offsets, groups, m).unwrap(),
                trans_a,
                trans_b,
                ..MatmulShape::plain(m, n, k, dtype)
            };
            assert!(MatmulVariant::Subgroup.supports(device, &shape));
            check(device, MatmulVariant::Subgroup, shape, &offsets, 3).unwrap();
            let a = Tensor::from_f32(device, &shape.a_shape(), dtype, &rng.vec(m * k)).unwrap();
            let b_host = rng.vec(shape.b_shape().iter().product());
            let b = Tensor::from_f32(device, &shape.b_shape(), dtype, &b_host).unwrap();
            let run = |variant| {
                let options = MatmulOptions {
                    trans_a,
                    trans_b,
                    variant: VariantChoice::Fixed(variant),
                    f16_accumulate: false,
                };
                grouped_matmul(&a, &b, &offsets, options)
                    .unwrap()
                    .to_f32()
                    .unwrap()
            };
            let (vec4, subgroup) = (run(MatmulVariant::Vec4), run(MatmulVariant::Subgroup));
            let same = same_bits(&vec4, &subgroup);
            assert!(
                same,
                "{shape:?} on {}: subgroup differs from vec4",
                device.label()
            );
        }
    }
}

/// `transpose` copies A out as Aᵀ and runs the `A·B` (or `A·Bᵀ`) kernel on it: its output has
/// the bits of vec4's `A·B` on a host-transposed A (of subgroup's too, where it has them, as
/// above), and matches the reference. Odd M (no row of the copy is vec4-aligned), N below and
/// above a tile, uneven and empty groups, f32 and (where the adapter has it) f16.
fn transpose_variant_gives_the_bits_of_the_untransposed_kernel(device: &Device) {
    let mut rng = Rng::new(11);
    for &dtype in float_dtypes(device) {
        for (m, n, k, groups) in [(37, 4, 8, 1), (61, 132, 68, 3), (19, 264, 36, 4)] {
            for trans_b in [false, true] {
                let offsets = random_offsets(&mut rng, groups, m);
                let shape = MatmulShape {
                    groups,
                    max_group_rows: matmul::check_offsets(&offsets, groups, m).unwrap(),
                    trans_a: true,
                    trans_b,
                    ..MatmulShape::plain(m, n, k, dtype)
                };
                assert!(MatmulVariant::Transpose.supports(device, &shape));
                check(device, MatmulVariant::Transpose, shape, &offsets, 5).unwrap();
                // A is [K, M]; the host's Aᵀ is [M, K].
                let a_host = rng.vec(k * m);
                let a_t: Vec<f32> = (0..m * k).map(|i| a_host[(i % k) * m + i / k]).collect();
                let b_host = rng.vec(shape.b_shape().iter().product());
                let b = Tensor::from_f32(device, &shape.b_shape(), dtype, &b_host).unwrap();
                let run = |a: &[f32], a_shape: &[usize], trans_a, variant| {
                    let a = Tensor::from_f32(device, a_shape, dtype, a).unwrap();
                    let options = MatmulOptions {
                        trans_a,
                        trans_b,
                        variant: VariantChoice::Fixed(variant),
                        f16_accumulate: false,
                    };
                    grouped_matmul(&a, &b, &offsets, options)
                        .unwrap()
                        .to_f32()
                        .unwrap()
                };
                let two_pass = run(&a_host, &[k, m], true, MatmulVariant::Transpose);
                let one_pass = run(&a_t, &[m, k], false, MatmulVariant::Vec4);
                let same = same_bits(&two_pass, &one_pass);
                assert!(
                    same,
                    "{shape:?} on {}: transpose differs from vec4 on Aᵀ",
                    device.label()
                );
            }
        }
    }
}

/// f16 accumulation (an option) takes vec4's kernels and transpose's, odd shapes and uneven
/// groups, and matches the reference within f16 sums' error. That it sums in f16 shows where
/// f32 would not round: adding 4 to 8192 in f16 gives 8192 back, so a K of ones far past it
/// comes out short, where f32 sums give K exactly.
fn f16_sums_match_the_reference_and_round_where_f32_sums_do_not(device: &Device) {
    let mut rng = Rng::new(13);
    let cases = [
        (MatmulVariant::Vec4, false, false),
        (MatmulVariant::Vec4, false, true),
        (MatmulVariant::Vec4, true, false),
        (MatmulVariant::Transpose, true, false),
        (MatmulVariant::Transpose, true, true),
    ];
    for (variant, trans_a, trans_b) in cases {
        for (m, n, k, groups) in [(37, 4, 8, 1), (61, 132, 68, 3)] {
            let offsets = random_offsets(&mut rng, groups, m);
            let shape = MatmulShape {
                groups,
                max_group_rows: matmul::check_offsets(&offsets, groups, m).unwrap(),
                trans_a,
                trans_b,
                f16_accumulate: true,
                ..MatmulShape::plain(m, n, k, DType::F16)
            };
            assert!(variant.supports(device, &shape), "{variant:?} {shape:?}");
            check(device, variant, shape, &offsets, 9).unwrap();
        }
        let k = 16384;
        let (m, n) = (5, 8);
        let ones = |shape: [usize; 2]| {
            Tensor::from_f32(device, &shape, DType::F16, &vec![1.0; shape[0] * shape[1]]).unwrap()
        };
        let a = ones(if trans_a { [k, m] } else { [m, k] });
        let b = ones(if trans_b { [n, k] } else { [k, n] });
        let run = |f16_accumulate| {
            let options = MatmulOptions {
                trans_a,
                trans_b,
                variant: VariantChoice::Fixed(variant),
                f16_accumulate,
            };
            plain_matmul(&a, &b, options).unwrap().to_f32().unwrap()
        };
        let (f32_sums, f16_sums) = (run(false), run(true));
        assert!(f32_sums.iter().all(|&v| v == k as f32), "{f32_sums:?}");
        assert!(
            f16_sums.iter().all(|&v| v < 9000.0),
            "{variant:?} ({trans_a}, {trans_b}) on {}: f16 sums of {k} ones gave {f16_sums:?}",
            device.label()
        );
    }
    // Where f16 accumulation cannot run, the error says so.
    let a = Tensor::zeros(device, &[4, 4], DType::F32).unwrap();
    let options = MatmulOptions {
        f16_accumulate: true,
        ..MatmulOptions::default()
    };
    let err = plain_matmul(&a, &a, options).unwrap_err().to_string();
    assert!(err.contains("f16 accumulation needs f16 operands"), "{err}");
}

fn grouped_matmul_matches_reference(device: &Device) {
    proptest!(common::proptest_config(10), |(
        m in 1usize..80, n4 in 1usize..12, k4 in 1usize..12, groups in 1usize..6,
        trans_a: bool, trans_b: bool, seed: u64,
    )| {
        let mut rng = Rng::new(seed);
        let offsets = random_offsets(&mut rng, groups, m);
        let max_rows = matmul::check_offsets(&offsets, groups, m).unwrap();
        for variant in MatmulVariant::ALL {
            let shape = MatmulShape {
                groups,
                max_group_rows: max_rows,
                trans_a,
                trans_b,
                ..MatmulShape::plain(m, n4 * 4, k4 * 4, DType::F32)
            };
            check(device, variant, shape, &offsets, seed)?;
        }
    });
}

fn larger_than_one_tile_in_every_dimension(device: &Device) {
    // Every transpose; N a multiple of 4 (every vec4 kernel runs) and not (the edge columns).
    for (trans_a, trans_b) in [(false, false), (false, true), (true, false), (true, true)] {
        for n in [132, 130] {
            for variant in MatmulVariant::ALL {
                let shape = MatmulShape {
                    trans_a,
                    trans_b,
                    ..MatmulShape::plain(131, n, 68, DType::F32)
                };
                check(device, variant, shape, &[0, 131], 7).unwrap();
            }
        }
    }
}

/// Every variant, transpose and float type, plain and grouped (uneven and empty groups, covering
/// every row), on shapes that fill no tile: each epilogue (a relu, an addend, both, a relu's
/// backward, an addend then a relu's backward, GELU's backward), applied as the matmul stores,
/// gives the bits of the matmul followed by elementwise's relu, add, relu backward and GELU
/// backward (f16, which those kernels do not take: the host's, of the f16 product, to f16's
/// rounding); the keeping epilogues (a relu layer's residual sum, a sum and its relu's backward,
/// GELU) give both of their outputs' unfused bits. An addend on groups that leave rows unwritten
/// is refused.
fn epilogues_give_the_bits_of_the_kernels_they_replace(device: &Device) {
    let mut rng = Rng::new(41);
    let transposes = [(false, false), (false, true), (true, false), (true, true)];
    let shapes = [(13, 20, 12, 1), (37, 9, 11, 1), (29, 36, 16, 3)];
    let mut checked = 0;
    for &dtype in float_dtypes(device) {
        for ((m, n, k, groups), (trans_a, trans_b)) in
            shapes.into_iter().flat_map(|s| transposes.map(|t| (s, t)))
        {
            let offsets = random_offsets(&mut rng, groups, m);
            let shape = MatmulShape {
                groups,
                max_group_rows: matmul::check_offsets(&offsets, groups, m).unwrap(),
                trans_a,
                trans_b,
                ..MatmulShape::plain(m, n, k, dtype)
            };
            let tensor = |shape: &[usize], rng: &mut Rng| {
                let host = rng.vec(shape.iter().product());
                Tensor::from_f32(device, shape, dtype, &host).unwrap()
            };
            let a = tensor(&shape.a_shape(), &mut rng);
            let b = tensor(&shape.b_shape(), &mut rng);
            let addend = tensor(&[m, n], &mut rng);
            // A relu's output: zeros where its input was not positive (every third element).
            let relu_host: Vec<f32> = (rng.vec(m * n).into_iter().enumerate())
                .map(|(i, v)| if i % 3 == 0 { 0.0 } else { v.abs() })
                .collect();
            let relu_out = Tensor::from_f32(device, &[m, n], dtype, &relu_host).unwrap();
            // GELU's input, over its curved part and both tails.
            let gelu_host: Vec<f32> = rng.vec(m * n).iter().map(|v| 4.0 * v).collect();
            let gelu_in = Tensor::from_f32(device, &[m, n], dtype, &gelu_host).unwrap();
            for variant in MatmulVariant::ALL {
                if !variant.supports(device, &shape) {
                    continue;
                }
                let node = |epilogue| Matmul {
                    trans_a,
                    trans_b,
                    offsets: (groups > 1).then(|| offsets.clone()),
                    limits: None,
                    choice: VariantChoice::Fixed(variant),
                    f16_accumulate: false,
                    epilogue,
                };
                let product = eager::run_one(&node(Epilogue::NONE), &[&a, &b]).unwrap();
                // Elementwise kernels are f32 only: f16 epilogues are checked on the host, to
                // f16's rounding.
                let (unfused, gelu): ([(Epilogue, Vec<f32>); 6], Vec<f32>) = if dtype == DType::F32
                {
                    let run = |op, x: &[&Tensor]| eager::run_one(&op, x).unwrap();
                    let relu = run(ElementwiseOp::Relu, &[&product]);
                    let sum = |x: &Tensor| run(ElementwiseOp::Add, &[&addend, x]);
                    let relu_backward = |g: &Tensor| {
                        let masked = run(ElementwiseOp::ReluBackward, &[&relu_out, g]);
                        masked.to_f32().unwrap()
                    };
                    let gelu = run(ElementwiseOp::Gelu, &[&product]).to_f32().unwrap();
                    let unfused = [
                        (Epilogue::relu(), relu.to_f32().unwrap()),
                        (Epilogue::add(), sum(&product).to_f32().unwrap()),
                        (Epilogue::relu().and_add(), sum(&relu).to_f32().unwrap()),
                        (
                            Epilogue::backward_of(Activation::Relu),
                            relu_backward(&product),
                        ),
                        (
                            Epilogue::add().and_backward_of(Activation::Relu),
                            relu_backward(&sum(&product)),
                        ),
                        (
                            Epilogue::backward_of(Activation::Gelu),
                            run(ElementwiseOp::GeluBackward, &[&gelu_in, &product])
                                .to_f32()
                                .unwrap(),
                        ),
                    ];
                    (unfused, gelu)
                } else {
                    let (p, r) = (product.to_f32().unwrap(), addend.to_f32().unwrap());
                    let relu: Vec<f32> = p.iter().map(|v| v.max(0.0)).collect();
                    let add = |x: &[f32]| -> Vec<f32> {
                        x.iter()
                            .zip(&r)
                            .map(|(v, r)| half::f16::from_f32(r + v).to_f32())
                            .collect()
                    };
                    let relu_out = relu_out.to_f32().unwrap();
                    let relu_backward = |g: Vec<f32>| -> Vec<f32> {
                        g.iter()
                            .zip(&relu_out)
                            .map(|(&v, &r)| if r > 0.0 { v } else { 0.0 })
                            .collect()
                    };
                    let unfused = [
                        (Epilogue::relu(), relu.clone()),
                        (Epilogue::add(), add(&p)),
                        (Epilogue::relu().and_add(), add(&relu)),
                        (
                            Epilogue::backward_of(Activation::Relu),
                            relu_backward(p.clone()),
                        ),
                        (
                            Epilogue::add().and_backward_of(Activation::Relu),
                            relu_backward(add(&p)),
                        ),
                        (
                            Epilogue::backward_of(Activation::Gelu),
                            gelu_backward(&p, &gelu_in.to_f32().unwrap()),
                        ),
                    ];
                    (unfused, gelu(&p))
                };
                for (epilogue, want) in unfused.iter().cloned() {
                    let mut inputs = vec![&a, &b];
                    inputs.extend(epilogue.adds().then_some(&addend));
                    inputs.extend(
                        (epilogue.backward_of == Some(Activation::Relu)).then_some(&relu_out),
                    );
                    inputs.extend(
                        (epilogue.backward_of == Some(Activation::Gelu)).then_some(&gelu_in),
                    );
                    assert_eq!(inputs.len(), 2 + epilogue.operands());
                    let fused = eager::run_one(&node(epilogue), &inputs).unwrap();
                    let got = fused.to_f32().unwrap();
                    let what = format!("{variant:?} {epilogue:?} {shape:?} on {}", device.label());
                    if dtype == DType::F32 {
                        assert!(same_bits(&got, &want), "{what}: fused differs from unfused");
                    } else {
                        assert_close(&what, &got, &want, 2e-3);
                    }
                    checked += 1;
                }
                // The keeping epilogues: the plain epilogue's output, and as a second output the
                // value before its last stage (the relu, the sum, or the product under GELU),
                // each with the unfused bits.
                let want = |e: Epilogue| -> &Vec<f32> {
                    &unfused.iter().find(|(x, _)| *x == e).unwrap().1
                };
                let product = product.to_f32().unwrap();
                for (keep, main, before_last) in [
                    (
                        Epilogue::relu().and_add().keeping(),
                        want(Epilogue::relu().and_add()),
                        want(Epilogue::relu()),
                    ),
                    (
                        Epilogue::add().and_backward_of(Activation::Relu).keeping(),
                        want(Epilogue::add().and_backward_of(Activation::Relu)),
                        want(Epilogue::add()),
                    ),
                    (Epilogue::gelu().keeping(), &gelu, &product),
                ] {
                    let mut inputs = vec![&a, &b];
                    inputs.extend(keep.adds().then_some(&addend));
                    inputs
                        .extend((keep.backward_of == Some(Activation::Relu)).then_some(&relu_out));
                    let [out, kept] = eager::run_n(&node(keep), &inputs).unwrap();
                    let what = format!("{variant:?} {keep:?} {shape:?} on {}", device.label());
                    for (got, want) in [(out, main), (kept, before_last)] {
                        let got = got.to_f32().unwrap();
                        if dtype == DType::F32 {
                            assert!(same_bits(&got, want), "{what}: fused differs from unfused");
                        } else {
                            assert_close(&what, &got, want, 2e-3);
                        }
                    }
                    checked += 1;
                }
            }
        }
    }
    assert!(checked >= 9 * 2 * 3 * 4, "only {checked} cases ran");
    // An addend where row groups leave rows unwritten (the rows before offsets[0]) is refused.
    let a = Tensor::from_f32(device, &[6, 4], DType::F32, &[1.0; 24]).unwrap();
    let b = Tensor::from_f32(device, &[4, 4], DType::F32, &[1.0; 16]).unwrap();
    let addend = Tensor::zeros(device, &[6, 4], DType::F32).unwrap();
    let uncovering = Matmul {
        trans_a: false,
        trans_b: false,
        offsets: Some(vec![2, 6]),
        limits: None,
        choice: VariantChoice::Fixed(MatmulVariant::Naive),
        f16_accumulate: false,
        epilogue: Epilogue::add(),
    };
    let err = eager::run_one(&uncovering, &[&a, &b, &addend]).unwrap_err();
    assert!(err.to_string().contains("covering all 6 rows"), "{err}");
    // So is a relu's backward there.
    let masking = Matmul {
        epilogue: Epilogue::backward_of(Activation::Relu),
        ..uncovering.clone()
    };
    let err = eager::run_one(&masking, &[&a, &b, &addend]).unwrap_err();
    assert!(err.to_string().contains("covering all 6 rows"), "{err}");
    // A missing operand is a typed error, not a panic.
    assert!(eager::run_one(&uncovering, &[&a, &b]).is_err());
    let full = Matmul {
        offsets: None,
        epilogue: Epilogue::add().and_backward_of(Activation::Relu),
        ..uncovering
    };
    assert!(eager::run_one(&full, &[&a, &b, &addend]).is_err());
}

/// `g · gelu'(x)` on the host in f32 (tanh form), rounded to f16: the f16 epilogue's reference.
/// GELU (tanh form) of `x` on the host, rounded to f16.
fn gelu(x: &[f32]) -> Vec<f32> {
    let c = (2.0f32 / std::f32::consts::PI).sqrt();
    x.iter()
        .map(|&v| {
            let t = (c * (v + 0.044715 * v * v * v)).tanh();
            half::f16::from_f32(0.5 * v * (1.0 + t)).to_f32()
        })
        .collect()
}

fn gelu_backward(g: &[f32], x: &[f32]) -> Vec<f32> {
    let c = (2.0f32 / std::f32::consts::PI).sqrt();
    g.iter()
        .zip(x)
        .map(|(&g, &v)| {
            let t = (c * (v + 0.044715 * v * v * v)).tanh();
            let d = 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * v * v);
            half::f16::from_f32(g * d).to_f32()
        })
        .collect()
}

fn bad_shapes_are_typed_errors(device: &Device) {
    let a = Tensor::zeros(device, &[4, 5], DType::F32).unwrap();
    let b = Tensor::zeros(device, &[6, 3], DType::F32).unwrap();
    let err = plain_matmul(&a, &b, MatmulOptions::default()).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { .. }), "{err}");

    let b = Tensor::zeros(device, &[5, 3], DType::F32).unwrap();
    let err = plain_matmul(
        &a,
        &b,
        MatmulOptions {
            variant: VariantChoice::Fixed(MatmulVariant::Vec4),
            f16_accumulate: false,
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");

    let err = grouped_matmul(&a, &b, &[0, 3, 2], MatmulOptions::default()).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");

    // The subgroup kernels, asked for where they cannot run: on an adapter without subgroups any
    // shape is refused; with them, Aᵀ·Bᵀ is.
    let a = Tensor::zeros(device, &[8, 4], DType::F32).unwrap();
    let b = Tensor::zeros(device, &[4, 8], DType::F32).unwrap();
    let err = plain_matmul(
        &a,
        &b,
        MatmulOptions {
            trans_a: true,
            trans_b: true,
            variant: VariantChoice::Fixed(MatmulVariant::Subgroup),
            f16_accumulate: false,
        },
    )
    .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
}

fn buffer_over_the_adapter_limit_is_refused_before_dispatch(device: &Device) {
    let limit = device.info().limits.max_storage_buffer_binding_size;
    let rows = (limit / 4 / 1024 + 1) as usize;
    let err = Tensor::zeros(device, &[rows, 1024], DType::F32).unwrap_err();
    assert!(matches!(err, Error::LimitExceeded { .. }), "{err}");
}

/// A matmul's rows computed in one call, or cut into groups or row blocks as the MoE step cuts
/// them over devices, give the same bits: every variant sums each output in an order that depends
/// on K (and the transposes) alone. This is what lets N devices follow 1 device exactly.
fn rows_split_over_devices_sum_in_the_same_order(device: &Device) {
    let mut rng = Rng::new(11);
    for (m, n, k) in [(64, 64, 64), (37, 20, 52), (128, 256, 96), (24, 8, 100)] {
        for (trans_a, trans_b) in [(false, false), (false, true), (true, false), (true, true)] {
            let shape = MatmulShape {
                trans_a,
                trans_b,
                ..MatmulShape::plain(m, n, k, DType::F32)
            };
            let a_host = rng.vec(m * k);
            let b_host = rng.vec(k * n);
            let b = Tensor::from_f32(device, &shape.b_shape(), DType::F32, &b_host).unwrap();
            for variant in MatmulVariant::ALL {
                if !variant.supports(device, &shape) {
                    continue;
                }
                let options = MatmulOptions {
                    trans_a,
                    trans_b,
                    variant: VariantChoice::Fixed(variant),
                    f16_accumulate: false,
                };
                let a = Tensor::from_f32(device, &shape.a_shape(), DType::F32, &a_host).unwrap();
                let whole = grouped_matmul(&a, &b, &[0, m as u32], options)
                    .unwrap()
                    .to_f32()
                    .unwrap();
                // The same rows in uneven pieces, each its own call (a device's share).
                let mut at = 0;
                for piece in [1, 7, m / 2, m].map(|p| p.min(m)) {
                    let rows = piece.min(m - at);
                    if rows == 0 {
                        break;
                    }
                    let part_host: Vec<f32> = if trans_a {
                        (0..k)
                            .flat_map(|kk| (at..at + rows).map(move |r| (kk, r)))
                            .map(|(kk, r)| a_host[kk * m + r])
                            .collect()
                    } else {
                        a_host[at * k..(at + rows) * k].to_vec()
                    };
                    let a_shape = if trans_a { [k, rows] } else { [rows, k] };
                    let part = Tensor::from_f32(device, &a_shape, DType::F32, &part_host).unwrap();
                    let got = grouped_matmul(&part, &b, &[0, rows as u32], options)
                        .unwrap()
                        .to_f32()
                        .unwrap();
                    let want = &whole[at * n..(at + rows) * n];
                    let same = same_bits(&got, want);
                    assert!(
                        same,
                        "{variant:?} {m}x{n}x{k} trans ({trans_a}, {trans_b}) on {}: rows {at}..{} alone differ from the whole",
                        device.label(),
                        at + rows
                    );
                    at += rows;
                }
            }
        }
    }
}

/// The MoE step's expert matmuls: row groups of `cap` slots, `blocks` of them per weight matrix
/// (one per source device), each with a live count in a strided record (the router's). Where the
/// rows past each count are zero (empty slots), the limited product is the unlimited one bit for
/// bit, and both are the reference. Where they are not, a block whose count is 0 comes out all
/// zero: its tiles were skipped, not computed. Every variant and transpose, caps that no tile
/// divides.
fn live_row_limits_skip_empty_slots_without_changing_a_bit(device: &Device) {
    const STRIDE: usize = 4;
    let mut rng = Rng::new(23);
    for (weights, blocks, cap, n, k) in [(3, 2, 37, 20, 12), (2, 3, 9, 132, 36), (1, 1, 70, 8, 4)] {
        let groups = weights * blocks;
        let m = groups * cap;
        let offsets: Vec<u32> = (0..=groups).map(|g| (g * cap) as u32).collect();
        // Empty, full and partial blocks; the record's other words are noise the stride skips.
        let live: Vec<usize> = (0..groups)
            .map(|g| match g % 3 {
                0 => 0,
                1 => cap,
                _ => 1 + rng.below(cap - 1),
            })
            .collect();
        let records: Vec<u32> = live
            .iter()
            .flat_map(|&c| [c as u32, 0xffff_fff0, 7, 1 << 30])
            .collect();
        let counts = Tensor::from_u32(device, &[records.len()], &records).unwrap();
        for (trans_a, trans_b) in [(false, false), (false, true), (true, false), (true, true)] {
            let shape = MatmulShape {
                groups: weights,
                blocks,
                max_group_rows: cap,
                trans_a,
                trans_b,
                ..MatmulShape::plain(m, n, k, DType::F32)
            };
            // op(A) row by row, with the rows past each block's count zero or noise.
            let rows_of = |noise: bool, rng: &mut Rng| -> Vec<f32> {
                let mut rows = rng.vec(m * k);
                for (g, &c) in live.iter().enumerate() {
                    if !noise {
                        rows[(g * cap + c) * k..(g + 1) * cap * k].fill(0.0);
                    }
                }
                if trans_a {
                    (0..k * m).map(|i| rows[(i % m) * k + i / m]).collect()
                } else {
                    rows
                }
            };
            let b_host = rng.vec(shape.b_shape().iter().product());
            let b = Tensor::from_f32(device, &shape.b_shape(), DType::F32, &b_host).unwrap();
            for variant in MatmulVariant::ALL {
                if !variant.supports(device, &shape) {
                    continue;
                }
                let node = |limits| Matmul {
                    trans_a,
                    trans_b,
                    offsets: Some(offsets.clone()),
                    limits,
                    choice: VariantChoice::Fixed(variant),
                    f16_accumulate: false,
                    epilogue: gangway::kernels::Epilogue::NONE,
                };
                let what = format!(
                    "{variant:?} {weights}x{blocks} blocks of {cap}, n {n} k {k}, trans ({trans_a}, {trans_b}) on {}",
                    device.label()
                );
                // op(A)·op(B) of `a_host`, with the counts or without.
                let run = |a_host: &[f32], limited: bool| {
                    let a = Tensor::from_f32(device, &shape.a_shape(), DType::F32, a_host);
                    let a = a.unwrap();
                    let out = if limited {
                        eager::run_one(&node(Some(STRIDE)), &[&a, &b, &counts])
                    } else {
                        eager::run_one(&node(None), &[&a, &b])
                    };
                    out.unwrap().to_f32().unwrap()
                };
                let a_host = rows_of(false, &mut rng);
                let (limited, whole) = (run(&a_host, true), run(&a_host, false));
                assert!(
                    same_bits(&limited, &whole),
                    "{what}: the limited product differs from the whole"
                );
                let want = matmul::reference(&a_host, &b_host, &offsets, &shape);
                assert_close(&what, &limited, &want, 1e-5 * k as f32);

                let got = run(&rows_of(true, &mut rng), true);
                for (g, _) in live.iter().enumerate().filter(|(_, c)| **c == 0) {
                    let block = &got[g * cap * n..(g + 1) * cap * n];
                    assert!(
                        block.iter().all(|&x| x.to_bits() == 0),
                        "{what}: block {g} has no live rows, yet its outputs were computed"
                    );
                }
            }
        }
    }
}
