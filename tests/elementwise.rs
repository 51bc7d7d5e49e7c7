//! Elementwise kernels against the plain-Rust reference on every adapter, at lengths that are not
//! multiples of the 256-thread workgroup; GELU's derivative against finite differences, and GELU
//! far from zero.
#![allow(clippy::unwrap_used)]

mod common;

use common::case;
use gangway::kernels::eager;
use gangway::kernels::elementwise::{ElementwiseOp, reference};
use gangway::{DType, Device, Rng, Tensor};

/// `op` of `x` (and `z`), run now.
fn run(op: ElementwiseOp, x: &Tensor, z: Option<&Tensor>) -> gangway::Result<Tensor> {
    let inputs: Vec<&Tensor> = std::iter::once(x).chain(z).collect();
    eager::run_one(&op, &inputs)
}

fn main() -> std::process::ExitCode {
    common::run(vec![
        case!(device: every_op_matches_the_reference),
        case!(device: bad_inputs_are_errors),
        case!(host: gelu_gradient_matches_finite_differences),
        case!(device: gelu_is_finite_far_out),
    ])
}

fn every_op_matches_the_reference(device: &Device) {
    let ops = [
        ElementwiseOp::Affine {
            scale: 0.99,
            shift: 0.01,
            repeat: 1,
        },
        ElementwiseOp::Affine {
            scale: 0.5,
            shift: 1.0,
            repeat: 128,
        },
        ElementwiseOp::Relu,
        ElementwiseOp::Gelu,
        ElementwiseOp::GeluBackward,
        ElementwiseOp::Add,
        ElementwiseOp::SumRows { rows: 3 },
    ];
    for len in [1usize, 255, 257, 1000, 70_001] {
        let mut rng = Rng::new(len as u64);
        for op in ops {
            let rows = match op {
                ElementwiseOp::SumRows { rows } => rows as usize,
                _ => 1,
            };
            // Spread over [-6, 6], past GELU's bend on both sides.
            let x: Vec<f32> = rng.vec(len * rows).iter().map(|v| 6.0 * v).collect();
            let z = rng.vec(len);
            let xt = Tensor::from_f32(device, &[len * rows], DType::F32, &x).unwrap();
            let zt = Tensor::from_f32(device, &[len], DType::F32, &z).unwrap();
            let use_z = op.inputs() == 2;
            let got = run(op, &xt, use_z.then_some(&zt))
                .unwrap()
                .to_f32()
                .unwrap();
            let want = reference(op, &x, use_z.then_some(z.as_slice()));
            common::assert_close(
                &format!("{op:?} len {len} on {}", device.label()),
                &got,
                &want,
                1e-5,
            );
        }
    }
}

fn bad_inputs_are_errors(device: &Device) {
    let x = Tensor::from_f32(device, &[10], DType::F32, &[1.0; 10]).unwrap();
    assert!(run(ElementwiseOp::Add, &x, None).is_err(), "add needs z");
    assert!(run(ElementwiseOp::SumRows { rows: 3 }, &x, None).is_err());
    assert!(run(ElementwiseOp::SumRows { rows: 0 }, &x, None).is_err());
    let short = Tensor::from_f32(device, &[4], DType::F32, &[1.0; 4]).unwrap();
    assert!(run(ElementwiseOp::Add, &x, Some(&short)).is_err());
}

/// The reference GELU derivative the GPU backward is checked against, against central
/// differences of the reference GELU.
fn gelu_gradient_matches_finite_differences() {
    use gangway::kernels::elementwise::{gelu_grad_reference, gelu_reference};
    let h = 1e-5;
    for i in -80..=80 {
        let x = f64::from(i) * 0.1;
        let fd = (gelu_reference(x + h) - gelu_reference(x - h)) / (2.0 * h);
        let got = gelu_grad_reference(x);
        assert!((fd - got).abs() < 1e-7, "x {x}: {got} against {fd}");
    }
}

/// Far from zero GELU is x or 0 and its gradient 1 or 0, with no overflow to NaN.
fn gelu_is_finite_far_out(device: &Device) {
    let x = [-1e4f32, -50.0, 50.0, 1e4];
    let t = Tensor::from_f32(device, &[4], DType::F32, &x).unwrap();
    let y = run(ElementwiseOp::Gelu, &t, None)
        .unwrap()
        .to_f32()
        .unwrap();
    common::assert_close("gelu far out", &y, &[0.0, 0.0, 50.0, 1e4], 1e-6);
    let ones = Tensor::from_f32(device, &[4], DType::F32, &[1.0; 4]).unwrap();
    let g = run(ElementwiseOp::GeluBackward, &t, Some(&ones))
        .unwrap()
        .to_f32()
        .unwrap();
    common::assert_close("gelu' far out", &g, &[0.0, 0.0, 1.0, 1.0], 1e-6);
}
