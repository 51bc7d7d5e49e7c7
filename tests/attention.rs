//! Attention against its plain-Rust reference on every adapter, causal and not, at sequence
//! lengths that are not multiples of the 32-row blocks or 16-row tiles; the backward also against
//! central finite differences of the GPU forward; the reference backward against finite
//! differences of the reference forward; and bad shapes as typed errors. Cached attention (a
//! decoder's) against its reference (the caches bit for bit), and a prefill then decode steps
//! against attention over the whole sequences.
#![allow(clippy::unwrap_used)]

mod common;

use common::{Adapters, Need, case};
use gangway::kernels::attention::{
    AttentionShape, attention_backward_reference, attention_reference, default_scale,
};
use gangway::kernels::cached_attention::{CacheShape, cached_attention_reference};
use gangway::kernels::{Attention, AttentionNaive, CachedAttention, eager};
use gangway::program::{CompileOptions, ProgramBuilder};
use gangway::sched::RunOptions;
use gangway::{DType, Device, Error, Rng, Tensor};
use std::sync::Arc;

/// Attention of `[B, T, H·Dh]` values with `heads` heads and the default scale, run now:
/// `(out, lse)`.
fn attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    heads: usize,
    causal: bool,
) -> gangway::Result<(Tensor, Tensor)> {
    let s = AttentionShape::of("attention", q.shape(), heads)?;
    let [out, lse] = eager::run_n(&Attention::new(heads, s.head_dim, causal), &[q, k, v])?;
    Ok((out, lse))
}

/// The gradients of [`attention`] given its outputs and `d_out`.
struct Grads {
    dq: Tensor,
    dk: Tensor,
    dv: Tensor,
}

/// [`Grads`] of `(q, k, v, out, lse, d_out)`, run now.
fn attention_backward(inputs: [&Tensor; 6], heads: usize, causal: bool) -> gangway::Result<Grads> {
    let s = AttentionShape::of("attention_backward", inputs[0].shape(), heads)?;
    let backward = Attention::new(heads, s.head_dim, causal).backward();
    let [dq, dk, dv] = eager::run_n(&backward, &inputs)?;
    Ok(Grads { dq, dk, dv })
}

fn main() -> std::process::ExitCode {
    common::run(vec![
        case!(device: forward_matches_the_reference),
        case!(device: naive_forward_matches_the_reference),
        case!(device: backward_matches_the_reference),
        case!(device: backward_matches_finite_differences),
        case!(device: f16_storage_matches_the_reference).needs(Need::F16),
        case!(host: reference_backward_matches_finite_differences),
        case!(adapters: bad_inputs_are_errors),
        case!(adapters: a_program_splits_the_batch_over_devices),
        case!(device: cached_attention_matches_the_reference),
        case!(device: cached_attention_follows_attention_over_whole_sequences),
        case!(device: bad_cached_attention_inputs_are_errors),
    ])
}

/// (batch, seq, heads, head_dim): odd lengths, head dimensions not multiples of 4, and one at the
/// limit. (Each head dimension is a pipeline of its own, and unrolled wide ones take a software
/// driver tens of seconds to compile: the bench compiles the usual 64.)
const SHAPES: &[(usize, usize, usize, usize)] = &[
    (1, 1, 1, 4),
    (2, 17, 2, 8),
    (1, 33, 3, 5),
    (1, 70, 1, 20),
    (2, 9, 2, 128),
];

fn shape((batch, seq, heads, head_dim): (usize, usize, usize, usize)) -> AttentionShape {
    AttentionShape {
        batch,
        seq,
        heads,
        head_dim,
    }
}

struct Inputs {
    s: AttentionShape,
    host: [Vec<f32>; 3],
    dev: [Tensor; 3],
}

fn inputs(device: &Device, s: AttentionShape, seed: u64) -> Inputs {
    let mut rng = Rng::new(seed);
    let n = s.rows().iter().product();
    let host = [rng.vec(n), rng.vec(n), rng.vec(n)];
    let up = |v: &Vec<f32>| Tensor::from_f32(device, &s.rows(), DType::F32, v).unwrap();
    let dev = [up(&host[0]), up(&host[1]), up(&host[2])];
    Inputs { s, host, dev }
}

