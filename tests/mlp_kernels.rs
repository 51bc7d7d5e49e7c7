//! MLP training kernels against their plain-Rust references on every adapter, at lengths that are
//! not multiples of the 256-thread workgroup.
#![allow(clippy::unwrap_used)]

mod common;

use common::{Adapters, case};
use gangway::kernels::mlp::{
    accumulate, accumulate_reference, mse_grad, mse_grad_reference, relu_backward,
    relu_backward_reference, sgd, sgd_reference,
};
use gangway::{DType, Device, Error, Rng, Tensor};

fn main() -> std::process::ExitCode {
    common::run(vec![
        case!(device: every_kernel_matches_its_reference),
        case!(adapters: bad_inputs_are_errors),
    ])
}

fn every_kernel_matches_its_reference(device: &Device) {
    for len in [1usize, 255, 257, 1000, 70_001] {
        let mut rng = Rng::new(len as u64 + 7);
        let (a, b) = (rng.vec(len), rng.vec(len));
        let up = |v: &[f32]| Tensor::from_f32(device, &[len], DType::F32, v).unwrap();
        let (at, bt) = (up(&a), up(&b));
        let what = |k: &str| format!("{k} len {len} on {}", device.label());

        let got = relu_backward(&at, &bt).unwrap().to_f32().unwrap();
        let want = relu_backward_reference(&a, &b);
        common::assert_close(&what("relu_backward"), &got, &want, 0.0);

        let got = mse_grad(&at, &bt).unwrap().to_f32().unwrap();
        common::assert_close(&what("mse_grad"), &got, &mse_grad_reference(&a, &b), 1e-6);

        accumulate(&at, &bt).unwrap();
        let mut want = a.clone();
        accumulate_reference(&mut want, &b);
        common::assert_close(&what("accumulate"), &at.to_f32().unwrap(), &want, 1e-6);

        sgd(&at, &bt, 0.25).unwrap();
        sgd_reference(&mut want, &b, 0.25);
        common::assert_close(&what("sgd"), &at.to_f32().unwrap(), &want, 1e-6);
    }
}

/// On two virtual devices of the adapter: the second is the other device of a device mismatch.
fn bad_inputs_are_errors(adapters: &Adapters) {
    let devices = adapters.mesh(2);
    let device = &devices[0];
    let a = Tensor::from_f32(device, &[4], DType::F32, &[1.0; 4]).unwrap();
    let b = Tensor::from_f32(device, &[5], DType::F32, &[1.0; 5]).unwrap();
    let u = Tensor::from_u32(device, &[4], &[1; 4]).unwrap();
    assert!(matches!(
        relu_backward(&a, &b),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(mse_grad(&a, &u), Err(Error::DTypeMismatch { .. })));
    assert!(matches!(
        accumulate(&a, &a.clone()),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(sgd(&a, &b, 0.1), Err(Error::ShapeMismatch { .. })));
    let c = Tensor::from_f32(device, &[4], DType::F32, &[1.0; 4]).unwrap();
    assert!(matches!(
        sgd(&a, &c, f32::NAN),
        Err(Error::InvalidArgument { .. })
    ));
    let d = Tensor::from_f32(&devices[1], &[4], DType::F32, &[1.0; 4]).unwrap();
    assert!(matches!(
        accumulate(&a, &d),
        Err(Error::DeviceMismatch { .. })
    ));
}
