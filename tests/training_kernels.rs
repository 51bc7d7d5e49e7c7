//! The training kernels beside matmul (embedding, losses, optimizers, the backwards of the router,
//! dispatch/combine and relu, the expert weight gradient) against their plain-Rust references on
//! every adapter, at sizes that are not multiples of the 256-thread workgroup, and their typed
//! errors on bad input.
#![allow(clippy::unwrap_used)]

mod common;
#[path = "training_kernels/weight_grads.rs"]
mod weight_grads;

use common::{Adapters, assert_close, case};
use gangway::kernels::elementwise::{self, ElementwiseOp};
use gangway::kernels::loss::mse_grad_reference;
use gangway::kernels::optim::{AdamConfig, accumulate_reference, sgd_reference};
use gangway::kernels::router::{self, RouterConfig, RouterLoss};
use gangway::kernels::{
    Accumulate, CombineBackwardSlots, CrossEntropy, CrossEntropyPack, DispatchBackward,
    EmbedGather, EmbedGrad, ExpertWeightGrad, GateGrad, Kernel, MseGrad, Router, RouterBackward,
    RowLogsumexp, Sgd, TensorType, WeightGradPair, eager, embedding, expert_grad, loss,
    moe_dispatch, optim,
};
use gangway::{DType, Device, Error, Rng, Tensor};
use weight_grads::{
    a_weight_grad_pair_gives_the_vec4_products_bits,
    expert_weight_grad_in_blocks_equals_accumulating_each_block,
    expert_weight_grad_matches_the_reference,
    expert_weight_grad_skips_rows_past_each_blocks_live_count,
    paired_expert_weight_grads_give_each_products_bits,
};

fn main() -> std::process::ExitCode {
    common::run(vec![
        case!(device: embedding_gather_and_grad_match_the_reference),
        case!(device: cross_entropy_and_logsumexp_match_the_reference),
        case!(device: cross_entropy_ignores_rows_whose_target_is_out_of_range),
        case!(device: cross_entropy_pack_gives_the_losses_bits_then_the_inputs_words),
        case!(device: moe_backward_kernels_match_the_reference),
        case!(device: expert_weight_grad_matches_the_reference),
        case!(device: expert_weight_grad_in_blocks_equals_accumulating_each_block),
        case!(device: expert_weight_grad_skips_rows_past_each_blocks_live_count),
        case!(device: paired_expert_weight_grads_give_each_products_bits),
        case!(device: a_weight_grad_pair_gives_the_vec4_products_bits),
        case!(device: adam_matches_the_reference_over_several_steps),
        case!(device: adam_node_scales_the_gradient_with_the_bits_of_a_scaling_kernel),
        case!(device: one_adam_node_over_many_tensors_gives_each_tensors_bits),
        case!(adapters: bad_inputs_are_typed_errors),
        case!(device: flat_updates_match_their_references),
        case!(adapters: bad_flat_updates_are_errors),
    ])
}

// The kernels as this file calls them: each is its `Kernel` type, run now (`eager`).

fn embed_gather(contexts: &Tensor, table: &Tensor) -> gangway::Result<Tensor> {
    eager::run_one(&EmbedGather, &[contexts, table])
}

fn embed_grad(contexts: &Tensor, d_x: &Tensor, vocab: usize) -> gangway::Result<Tensor> {
    eager::run_one(&EmbedGrad::one(vocab), &[contexts, d_x])
}

struct CrossEntropyOut {
    loss: Tensor,
    d_logits: Tensor,
}

fn cross_entropy(logits: &Tensor, targets: &Tensor) -> gangway::Result<CrossEntropyOut> {
    let [loss, d_logits] = eager::run_n(&CrossEntropy, &[logits, targets])?;
    Ok(CrossEntropyOut { loss, d_logits })
}

fn row_logsumexp(x: &Tensor) -> gangway::Result<Tensor> {
    eager::run_one(&RowLogsumexp, &[x])
}

fn expert_weight_grad(
    a: &Tensor,
    b: &Tensor,
    offsets: &[u32],
    block: usize,
) -> gangway::Result<Tensor> {
    let kernel = ExpertWeightGrad {
        offsets: offsets.to_vec(),
        block,
        limits: None,
        axis: None,
        paired: false,
    };
    eager::run_one(&kernel, &[a, b])
}

