// What the flat f32 kernels share (embedding, loss, optim, the backward of dispatch/combine and of
// the router, the expert weight gradient): one parameter block, the routing's records, and a 2-D
// grid of 256-thread workgroups (so that long arrays fit under the per-dimension workgroup limit)
// folded back into one index (`embed_grad` alone runs 64-thread workgroups, one per block of ids,
// over the same grid of workgroups). Put before each of those shaders' sources (WGSL has no
// includes).
//
// Each entry point's auto layout holds exactly the bindings it names. The bindings declared here
// mean the same in every shader; beyond them a number may mean different things in different
// shaders (28: the loss's values, the expert gradient's limits), each compiled alone. No float
// atomics: every output element has one writer.

struct Params {
    rows: u32,      // tokens (T), or elements (adam), or rows of a row-wise op
    cols: u32,      // row width: d_e, d, V or E
    context: u32,   // embed: C
    k: u32,         // router choices per token; expert_weight_grad: live-count stride (0: none)
    capacity: u32,  // slots per expert; expert_weight_grad: rows per summed block (0: all)
    experts: u32,   // embed_grad: V; expert_weight_grad: groups
    normalize: u32, // router_backward: 1 when top-2 gates were renormalised
    inner: u32,     // expert_weight_grad: K of the per-group A^T B (columns of A)
    alpha: f32,     // aux loss weight; cross_entropy: gradient scale 1/T; adam: gradient scale
    z_loss: f32,
    lr: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    bias1: f32,     // 1 / (1 - beta1^step)
    bias2: f32,     // 1 / (1 - beta2^step)
}

struct Route {
    expert: u32,
    position: u32,
    gate: f32,
    kept: u32,
}

struct ExpertStat {
    kept: u32,
    demand: u32,
    fraction: f32,
    mean_prob: f32,
}

@group(0) @binding(0) var<uniform> p: Params;

const WG: u32 = 256u;

fn index(gid: vec3<u32>, groups: vec3<u32>) -> u32 {
    return gid.x + gid.y * groups.x * WG;
}

// Rows of `cols` logits: what the loss and the router's backward read.
@group(0) @binding(6) var<storage, read> logits: array<f32>;

fn row_max(row: u32) -> f32 {
    var m = logits[row * p.cols];
    for (var j = 1u; j < p.cols; j++) { m = max(m, logits[row * p.cols + j]); }
    return m;
}
