//! Layer normalisation against its plain-Rust reference on every adapter, at row widths and row
//! counts that are not multiples of the 256-thread workgroup; the backward against the reference
//! and against central finite differences of the GPU forward (every parameter tensor: x, gamma,
//! beta); the reference backward against finite differences of the reference forward; row splits
//! in a program; bad shapes as typed errors.
#![allow(clippy::unwrap_used)]

mod common;

use common::case;
use gangway::kernels::layer_norm::{
    DEFAULT_EPS, layer_norm_backward_reference, layer_norm_reference,
};
use gangway::kernels::{LayerNorm, LayerNormBackward, TensorType, eager};
use gangway::program::ProgramBuilder;
use gangway::{DType, Device, Error, Rng, Tensor};
use std::sync::Arc;

/// `(y, stats)` of [`LayerNorm`], run now.
fn layer_norm(x: &Tensor, gamma: &Tensor, beta: &Tensor, eps: f32) -> gangway::Result<[Tensor; 2]> {
    eager::run_n(&LayerNorm { eps }, &[x, gamma, beta])
}

/// `(dx, d_gamma, d_beta)` of [`LayerNormBackward`], run now.
fn layer_norm_backward(
    x: &Tensor,
    gamma: &Tensor,
    stats: &Tensor,
    dy: &Tensor,
) -> gangway::Result<[Tensor; 3]> {
    eager::run_n(&LayerNormBackward, &[x, gamma, stats, dy])
}

fn main() -> std::process::ExitCode {
    common::run(vec![
        case!(device: forward_and_backward_match_the_reference),
        case!(device: backward_matches_finite_differences),
        case!(host: reference_backward_matches_finite_differences),
        case!(host: split_rows_give_partial_parameter_gradients),
        case!(device: bad_inputs_are_errors),
    ])
}

struct Case {
    x: Vec<f32>,
    gamma: Vec<f32>,
    beta: Vec<f32>,
    dy: Vec<f32>,
}

fn random(rows: usize, cols: usize, seed: u64) -> Case {
    let mut rng = Rng::new(seed);
    // Rows with an offset and a spread, so mean and variance both matter.
    let x = rng.vec(rows * cols).iter().map(|v| 3.0 * v + 0.5).collect();
    Case {
        x,
        gamma: rng.vec(cols).iter().map(|v| 1.0 + v).collect(),
        beta: rng.vec(cols),
        dy: rng.vec(rows * cols),
    }
}

fn up(device: &Device, shape: &[usize], v: &[f32]) -> Tensor {
    Tensor::from_f32(device, shape, DType::F32, v).unwrap()
}

fn forward_and_backward_match_the_reference(device: &Device) {
    for (rows, cols) in [(1, 1), (3, 7), (257, 33), (40, 300)] {
        let c = random(rows, cols, (rows * cols) as u64);
        let x = up(device, &[rows, cols], &c.x);
        let gamma = up(device, &[cols], &c.gamma);
        let beta = up(device, &[cols], &c.beta);
        let [y, stats] = layer_norm(&x, &gamma, &beta, DEFAULT_EPS).unwrap();
        let (want_y, want_stats) =
            layer_norm_reference(&c.x, &c.gamma, &c.beta, DEFAULT_EPS).unwrap();
        let what = |k: &str| format!("{k} {rows}x{cols} on {}", device.label());
        common::assert_close(&what("y"), &y.to_f32().unwrap(), &want_y, 1e-5);
        common::assert_close(&what("stats"), &stats.to_f32().unwrap(), &want_stats, 1e-5);

        let dy = up(device, &[rows, cols], &c.dy);
        let grads = layer_norm_backward(&x, &gamma, &stats, &dy).unwrap();
        let want = layer_norm_backward_reference(&c.x, &c.gamma, &c.dy, DEFAULT_EPS).unwrap();
        for (name, got, want) in [
            ("dx", &grads[0], &want[0]),
            ("d_gamma", &grads[1], &want[1]),
            ("d_beta", &grads[2], &want[2]),
        ] {
            common::assert_close(&what(name), &got.to_f32().unwrap(), want, 1e-4);
        }

        // With a residual branch's gradient added in the same launch: the norm's dx plus it,
        // bit for bit (the one f32 add), and the same parameter gradients.
        let residual: Vec<f32> = c.dy.iter().map(|v| v * 0.5 - 0.25).collect();
        let r = up(device, &[rows, cols], &residual);
        let added: [Tensor; 3] =
            eager::run_n(&LayerNormBackward, &[&x, &gamma, &stats, &dy, &r]).unwrap();
        let plain = grads[0].to_f32().unwrap();
        let want: Vec<f32> = residual.iter().zip(&plain).map(|(a, b)| a + b).collect();
        assert_eq!(
            added[0].to_f32().unwrap(),
            want,
            "{}",
            what("dx + residual")
        );
        for i in 1..3 {
            assert_eq!(added[i].to_f32().unwrap(), grads[i].to_f32().unwrap());
        }
    }
}

/// `Σ w ⊙ y` in f64 from the GPU forward.
fn weighted(device: &Device, c: &Case, rows: usize, w: &[f32]) -> f64 {
    let cols = c.gamma.len();
    let [y, _] = layer_norm(
        &up(device, &[rows, cols], &c.x),
        &up(device, &[cols], &c.gamma),
        &up(device, &[cols], &c.beta),
        DEFAULT_EPS,
    )
    .unwrap();
    y.to_f32()
        .unwrap()
        .iter()
        .zip(w)
        .map(|(&a, &b)| f64::from(a) * f64::from(b))
        .sum()
}