fn forward_matches_the_reference(device: &Device) {
    for (i, &dims) in SHAPES.iter().enumerate() {
        for causal in [true, false] {
            let x = inputs(device, shape(dims), i as u64);
            let [q, k, v] = &x.dev;
            let (out, lse) = attention(q, k, v, x.s.heads, causal).unwrap();
            let [hq, hk, hv] = &x.host;
            let scale = default_scale(x.s.head_dim);
            let (want, want_lse) = attention_reference(&x.s, hq, hk, hv, causal, scale).unwrap();
            let what = format!("{:?} causal {causal} on {}", x.s, device.label());
            common::assert_close(&what, &out.to_f32().unwrap(), &want, 2e-5);
            common::assert_close(&what, &lse.to_f32().unwrap(), &want_lse, 2e-5);
        }
    }
}

fn naive_forward_matches_the_reference(device: &Device) {
    for (i, &dims) in SHAPES.iter().enumerate() {
        let x = inputs(device, shape(dims), 10 + i as u64);
        let [q, k, v] = &x.dev;
        let scale = default_scale(x.s.head_dim);
        let kernel = AttentionNaive(gangway::kernels::Attention {
            heads: x.s.heads,
            causal: true,
            scale,
            seq: None,
        });
        let outs = eager::run(&kernel, &[q, k, v]).unwrap();
        let [hq, hk, hv] = &x.host;
        let (want, want_lse) = attention_reference(&x.s, hq, hk, hv, true, scale).unwrap();
        let what = format!("naive {:?} on {}", x.s, device.label());
        common::assert_close(&what, &outs[0].to_f32().unwrap(), &want, 2e-5);
        common::assert_close(&what, &outs[1].to_f32().unwrap(), &want_lse, 2e-5);
    }
}

fn backward_matches_the_reference(device: &Device) {
    for (i, &dims) in SHAPES.iter().enumerate() {
        for causal in [true, false] {
            let x = inputs(device, shape(dims), 20 + i as u64);
            let [q, k, v] = &x.dev;
            let (out, lse) = attention(q, k, v, x.s.heads, causal).unwrap();
            let d_host = Rng::new(30 + i as u64).vec(x.s.rows().iter().product());
            let d_out = Tensor::from_f32(device, &x.s.rows(), DType::F32, &d_host).unwrap();
            let g = attention_backward([q, k, v, &out, &lse, &d_out], x.s.heads, causal).unwrap();
            let [hq, hk, hv] = &x.host;
            let scale = default_scale(x.s.head_dim);
            let want =
                attention_backward_reference(&x.s, [hq, hk, hv, &d_host], causal, scale).unwrap();
            for (name, got, want) in [
                ("dq", &g.dq, &want[0]),
                ("dk", &g.dk, &want[1]),
                ("dv", &g.dv, &want[2]),
            ] {
                let what = format!("{name} {:?} causal {causal} on {}", x.s, device.label());
                common::assert_close(&what, &got.to_f32().unwrap(), want, 1e-4);
            }
        }
    }
}

