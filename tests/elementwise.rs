//! Elementwise kernels against the plain-Rust reference on every adapter, at lengths that are not
//! multiples of the 256-thread workgroup.
#![allow(clippy::unwrap_used)]

mod common;

use common::case;
use gangway::kernels::elementwise::{ElementwiseOp, reference, run};
use gangway::{DType, Device, Rng, Tensor};

fn main() -> std::process::ExitCode {
    common::run(vec![
        case!(device: every_op_matches_the_reference),
        case!(device: bad_inputs_are_errors),
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
            let x = rng.vec(len * rows);
            let z = rng.vec(len);
            let xt = Tensor::from_f32(device, &[len * rows], DType::F32, &x).unwrap();
            let zt = Tensor::from_f32(device, &[len], DType::F32, &z).unwrap();
            let use_z = matches!(op, ElementwiseOp::Add);
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