/// A routing on the device: the router's settings and the three of its outputs the routed
/// kernels take as their last inputs.
struct Routing {
    cfg: RouterConfig,
    outputs: [Tensor; 3],
}

impl Routing {
    /// `first`, then the routing.
    fn after<'a>(&'a self, first: &[&'a Tensor]) -> Vec<&'a Tensor> {
        first.iter().copied().chain(&self.outputs).collect()
    }
}

fn route(logits: &Tensor, cfg: RouterConfig) -> gangway::Result<Routing> {
    let [probs, routes, stats, _lse] = eager::run_n(&Router(cfg), &[logits])?;
    Ok(Routing {
        cfg,
        outputs: [probs, routes, stats],
    })
}

fn gate_grad(dy: &Tensor, slots: &Tensor, r: &Routing) -> gangway::Result<Tensor> {
    eager::run_one(&GateGrad(r.cfg), &r.after(&[dy, slots]))
}

fn combine_backward_slots(dy: &Tensor, r: &Routing) -> gangway::Result<Tensor> {
    eager::run_one(&CombineBackwardSlots(r.cfg), &r.after(&[dy]))
}

fn dispatch_backward(d_slots: &Tensor, r: &Routing) -> gangway::Result<Tensor> {
    eager::run_one(&DispatchBackward(r.cfg), &r.after(&[d_slots]))
}

fn router_backward(
    logits: &Tensor,
    d_gate: &Tensor,
    r: &Routing,
    loss: RouterLoss,
) -> gangway::Result<Tensor> {
    eager::run_one(&RouterBackward(r.cfg, loss), &r.after(&[logits, d_gate]))
}

/// One Adam step (`step` from 1) in place, its bias corrections given as the node takes them.
fn adam_step(
    p: &Tensor,
    m: &Tensor,
    v: &Tensor,
    g: &Tensor,
    cfg: AdamConfig,
    step: u32,
) -> gangway::Result<()> {
    let (b1, b2) = cfg.bias(step);
    let bias = Tensor::from_f32(p.device(), &[2], DType::F32, &[b1, b2])?;
    eager::run(&optim::Adam::new(cfg), &[p, m, v, g, &bias]).map(drop)
}

/// Eleven tensors of uneven lengths (none a multiple of the 256-thread workgroup, one of a single
/// element) stepped three times by one Adam node (more tensors than one launch takes on any
/// adapter: two launches on lavapipe's 32 storage buffers, three on GL's 16) give, bit for bit,
/// what one node per tensor gives, and the reference's values.
fn one_adam_node_over_many_tensors_gives_each_tensors_bits(device: &Device) {
    let mut rng = Rng::new(23);
    let lens = [1usize, 300, 17, 257, 64, 999, 3, 511, 1025, 40, 129];
    let up = |host: &[f32]| Tensor::from_f32(device, &[host.len()], DType::F32, host).unwrap();
    let cfg = AdamConfig::new(0.01);
    let scale = 0.25;
    let start: Vec<[Vec<f32>; 3]> = lens
        .iter()
        .map(|&n| {
            [
                rng.vec(n),
                rng.vec(n).iter().map(|x| x * 0.1).collect(),
                rng.vec(n).iter().map(|x| x * x).collect(),
            ]
        })
        .collect();
    let state = || -> Vec<[Tensor; 3]> {
        start
            .iter()
            .map(|t| [up(&t[0]), up(&t[1]), up(&t[2])])
            .collect()
    };
    let (together, apart) = (state(), state());
    let mut reference = start.clone();
    for step in 1..=3u32 {
        let (b1, b2) = cfg.bias(step);
        let bias = up(&[b1, b2]);
        let grads: Vec<Vec<f32>> = lens.iter().map(|&n| rng.vec(n)).collect();
        let g: Vec<Tensor> = grads.iter().map(|g| up(g)).collect();
        let node = |tensors| optim::Adam {
            config: cfg,
            grad_scale: scale,
            tensors,
        };
        let mut inputs: Vec<&Tensor> = Vec::new();
        for (t, g) in together.iter().zip(&g) {
            inputs.extend([&t[0], &t[1], &t[2], g]);
        }
        inputs.push(&bias);
        eager::run(&node(lens.len()), &inputs).unwrap();
        for (t, g) in apart.iter().zip(&g) {
            eager::run(&node(1), &[&t[0], &t[1], &t[2], g, &bias]).unwrap();
        }
        for (r, g) in reference.iter_mut().zip(&grads) {
            let g: Vec<f32> = g.iter().map(|x| x * scale).collect();
            let [p, m, v] = r;
            optim::adam_reference(p, m, v, &g, cfg, step).unwrap();
        }
    }
    for (i, ((a, b), r)) in together.iter().zip(&apart).zip(&reference).enumerate() {
        for (k, name) in ["param", "m", "v"].into_iter().enumerate() {
            let (x, y) = (a[k].to_f32().unwrap(), b[k].to_f32().unwrap());
            let same = x.iter().zip(&y).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same, "on {}: tensor {i}'s {name} differs", device.label());
            assert_close(&format!("tensor {i}'s {name}"), &x, &r[k], 1e-5);
        }
    }
    // A node's tensors are its own: the wrong count of inputs is a typed error.
    let t = &together[0];
    let two = optim::Adam::new(cfg);
    let bias = up(&[1.0, 1.0]);
    let wrong = eager::run(
        &optim::Adam { tensors: 2, ..two },
        &[&t[0], &t[1], &t[2], &g_of(&t[0]), &bias],
    );
    assert!(
        matches!(wrong, Err(Error::InvalidArgument { .. })),
        "{wrong:?}"
    );
}