/// f16 queries, keys, values and output gradient (where the adapter has `shader-f16`): the
/// forward and backward against the f32 reference of the same f16-rounded inputs. Storage is
/// f16, every sum f32, so what is left is rounding the outputs to f16 (2⁻¹¹ relative) and the
/// backward reading the f16-rounded forward output.
fn f16_storage_matches_the_reference(device: &Device) {
    let round = |v: Vec<f32>| -> Vec<f32> {
        v.into_iter()
            .map(|x| half::f16::from_f32(x).to_f32())
            .collect()
    };
    for (i, dims) in [(2, 17, 2, 8), (1, 33, 3, 5)].into_iter().enumerate() {
        for causal in [true, false] {
            let s = shape(dims);
            let n: usize = s.rows().iter().product();
            let mut rng = Rng::new(40 + i as u64);
            let host = [round(rng.vec(n)), round(rng.vec(n)), round(rng.vec(n))];
            let d_host = round(rng.vec(n));
            let up = |v: &[f32]| Tensor::from_f32(device, &s.rows(), DType::F16, v).unwrap();
            let (q, k, v, d_out) = (up(&host[0]), up(&host[1]), up(&host[2]), up(&d_host));
            let (out, lse) = attention(&q, &k, &v, s.heads, causal).unwrap();
            assert_eq!((out.dtype(), lse.dtype()), (DType::F16, DType::F32));
            let scale = default_scale(s.head_dim);
            let [hq, hk, hv] = &host;
            let (want, want_lse) = attention_reference(&s, hq, hk, hv, causal, scale).unwrap();
            let what = format!("f16 {s:?} causal {causal} on {}", device.label());
            common::assert_close(&what, &out.to_f32().unwrap(), &want, 2e-3);
            common::assert_close(&what, &lse.to_f32().unwrap(), &want_lse, 2e-5);
            let g = attention_backward([&q, &k, &v, &out, &lse, &d_out], s.heads, causal).unwrap();
            let want =
                attention_backward_reference(&s, [hq, hk, hv, &d_host], causal, scale).unwrap();
            for (name, got, want) in [
                ("dq", &g.dq, &want[0]),
                ("dk", &g.dk, &want[1]),
                ("dv", &g.dv, &want[2]),
            ] {
                assert_eq!(got.dtype(), DType::F16);
                common::assert_close(
                    &format!("{name} {what}"),
                    &got.to_f32().unwrap(),
                    want,
                    1e-2,
                );
            }
        }
    }
    // Mixed storage types are refused.
    let s = shape((1, 4, 1, 4));
    let n: usize = s.rows().iter().product();
    let h = Tensor::from_f32(device, &s.rows(), DType::F16, &vec![0.5; n]).unwrap();
    let f = Tensor::from_f32(device, &s.rows(), DType::F32, &vec![0.5; n]).unwrap();
    let err = attention(&h, &f, &h, 1, true).unwrap_err().to_string();
    assert!(err.contains("f16") || err.contains("F16"), "{err}");
}

/// `Σ w ⊙ out` in f64 from the GPU forward.
fn weighted_output(q: &Tensor, k: &Tensor, v: &Tensor, heads: usize, w: &[f32]) -> f64 {
    let (out, _) = attention(q, k, v, heads, true).unwrap();
    let out = out.to_f32().unwrap();
    out.iter()
        .zip(w)
        .map(|(&o, &w)| f64::from(o) * f64::from(w))
        .sum()
}

/// Central differences of the GPU forward at a few coordinates of every input, against the GPU
/// backward with `d_out = w`: checks the gradient of every input tensor.
fn backward_matches_finite_differences(device: &Device) {
    let x = inputs(device, shape((1, 19, 2, 6)), 40);
    let n = x.s.rows().iter().product::<usize>();
    let w = Rng::new(41).vec(n);
    let [q, k, v] = &x.dev;
    let (out, lse) = attention(q, k, v, x.s.heads, true).unwrap();
    let d_out = Tensor::from_f32(device, &x.s.rows(), DType::F32, &w).unwrap();
    let g = attention_backward([q, k, v, &out, &lse, &d_out], x.s.heads, true).unwrap();
    let grads = [
        g.dq.to_f32().unwrap(),
        g.dk.to_f32().unwrap(),
        g.dv.to_f32().unwrap(),
    ];
    let eps = 1e-2f32;
    for (which, grad) in grads.iter().enumerate() {
        for at in [0, 7, n / 2, n - 1] {
            let shifted = |delta: f32| {
                let mut h = x.host[which].clone();
                h[at] += delta;
                let t = Tensor::from_f32(device, &x.s.rows(), DType::F32, &h).unwrap();
                let mut args = [q, k, v];
                args[which] = &t;
                weighted_output(args[0], args[1], args[2], x.s.heads, &w)
            };
            let fd = (shifted(eps) - shifted(-eps)) / (2.0 * f64::from(eps));
            let got = f64::from(grad[at]);
            assert!(
                (fd - got).abs() <= 2e-3 + 1e-2 * fd.abs(),
                "input {which} element {at} on {}: backward {got}, finite difference {fd}",
                device.label()
            );
        }
    }
}