fn backward_matches_finite_differences(device: &Device) {
    let (rows, cols) = (5, 9);
    let c = random(rows, cols, 77);
    let x = up(device, &[rows, cols], &c.x);
    let gamma = up(device, &[cols], &c.gamma);
    let [_, stats] = layer_norm(&x, &gamma, &up(device, &[cols], &c.beta), DEFAULT_EPS).unwrap();
    let grads = layer_norm_backward(&x, &gamma, &stats, &up(device, &[rows, cols], &c.dy)).unwrap();
    let eps = 1e-2f32;
    for (which, grad) in grads.iter().enumerate() {
        let grad = grad.to_f32().unwrap();
        for at in [0, grad.len() / 2, grad.len() - 1] {
            let shifted = |delta: f32| {
                let mut s = Case {
                    x: c.x.clone(),
                    gamma: c.gamma.clone(),
                    beta: c.beta.clone(),
                    dy: Vec::new(),
                };
                [&mut s.x, &mut s.gamma, &mut s.beta][which][at] += delta;
                weighted(device, &s, rows, &c.dy)
            };
            let fd = (shifted(eps) - shifted(-eps)) / (2.0 * f64::from(eps));
            let got = f64::from(grad[at]);
            assert!(
                (fd - got).abs() <= 2e-3 + 1e-2 * fd.abs(),
                "gradient {which} element {at} on {}: {got} against {fd}",
                device.label()
            );
        }
    }
}

fn reference_backward_matches_finite_differences() {
    let (rows, cols) = (3, 6);
    let c = random(rows, cols, 5);
    let loss = |x: &[f32], g: &[f32], b: &[f32]| {
        let (y, _) = layer_norm_reference(x, g, b, DEFAULT_EPS).unwrap();
        y.iter()
            .zip(&c.dy)
            .map(|(&a, &w)| f64::from(a) * f64::from(w))
            .sum::<f64>()
    };
    let grads = layer_norm_backward_reference(&c.x, &c.gamma, &c.dy, DEFAULT_EPS).unwrap();
    let eps = 1e-2f32;
    for which in 0..3 {
        for at in 0..grads[which].len() {
            let mut args = [c.x.clone(), c.gamma.clone(), c.beta.clone()];
            args[which][at] += eps;
            let plus = loss(&args[0], &args[1], &args[2]);
            args[which][at] -= 2.0 * eps;
            let minus = loss(&args[0], &args[1], &args[2]);
            let fd = (plus - minus) / (2.0 * f64::from(eps));
            let got = f64::from(grads[which][at]);
            assert!(
                (fd - got).abs() <= 1e-3 + 1e-3 * fd.abs(),
                "{which} {at}: {got} against {fd}"
            );
        }
    }
}

/// The sharding rule: over 2 devices splitting the rows, dx splits like them and the parameter
/// gradients are partial sums over the axis.
fn split_rows_give_partial_parameter_gradients() {
    let mut p = ProgramBuilder::new("layer norm backward");
    let gang = [0, 1];
    let (rows, cols) = (4, 8);
    let x = p.typed_arg(&gang, TensorType::f32(&[rows, cols]));
    let gamma = p.variable("gamma", &gang, TensorType::f32(&[cols]));
    let stats = p.typed_arg(&gang, TensorType::f32(&[rows, 2]));
    let dy = p.typed_arg(&gang, TensorType::f32(&[rows, cols]));
    let outs = p.kernels(
        "ln",
        &gang,
        Arc::new(LayerNormBackward),
        &[x, gamma, stats, dy],
    );
    assert_eq!(outs.len(), 3);
    let laid: Vec<_> = outs.iter().map(|&v| p.sharding(v)).collect();
    assert_eq!(laid[0], p.sharding(x), "dx splits like x");
    for s in &laid[1..] {
        assert!(s.row_axes().is_empty(), "{s}");
        assert_eq!(s.partial(), p.sharding(x).row_axes(), "{s}");
    }
    // An all-reduce completes the parameter gradients.
    let summed = p.all_reduce("sum", outs[1]);
    assert!(p.sharding(summed).partial().is_empty());
    p.result(summed);
    p.result(outs[0]);
    p.build().unwrap();
}

fn bad_inputs_are_errors(device: &Device) {
    let t = |shape: &[usize]| Tensor::zeros(device, shape, DType::F32).unwrap();
    let (x, g, b) = (t(&[3, 4]), t(&[4]), t(&[4]));
    assert!(matches!(
        layer_norm(&x, &t(&[5]), &b, DEFAULT_EPS),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        layer_norm(&t(&[12]), &g, &b, DEFAULT_EPS),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        layer_norm(&x, &g, &b, 0.0),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        layer_norm(&x, &g, &b, f32::NAN),
        Err(Error::InvalidArgument { .. })
    ));
    let u = Tensor::from_u32(device, &[4], &[0; 4]).unwrap();
    assert!(matches!(
        layer_norm(&x, &g, &u, DEFAULT_EPS),
        Err(Error::DTypeMismatch { .. })
    ));
    assert!(matches!(
        layer_norm_backward(&x, &g, &t(&[3, 3]), &x),
        Err(Error::ShapeMismatch { .. })
    ));
    let stats = t(&[3, 2]);
    let wrong_residual: gangway::Result<[Tensor; 3]> =
        eager::run_n(&LayerNormBackward, &[&x, &g, &stats, &x, &t(&[3, 5])]);
    assert!(wrong_residual.is_err());
}