/// A gradient shaped like `t`, zero.
fn g_of(t: &Tensor) -> Tensor {
    Tensor::zeros(t.device(), t.shape(), DType::F32).unwrap()
}

fn elementwise(op: ElementwiseOp, x: &Tensor, z: &Tensor) -> gangway::Result<Tensor> {
    eager::run_one(&op, &[x, z])
}

fn mse_grad(y: &Tensor, target: &Tensor) -> gangway::Result<Tensor> {
    eager::run_one(&MseGrad, &[y, target])
}

fn accumulate(acc: &Tensor, x: &Tensor) -> gangway::Result<()> {
    eager::run(&Accumulate, &[acc, x]).map(drop)
}

fn sgd(w: &Tensor, g: &Tensor, lr: f32) -> gangway::Result<()> {
    eager::run(&Sgd { lr }, &[w, g]).map(drop)
}

fn up(device: &Device, shape: &[usize], data: &[f32]) -> Tensor {
    Tensor::from_f32(device, shape, DType::F32, data).unwrap()
}

fn ids(rng: &mut Rng, n: usize, bound: usize) -> Vec<u32> {
    (0..n).map(|_| rng.below(bound) as u32).collect()
}

fn embedding_gather_and_grad_match_the_reference(device: &Device) {
    // The last case has more positions than the gradient's tile (1024), a vocabulary that is
    // not a multiple of its id block (8), and about 160 positions per id.
    for (t, c, e, v) in [
        (1, 1, 1, 256),
        (37, 3, 5, 256),
        (130, 4, 7, 256),
        (300, 7, 5, 13),
    ] {
        let mut rng = Rng::new((t * c * e) as u64);
        let ctx = ids(&mut rng, t * c, v);
        let table = rng.vec(v * e);
        let ctx_t = Tensor::from_u32(device, &[t, c], &ctx).unwrap();
        let x = embed_gather(&ctx_t, &up(device, &[v, e], &table)).unwrap();
        assert_eq!(x.shape(), &[t, c * e]);
        let want = embedding::embed_gather_reference(&ctx, &table, e).unwrap();
        assert_close("embed_gather", &x.to_f32().unwrap(), &want, 0.0);

        // A second table's rows added (a token's and its position's embedding), in one launch:
        // the bits of the two gathers and an add.
        let ctx2 = ids(&mut rng, t * c, v.min(11));
        let table2 = rng.vec(v.min(11) * e);
        let ctx2_t = Tensor::from_u32(device, &[t, c], &ctx2).unwrap();
        let table_t = up(device, &[v, e], &table);
        let table2_t = up(device, &[v.min(11), e], &table2);
        let sum = eager::run_one(&EmbedGather, &[&ctx_t, &table_t, &ctx2_t, &table2_t]).unwrap();
        let want =
            embedding::embed_gather_sum_reference((&ctx, &table), (&ctx2, &table2), e).unwrap();
        assert_close("embed_gather_sum", &sum.to_f32().unwrap(), &want, 0.0);

        // Each output adds its positions in ascending order from zero, as the reference does:
        // the same bits.
        let dx = rng.vec(t * c * e);
        let got = embed_grad(&ctx_t, &up(device, &[t, c * e], &dx), v).unwrap();
        let want = embedding::embed_grad_reference(&ctx, &dx, v, e).unwrap();
        assert_close("embed_grad", &got.to_f32().unwrap(), &want, 0.0);

        // With second ids, both tables' gradients in one launch, each with its own bits.
        let pair = EmbedGrad {
            vocab: v,
            second: Some(v.min(11)),
        };
        let dx_t = up(device, &[t, c * e], &dx);
        let [g1, g2] = eager::run_n(&pair, &[&ctx_t, &dx_t, &ctx2_t]).unwrap();
        assert_close("embed_grad pair, first", &g1.to_f32().unwrap(), &want, 0.0);
        let want2 = embedding::embed_grad_reference(&ctx2, &dx, v.min(11), e).unwrap();
        assert_close(
            "embed_grad pair, second",
            &g2.to_f32().unwrap(),
            &want2,
            0.0,
        );
    }
}