/// The reference backward against central differences of the reference forward, at every
/// coordinate of a small problem.
fn reference_backward_matches_finite_differences() {
    let s = shape((2, 5, 2, 3));
    let n = s.rows().iter().product::<usize>();
    let mut rng = Rng::new(50);
    let host = [rng.vec(n), rng.vec(n), rng.vec(n)];
    let w = rng.vec(n);
    let scale = 0.7;
    for causal in [true, false] {
        let loss = |x: &[Vec<f32>; 3]| {
            let (out, _) = attention_reference(&s, &x[0], &x[1], &x[2], causal, scale).unwrap();
            out.iter()
                .zip(&w)
                .map(|(&o, &w)| f64::from(o) * f64::from(w))
                .sum::<f64>()
        };
        let grads =
            attention_backward_reference(&s, [&host[0], &host[1], &host[2], &w], causal, scale)
                .unwrap();
        let eps = 1e-2f32;
        for which in 0..3 {
            for at in 0..n {
                let mut plus = host.clone();
                plus[which][at] += eps;
                let mut minus = host.clone();
                minus[which][at] -= eps;
                let fd = (loss(&plus) - loss(&minus)) / (2.0 * f64::from(eps));
                let got = f64::from(grads[which][at]);
                assert!(
                    (fd - got).abs() <= 1e-3 + 1e-3 * fd.abs(),
                    "causal {causal} input {which} element {at}: {got} against {fd}"
                );
            }
        }
    }
}

fn bad_inputs_are_errors(adapters: &Adapters) {
    let devices = adapters.mesh(2);
    let device = &devices[0];
    let t = |shape: &[usize]| Tensor::zeros(device, shape, DType::F32).unwrap();
    let q = t(&[1, 4, 8]);
    // 8 columns are not 3 heads; a head of 256 is over the limit; 2-d is not [B, T, H·Dh].
    assert!(matches!(
        attention(&q, &q, &q, 3, true),
        Err(Error::InvalidArgument { .. })
    ));
    let wide = t(&[1, 4, 256]);
    assert!(matches!(
        attention(&wide, &wide, &wide, 1, true),
        Err(Error::InvalidArgument { .. })
    ));
    let flat = t(&[4, 8]);
    assert!(matches!(
        attention(&flat, &flat, &flat, 2, true),
        Err(Error::InvalidArgument { .. })
    ));
    // Keys of another length, u32 values, values on another device.
    let k = t(&[1, 5, 8]);
    assert!(matches!(
        attention(&q, &k, &q, 2, true),
        Err(Error::ShapeMismatch { .. })
    ));
    let u = Tensor::from_u32(device, &[1, 4, 8], &[0; 32]).unwrap();
    assert!(matches!(
        attention(&q, &q, &u, 2, true),
        Err(Error::DTypeMismatch { .. })
    ));
    let elsewhere = Tensor::zeros(&devices[1], &[1, 4, 8], DType::F32).unwrap();
    assert!(matches!(
        attention(&q, &q, &elsewhere, 2, true),
        Err(Error::DeviceMismatch { .. })
    ));
    // A non-finite scale.
    let nan = Attention {
        scale: f32::NAN,
        ..Attention::new(2, 4, true)
    };
    let r = eager::run(&nan, &[&q, &q, &q]);
    assert!(matches!(r, Err(Error::InvalidArgument { .. })));
}

/// Attention and its backward as nodes of one program on two devices, each holding one sequence
/// of the batch (rows split by the default sharding rule): the same as the reference on the whole
/// batch.
fn a_program_splits_the_batch_over_devices(adapters: &Adapters) {
    let devices = adapters.mesh(2);
    let gang = [0, 1];
    let s = shape((2, 21, 2, 6));
    let shard = [1, s.seq, s.heads * s.head_dim];
    let scale = default_scale(s.head_dim);
    let mut p = ProgramBuilder::new("attention over the batch");
    let ty = gangway::kernels::TensorType::f32(&shard);
    let [q, k, v, d_out] = [(); 4].map(|_| p.typed_arg(&gang, ty.clone()));
    let forward = gangway::kernels::Attention {
        heads: s.heads,
        causal: true,
        scale,
        seq: None,
    };
    let backward = gangway::kernels::AttentionBackward {
        heads: s.heads,
        causal: true,
        scale,
        seq: None,
    };
    let [out, lse] = p.kernel("attention", &gang, Arc::new(forward), &[q, k, v]);
    let [dq, dk, dv] = p.kernel(
        "attention_backward",
        &gang,
        Arc::new(backward),
        &[q, k, v, out, lse, d_out],
    );
    for x in [out, dq, dk, dv] {
        p.result(x);
    }
    let exec = Arc::new(
        p.build()
            .unwrap()
            .compile(&devices, CompileOptions::default())
            .unwrap(),
    );
    let (_runtime, client) = common::runtime_client(&devices, "attention");
    let n = s.rows().iter().product::<usize>();
    let mut rng = Rng::new(60);
    let args: Vec<Vec<f32>> = (0..4).map(|_| rng.vec(n)).collect();
    let got = client
        .run(&exec, args.clone(), RunOptions::default())
        .unwrap();
    let (want_out, _) = attention_reference(&s, &args[0], &args[1], &args[2], true, scale).unwrap();
    let want =
        attention_backward_reference(&s, [&args[0], &args[1], &args[2], &args[3]], true, scale)
            .unwrap();
    common::assert_close("out", &got[0], &want_out, 2e-5);
    for (i, name) in ["dq", "dk", "dv"].iter().enumerate() {
        common::assert_close(name, &got[i + 1], &want[i], 1e-4);
    }
}