fn cross_entropy_and_logsumexp_match_the_reference(device: &Device) {
    for (t, v) in [(1, 256), (37, 256), (300, 256), (9, 3)] {
        let mut rng = Rng::new(t as u64);
        // Large logits: the stable form must not overflow.
        let logits: Vec<f32> = rng.vec(t * v).iter().map(|x| x * 40.0).collect();
        let targets = ids(&mut rng, t, v);
        let got = cross_entropy(
            &up(device, &[t, v], &logits),
            &Tensor::from_u32(device, &[t], &targets).unwrap(),
        )
        .unwrap();
        let (loss, grad) = loss::cross_entropy_reference(&logits, &targets, v).unwrap();
        assert_close("ce loss", &got.loss.to_f32().unwrap(), &loss, 1e-5);
        assert_close("ce grad", &got.d_logits.to_f32().unwrap(), &grad, 1e-6);
        assert!(loss.iter().all(|l| l.is_finite() && *l >= 0.0));

        let lse = row_logsumexp(&up(device, &[t, v], &logits)).unwrap();
        let want = loss::row_logsumexp_reference(&logits, v);
        assert_close("logsumexp", &lse.to_f32().unwrap(), &want, 1e-5);
    }
}

fn cross_entropy_ignores_rows_whose_target_is_out_of_range(device: &Device) {
    let logits = up(device, &[2, 3], &[1.0, 2.0, 3.0, 1.0, 2.0, 3.0]);
    let targets = Tensor::from_u32(device, &[2], &[1, 3]).unwrap();
    let got = cross_entropy(&logits, &targets).unwrap();
    let loss = got.loss.to_f32().unwrap();
    assert!(loss[0] > 0.0 && loss[1] == 0.0);
    assert_eq!(&got.d_logits.to_f32().unwrap()[3..], &[0.0; 3]);
    assert!(loss::cross_entropy_reference(&[0.0; 3], &[3], 3).is_err());
}

/// The loss that writes the statistics pack: its row losses and gradient are the plain loss's,
/// bit for bit, followed by each packed input's words as they are, for 0 to 4 inputs (one longer
/// than the grid, so its threads copy more than a word each), at rows past one workgroup and
/// none; more inputs, or 2-byte ones, are errors.
fn cross_entropy_pack_gives_the_losses_bits_then_the_inputs_words(device: &Device) {
    let mut rng = Rng::new(11);
    let extras: Vec<Vec<u32>> = [5, 1000, 3, 17]
        .iter()
        .map(|&n| {
            (0..n)
                .map(|_| rng.below(u32::MAX as usize) as u32)
                .collect()
        })
        .collect();
    let extra_tensors: Vec<Tensor> = extras
        .iter()
        .map(|w| Tensor::from_u32(device, &[w.len()], w).unwrap())
        .collect();
    for (t, v, n) in [(300, 7, 4), (37, 256, 2), (1, 3, 0), (9, 3, 1)] {
        let logits_host: Vec<f32> = rng.vec(t * v).iter().map(|x| x * 10.0).collect();
        let logits = up(device, &[t, v], &logits_host);
        let targets = Tensor::from_u32(device, &[t], &ids(&mut rng, t, v)).unwrap();
        let plain = cross_entropy(&logits, &targets).unwrap();
        let mut inputs = vec![&logits, &targets];
        inputs.extend(&extra_tensors[..n]);
        let [pack, d_logits] = eager::run_n(&CrossEntropyPack, &inputs).unwrap();
        let mut want: Vec<u32> = plain
            .loss
            .to_f32()
            .unwrap()
            .iter()
            .map(|l| l.to_bits())
            .collect();
        for w in &extras[..n] {
            want.extend(w);
        }
        assert_eq!(pack.dtype(), DType::U32);
        assert_eq!(pack.to_u32().unwrap(), want, "T={t} V={v}, {n} inputs");
        let bits =
            |x: &Tensor| -> Vec<u32> { x.to_f32().unwrap().iter().map(|g| g.to_bits()).collect() };
        assert_eq!(bits(&d_logits), bits(&plain.d_logits), "T={t} V={v}");
    }
    // No rows: the pack is the inputs' words.
    let logits = Tensor::zeros(device, &[0, 4], DType::F32).unwrap();
    let targets = Tensor::zeros(device, &[0], DType::U32).unwrap();
    let [pack, _] =
        eager::run_n(&CrossEntropyPack, &[&logits, &targets, &extra_tensors[0]]).unwrap();
    assert_eq!(pack.to_u32().unwrap(), extras[0]);

    let logits = up(device, &[2, 3], &[1.0; 6]);
    let targets = Tensor::from_u32(device, &[2], &[0, 1]).unwrap();
    let mut five = vec![&logits, &targets];
    five.extend(&extra_tensors);
    five.push(&extra_tensors[0]);
    let err = eager::run_n::<2>(&CrossEntropyPack, &five).unwrap_err();
    assert!(err.to_string().contains("at most 4"), "{err}");
    // A 2-byte input is refused by type, on any device.
    let err = CrossEntropyPack
        .outputs(&[
            TensorType::f32(&[2, 3]),
            TensorType::new(DType::U32, &[2]),
            TensorType::new(DType::F16, &[4]),
        ])
        .unwrap_err();
    assert!(err.to_string().contains("4-byte"), "{err}");
}

/// Routes random logits with the reference router, then checks every routing-driven kernel.
fn check_moe_backward(device: &Device, tokens: usize, cfg: RouterConfig, d: usize, gpu: bool) {
    let label = format!("{cfg:?} T={tokens} d={d} on {}", device.label());
    let mut rng = Rng::new(tokens as u64 * 31 + d as u64);
    let logits: Vec<f32> = rng
        .vec(tokens * cfg.experts)
        .iter()
        .map(|x| x * 3.0)
        .collect();
    let want = router::reference(&logits, tokens, cfg).unwrap();
    let logits_t = up(device, &[tokens, cfg.experts], &logits);
    let routing = if gpu {
        route(&logits_t, cfg).unwrap()
    } else {
        let outputs = router::upload_routing(device, &want, tokens, cfg).unwrap();
        Routing { cfg, outputs }
    };
    let cap = want.capacity;
    let rows = cfg.experts * cap;
    let dy = rng.vec(tokens * d);
    let slots = rng.vec(rows * d);
    let dy_t = up(device, &[tokens, d], &dy);

    let d_gate = gate_grad(&dy_t, &up(device, &[rows, d], &slots), &routing).unwrap();
    let want_gate = moe_dispatch::gate_grad_reference(&dy, &slots, &want.routes, cfg.k, cap, d);
    assert_close(
        &format!("gate_grad {label}"),
        &d_gate.to_f32().unwrap(),
        &want_gate,
        1e-5,
    );

    let d_slots = combine_backward_slots(&dy_t, &routing).unwrap();
    let want_slots = moe_dispatch::combine_backward_slots_reference(
        &dy,
        &want.routes,
        cfg.k,
        cfg.experts,
        cap,
        d,
    );
    assert_close(
        &format!("combine_backward_slots {label}"),
        &d_slots.to_f32().unwrap(),
        &want_slots,
        1e-6,
    );

    let d_x = dispatch_backward(&up(device, &[rows, d], &slots), &routing).unwrap();
    let want_x =
        moe_dispatch::dispatch_backward_reference(&slots, &want.routes, tokens, cfg.k, cap, d);
    assert_close(
        &format!("dispatch_backward {label}"),
        &d_x.to_f32().unwrap(),
        &want_x,
        1e-5,
    );
    // With an addend (the residual stream's gradient), the bits of the dispatch backward and
    // then an accumulate into the addend.
    let mut rng = Rng::new(tokens as u64 + 7);
    let addend_host = rng.vec(tokens * d);
    let addend = up(device, &[tokens, d], &addend_host);
    let d_slots_t = up(device, &[rows, d], &slots);
    let mut inputs = routing.after(&[&d_slots_t]);
    inputs.push(&addend);
    let fused = eager::run_one(&DispatchBackward(cfg), &inputs);
    let apart = up(device, &[tokens, d], &addend_host);
    eager::run(&Accumulate, &[&apart, &d_x]).unwrap();
    assert_eq!(
        fused.unwrap().to_f32().unwrap(),
        apart.to_f32().unwrap(),
        "dispatch_backward with an addend {label}"
    );

    let loss = RouterLoss {
        alpha: 0.3,
        z_loss: 0.05,
    };
    let d_r = router_backward(&logits_t, &d_gate, &routing, loss).unwrap();
    let want_r = router::router_backward_reference(
        &logits,
        &want.routes,
        &want.stats,
        &want_gate,
        cfg,
        loss,
    );
    assert_close(
        &format!("router_backward {label}"),
        &d_r.to_f32().unwrap(),
        &want_r,
        1e-5,
    );
    // With the gates' gradients computed in its launch, the bits of gate grad, then the router's
    // backward (d_r above).
    let slots_t = up(device, &[rows, d], &slots);
    let inputs = routing.after(&[&logits_t, &dy_t, &slots_t]);
    let fused = eager::run_one(&RouterBackward(cfg, loss), &inputs).unwrap();
    assert_eq!(
        fused.to_f32().unwrap(),
        d_r.to_f32().unwrap(),
        "router_backward computing the gates' gradients {label}"
    );
}