/// Cached attention's inputs on the device and the host: `(q, k, v)` of the new rows, their
/// positions (`start..start + P` in every sequence), and caches of random values (positions at
/// and after `start` are overwritten).
struct CachedInputs {
    host: [Vec<f32>; 5],
    positions: Vec<u32>,
    dev: [Tensor; 6],
}

fn cached_inputs(device: &Device, s: &CacheShape, start: usize, seed: u64) -> CachedInputs {
    let mut rng = Rng::new(seed);
    let width = s.heads * s.head_dim;
    let (n, cached) = (s.batch * s.rows, s.batch * s.capacity);
    let host = [
        rng.vec(n * width),
        rng.vec(n * width),
        rng.vec(n * width),
        rng.vec(cached * width),
        rng.vec(cached * width),
    ];
    let positions: Vec<u32> = (0..s.batch)
        .flat_map(|_| (start..start + s.rows).map(|p| p as u32))
        .collect();
    let up = |v: &Vec<f32>, rows: usize| {
        Tensor::from_f32(device, &[rows, width], DType::F32, v).unwrap()
    };
    let dev = [
        up(&host[0], n),
        up(&host[1], n),
        up(&host[2], n),
        Tensor::from_u32(device, &[n, 1], &positions).unwrap(),
        up(&host[3], cached),
        up(&host[4], cached),
    ];
    CachedInputs {
        host,
        positions,
        dev,
    }
}

/// (sequences, new rows, cache rows, heads, head_dim, first position): a prefill from 0, decode
/// steps at the start, middle and end of the cache, odd head widths and one at the limit.
const CACHED: &[(usize, usize, usize, usize, usize, usize)] = &[
    (1, 1, 1, 1, 4, 0),
    (2, 7, 9, 2, 5, 0),
    (3, 1, 9, 2, 5, 4),
    (2, 1, 33, 3, 8, 32),
    (2, 3, 17, 1, 20, 6),
    (1, 2, 5, 1, 128, 1),
];

/// The output and both updated caches against the reference on every shape.
fn cached_attention_matches_the_reference(device: &Device) {
    for (i, &(batch, rows, capacity, heads, head_dim, start)) in CACHED.iter().enumerate() {
        let s = CacheShape {
            batch,
            rows,
            capacity,
            heads,
            head_dim,
        };
        let x = cached_inputs(device, &s, start, i as u64);
        let scale = default_scale(head_dim);
        let kernel = CachedAttention {
            heads,
            scale,
            capacity,
        };
        let inputs: Vec<&Tensor> = x.dev.iter().collect();
        let [out, kc, vc] = eager::run_n(&kernel, &inputs).unwrap();
        let [q, k, v, k_cache, v_cache] = &x.host;
        let want =
            cached_attention_reference((q, k, v), &x.positions, (k_cache, v_cache), &s, scale)
                .unwrap();
        let what = format!("{s:?} from {start} on {}", device.label());
        common::assert_close(&what, &out.to_f32().unwrap(), &want[0], 2e-5);
        // The caches are copies: bit for bit.
        assert_eq!(kc.to_f32().unwrap(), want[1], "{what}: keys");
        assert_eq!(vc.to_f32().unwrap(), want[2], "{what}: values");
    }
}