fn moe_backward_kernels_match_the_reference(device: &Device) {
    eprintln!("training kernels on {}", device.label());
    for (tokens, experts, k, factor, normalize, d) in [
        (1, 2, 1, 1.0, true, 1),
        (45, 5, 1, 1.0, true, 19),
        (45, 5, 2, 1.0, true, 19),
        (45, 5, 2, 1.5, false, 7),
        (300, 7, 2, 0.75, true, 3),
    ] {
        let cfg = RouterConfig {
            experts,
            k,
            capacity_factor: factor,
            normalize_gates: normalize,
        };
        check_moe_backward(device, tokens, cfg, d, false);
    }
    // The real router's buffers (routes and stats) bind as well as uploaded ones.
    let cfg = RouterConfig {
        experts: 4,
        k: 2,
        capacity_factor: 1.0,
        normalize_gates: true,
    };
    check_moe_backward(device, 77, cfg, 11, true);
}

fn adam_matches_the_reference_over_several_steps(device: &Device) {
    for len in [1usize, 257, 1000] {
        let mut rng = Rng::new(len as u64);
        let mut p = rng.vec(len);
        let (mut m, mut v) = (vec![0.0; len], vec![0.0; len]);
        let (pt, mt, vt) = (
            up(device, &[len], &p),
            up(device, &[len], &m),
            up(device, &[len], &v),
        );
        let cfg = AdamConfig::new(0.01);
        for step in 1..=3 {
            let g = rng.vec(len);
            adam_step(&pt, &mt, &vt, &up(device, &[len], &g), cfg, step).unwrap();
            optim::adam_reference(&mut p, &mut m, &mut v, &g, cfg, step).unwrap();
        }
        assert_close("adam param", &pt.to_f32().unwrap(), &p, 1e-5);
        assert_close("adam m", &mt.to_f32().unwrap(), &m, 1e-6);
        assert_close("adam v", &vt.to_f32().unwrap(), &v, 1e-6);
    }
}

/// The training step's Adam node reads `grad · 1/G` itself: it must give the bits of a separate
/// scaling kernel followed by a plain Adam step (which it replaced), and the reference's values.
fn adam_node_scales_the_gradient_with_the_bits_of_a_scaling_kernel(device: &Device) {
    let cfg = AdamConfig::new(0.01);
    for (len, scale) in [(1usize, 0.25f32), (257, 1.0 / 3.0), (1000, 0.125)] {
        let mut rng = Rng::new(len as u64 + 7);
        let p0 = rng.vec(len);
        let (mut p, mut m, mut v) = (p0.clone(), vec![0.0; len], vec![0.0; len]);
        let fused = [
            up(device, &[len], &p0),
            up(device, &[len], &m),
            up(device, &[len], &v),
        ];
        let apart = [
            up(device, &[len], &p0),
            up(device, &[len], &m),
            up(device, &[len], &v),
        ];
        for step in 1..=3u32 {
            let (b1, b2) = cfg.bias(step);
            let bias = up(device, &[2], &[b1, b2]);
            let mut g = rng.vec(len);
            // Exact zeros of both signs, as empty slots and dropped tokens give.
            g[0] = if step == 2 { -0.0 } else { 0.0 };
            let g_t = up(device, &[len], &g);
            let node = optim::Adam {
                config: cfg,
                grad_scale: scale,
                tensors: 1,
            };
            let [f0, f1, f2] = [&fused[0], &fused[1], &fused[2]];
            eager::run(&node, &[f0, f1, f2, &g_t, &bias]).unwrap();
            let affine = ElementwiseOp::Affine {
                scale,
                shift: 0.0,
                repeat: 1,
            };
            let scaled = eager::run_one(&affine, &[&g_t]).unwrap();
            let [a0, a1, a2] = [&apart[0], &apart[1], &apart[2]];
            eager::run(&optim::Adam::new(cfg), &[a0, a1, a2, &scaled, &bias]).unwrap();
            let g_scaled: Vec<f32> = g.iter().map(|&x| x * scale).collect();
            optim::adam_reference(&mut p, &mut m, &mut v, &g_scaled, cfg, step).unwrap();
        }
        for (k, name) in ["param", "m", "v"].into_iter().enumerate() {
            let (f, a) = (fused[k].to_f32().unwrap(), apart[k].to_f32().unwrap());
            let same = f.iter().zip(&a).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(
                same,
                "on {}: the scaled Adam changed {name}'s bits",
                device.label()
            );
        }
        assert_close("scaled adam param", &fused[0].to_f32().unwrap(), &p, 1e-5);
        assert_close("scaled adam v", &fused[2].to_f32().unwrap(), &v, 1e-6);
    }
}