/// A prefill of part of every sequence, then decode steps to the end, give the rows of causal
/// attention over the whole sequences (the flash kernel), within 2e-5.
fn cached_attention_follows_attention_over_whole_sequences(device: &Device) {
    let s = shape((2, 11, 2, 6));
    let x = inputs(device, s, 7);
    let (full, _) = attention(&x.dev[0], &x.dev[1], &x.dev[2], s.heads, true).unwrap();
    let full = full.to_f32().unwrap();
    let width = s.heads * s.head_dim;
    let kernel = CachedAttention {
        heads: s.heads,
        scale: default_scale(s.head_dim),
        capacity: s.seq,
    };
    let zeros = || Tensor::zeros(device, &[s.batch * s.seq, width], DType::F32).unwrap();
    let (mut kc, mut vc) = (zeros(), zeros());
    let prefill = 4;
    let mut at = 0;
    while at < s.seq {
        let rows = if at == 0 { prefill } else { 1 };
        // Rows at..at + rows of each sequence.
        let pick = |host: &Vec<f32>| -> Tensor {
            let part: Vec<f32> = (0..s.batch)
                .flat_map(|b| {
                    host[(b * s.seq + at) * width..(b * s.seq + at + rows) * width].to_vec()
                })
                .collect();
            Tensor::from_f32(device, &[s.batch * rows, width], DType::F32, &part).unwrap()
        };
        let positions: Vec<u32> = (0..s.batch)
            .flat_map(|_| (at..at + rows).map(|p| p as u32))
            .collect();
        let pos = Tensor::from_u32(device, &[s.batch * rows, 1], &positions).unwrap();
        let [q, k, v] = [pick(&x.host[0]), pick(&x.host[1]), pick(&x.host[2])];
        let [out, k2, v2] = eager::run_n(&kernel, &[&q, &k, &v, &pos, &kc, &vc]).unwrap();
        let out = out.to_f32().unwrap();
        for b in 0..s.batch {
            let want = &full[(b * s.seq + at) * width..(b * s.seq + at + rows) * width];
            let got = &out[b * rows * width..(b + 1) * rows * width];
            common::assert_close(&format!("sequence {b} from {at}"), got, want, 2e-5);
        }
        (kc, vc) = (k2, v2);
        at += rows;
    }
}

fn bad_cached_attention_inputs_are_errors(device: &Device) {
    let t = |rows: usize, width: usize| Tensor::zeros(device, &[rows, width], DType::F32).unwrap();
    let pos = |n: usize| Tensor::from_u32(device, &[n, 1], &vec![0; n]).unwrap();
    let kernel = CachedAttention {
        heads: 2,
        scale: 0.5,
        capacity: 4,
    };
    let run = |k: &CachedAttention, x: [&Tensor; 6]| eager::run_n::<3>(k, &x);
    let (q, cache, p) = (t(2, 8), t(8, 8), pos(2));
    assert!(run(&kernel, [&q, &q, &q, &p, &cache, &cache]).is_ok());
    // 8 columns are not 3 heads; a cache not whole sequences of 4; more new rows a sequence
    // than the cache holds; a cache of another width; positions of another length; NaN scale.
    let three = CachedAttention { heads: 3, ..kernel };
    assert!(run(&three, [&q, &q, &q, &p, &cache, &cache]).is_err());
    let ragged = t(6, 8);
    assert!(run(&kernel, [&q, &q, &q, &p, &ragged, &ragged]).is_err());
    let (many, many_p) = (t(10, 8), pos(10));
    assert!(run(&kernel, [&many, &many, &many, &many_p, &cache, &cache]).is_err());
    let narrow = t(8, 4);
    assert!(run(&kernel, [&q, &q, &q, &p, &narrow, &narrow]).is_err());
    assert!(run(&kernel, [&q, &q, &q, &pos(3), &cache, &cache]).is_err());
    let nan = CachedAttention {
        scale: f32::NAN,
        ..kernel
    };
    assert!(run(&nan, [&q, &q, &q, &p, &cache, &cache]).is_err());
    // Positions that are not consecutive, or run past the cache, are refused on the host.
    use gangway::kernels::cached_attention::check_positions;
    assert!(check_positions(&[0, 1, 2, 3], 2, 4).is_ok());
    assert!(check_positions(&[0, 2], 1, 4).is_err());
    assert!(check_positions(&[3, 4], 1, 4).is_err());
    assert!(check_positions(&[0, 1, 2], 2, 4).is_err());
}