/// On two virtual devices of the adapter: the second is the other device of a device mismatch.
fn bad_inputs_are_typed_errors(adapters: &Adapters) {
    let devices = adapters.mesh(2);
    let device = &devices[0];
    let f = |shape: &[usize]| Tensor::zeros(device, shape, DType::F32).unwrap();
    let u = |shape: &[usize]| Tensor::zeros(device, shape, DType::U32).unwrap();
    let shape_err = |r: gangway::Result<Tensor>| matches!(r, Err(Error::ShapeMismatch { .. }));
    let dtype_err = |r: gangway::Result<Tensor>| matches!(r, Err(Error::DTypeMismatch { .. }));

    assert!(dtype_err(embed_gather(&f(&[4, 2]), &f(&[256, 3]))));
    assert!(shape_err(embed_gather(&u(&[8]), &f(&[256, 3]))));
    assert!(matches!(
        embed_grad(&u(&[4, 2]), &f(&[4, 5]), 256),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(shape_err(embed_grad(&u(&[3, 2]), &f(&[4, 6]), 256)));
    // A second table's gradient wants its ids, shaped as the first's.
    let pair = EmbedGrad {
        vocab: 256,
        second: Some(16),
    };
    let (ids, dx) = (u(&[4, 2]), f(&[4, 6]));
    assert!(matches!(
        eager::run_n::<2>(&pair, &[&ids, &dx]),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(eager::run_n::<2>(&pair, &[&ids, &dx, &u(&[4, 3])]).is_err());
    assert!(dtype_err(
        cross_entropy(&f(&[3, 5]), &f(&[3])).map(|c| c.loss)
    ));
    assert!(shape_err(
        cross_entropy(&f(&[3, 5]), &u(&[4])).map(|c| c.loss)
    ));
    assert!(shape_err(row_logsumexp(&f(&[6]))));
    for offsets in [&[0, 4, 8][..], &[0, 5, 3], &[0], &[]] {
        assert!(matches!(
            expert_weight_grad(&f(&[7, 2]), &f(&[7, 3]), offsets, 0),
            Err(Error::InvalidArgument { .. })
        ));
    }
    assert!(shape_err(expert_weight_grad(
        &f(&[6, 2]),
        &f(&[5, 3]),
        &[0, 3, 6],
        0
    )));

    let cfg = RouterConfig {
        experts: 3,
        k: 2,
        capacity_factor: 1.0,
        normalize_gates: true,
    };
    let logits = f(&[5, 3]);
    let routing = route(&logits, cfg).unwrap();
    assert!(shape_err(gate_grad(&f(&[5, 4]), &f(&[6, 5]), &routing)));
    assert!(shape_err(gate_grad(&f(&[4, 4]), &f(&[6, 4]), &routing)));
    assert!(shape_err(combine_backward_slots(&f(&[6, 4]), &routing)));
    assert!(shape_err(dispatch_backward(&f(&[5, 4]), &routing)));
    assert!(shape_err(router_backward(
        &f(&[5, 4]),
        &f(&[5, 2]),
        &routing,
        RouterLoss {
            alpha: 0.01,
            z_loss: 0.0
        }
    )));
    assert!(matches!(
        router_backward(
            &logits,
            &f(&[5, 2]),
            &routing,
            RouterLoss {
                alpha: f32::NAN,
                z_loss: 0.0
            }
        ),
        Err(Error::InvalidArgument { .. })
    ));

    let (p, m, v, g) = (f(&[4]), f(&[4]), f(&[4]), f(&[4]));
    let cfg = AdamConfig::new(0.1);
    let invalid = |r: gangway::Result<()>| matches!(r, Err(Error::InvalidArgument { .. }));
    let unscalable = optim::Adam {
        config: cfg,
        grad_scale: f32::NAN,
        tensors: 1,
    };
    let bias = Tensor::zeros(device, &[2], DType::F32).unwrap();
    assert!(invalid(
        eager::run(&unscalable, &[&p, &m, &v, &g, &bias]).map(drop)
    ));
    assert!(invalid(adam_step(&p, &m, &m.clone(), &g, cfg, 1)));
    assert!(invalid(adam_step(
        &p,
        &m,
        &v,
        &g,
        AdamConfig::new(f32::INFINITY),
        1
    )));
    assert!(matches!(
        adam_step(&p, &m, &v, &f(&[5]), cfg, 1),
        Err(Error::ShapeMismatch { .. })
    ));
    let g2 = Tensor::zeros(&devices[1], &[4], DType::F32).unwrap();
    assert!(matches!(
        adam_step(&p, &m, &v, &g2, cfg, 1),
        Err(Error::DeviceMismatch { .. })
    ));

    assert!(embedding::embed_gather_reference(&[256], &[0.0; 256 * 2], 2).is_err());
    assert!(embedding::embed_grad_reference(&[1], &[0.0; 3], 256, 2).is_err());
    assert!(
        optim::adam_reference(&mut [0.0], &mut [0.0], &mut [0.0], &[0.0, 1.0], cfg, 1).is_err()
    );
}

/// relu backward, the MSE gradient, accumulation and SGD, at lengths around the workgroup.
fn flat_updates_match_their_references(device: &Device) {
    for len in [1usize, 255, 257, 1000, 70_001] {
        let mut rng = Rng::new(len as u64 + 7);
        let (a, b) = (rng.vec(len), rng.vec(len));
        let up = |v: &[f32]| Tensor::from_f32(device, &[len], DType::F32, v).unwrap();
        let (at, bt) = (up(&a), up(&b));
        let what = |k: &str| format!("{k} len {len} on {}", device.label());

        let got = elementwise(ElementwiseOp::ReluBackward, &bt, &at)
            .unwrap()
            .to_f32()
            .unwrap();
        let want = elementwise::reference(ElementwiseOp::ReluBackward, &b, Some(&a));
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
fn bad_flat_updates_are_errors(adapters: &Adapters) {
    let devices = adapters.mesh(2);
    let device = &devices[0];
    let a = Tensor::from_f32(device, &[4], DType::F32, &[1.0; 4]).unwrap();
    let b = Tensor::from_f32(device, &[5], DType::F32, &[1.0; 5]).unwrap();
    let u = Tensor::from_u32(device, &[4], &[1; 4]).unwrap();
    assert!(matches!(
        elementwise(ElementwiseOp::ReluBackward, &b, &a),
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
