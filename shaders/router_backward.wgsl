// The router's backward (src/kernels/router/backward.rs): the gradient of the router logits from
// the gates, the load-balancing aux loss and the z-loss. Follows flat_common.wgsl (which declares
// `logits` and `row_max`).

struct Params {
    tokens: u32,    // T
    experts: u32,   // E, the logits' row width
    k: u32,         // choices per token
    normalize: u32, // 1 when top-2 gates were renormalised
    alpha: f32,     // load-balancing loss weight
    z_loss: f32,    // z-loss weight
    cols: u32,      // d, the token rows' width (gate_router_backward)
    capacity: u32,  // slots per expert (gate_router_backward)
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(10) var<storage, read> routes: array<Route>;
@group(0) @binding(17) var<storage, read> d_gate_in: array<f32>;
@group(0) @binding(18) var<storage, read> stats: array<ExpertStat>;
@group(0) @binding(19) var<storage, read_write> d_router: array<f32>;
// gate_router_backward: the layer output's gradient [T, d] and the experts' outputs [E*capacity, d].
@group(0) @binding(11) var<storage, read> dy: array<f32>;
@group(0) @binding(12) var<storage, read> slots: array<f32>;

// Per token t (router_grad), the gradient of the router logits r[t] (cols = E) from
//   the gates: g_c = p[e_c] (times 1/(p[e_1] + p[e_2]) when normalised), kept choices only;
//   the aux loss alpha * E * sum_i f_i * P_i, P_i = mean_t p[t][i] (f_i carries no gradient);
//   the z-loss z_loss * mean_t logsumexp(r[t])^2;
// through the softmax: dr_j = p_j * (dp_j - sum_i p_i dp_i).
// Token t's row of d_router, given its choices' gate gradients (d_gate[t*K + c]; `gate2` is
// ignored for top-1).
fn router_grad(t: u32, gate1: f32, gate2: f32) {
    let base = t * p.experts;
    let m = row_max(t, p.experts);
    var s = 0.0;
    for (var j = 0u; j < p.experts; j++) { s += exp(logits[base + j] - m); }
    let lse = m + log(s);
    let n = f32(p.tokens);
    let aux = p.alpha * f32(p.experts) / n;

    // dp at the chosen experts from the gates.
    let r1 = routes[t * p.k];
    let e1 = r1.expert;
    var e2 = 0u;
    var c1 = 0.0;
    var c2 = 0.0;
    let g1 = select(0.0, gate1, r1.kept != 0u);
    if (p.k == 2u) {
        let r2 = routes[t * p.k + 1u];
        e2 = r2.expert;
        let g2 = select(0.0, gate2, r2.kept != 0u);
        if (p.normalize != 0u) {
            let p1 = exp(logits[base + e1] - m) / s;
            let p2 = exp(logits[base + e2] - m) / s;
            let sum = p1 + p2;
            c1 = p2 * (g1 - g2) / (sum * sum);
            c2 = p1 * (g2 - g1) / (sum * sum);
        } else {
            c1 = g1;
            c2 = g2;
        }
    } else {
        c1 = g1;
    }

    var dot = 0.0;
    for (var j = 0u; j < p.experts; j++) {
        var dp = aux * stats[j].fraction;
        if (j == e1) { dp += c1; }
        if (p.k == 2u && j == e2) { dp += c2; }
        dot += exp(logits[base + j] - m) / s * dp;
    }
    let z = 2.0 * p.z_loss * lse / n;
    for (var j = 0u; j < p.experts; j++) {
        var dp = aux * stats[j].fraction;
        if (j == e1) { dp += c1; }
        if (p.k == 2u && j == e2) { dp += c2; }
        let pj = exp(logits[base + j] - m) / s;
        d_router[base + j] = pj * (dp - dot) + z * pj;
    }
}

@compute @workgroup_size(256)
fn router_backward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let t = index(gid, groups);
    if (t >= p.tokens) { return; }
    var gate2 = 0.0;
    if (p.k == 2u) { gate2 = d_gate_in[t * 2u + 1u]; }
    router_grad(t, d_gate_in[t * p.k], gate2);
}

// moe_dispatch_backward.wgsl's gate_grad of choice tc, in its order: dot(dy[t], slots[slot]) for
// a kept choice, 0 for a dropped one.
fn gate_grad_of(tc: u32) -> f32 {
    let r = routes[tc];
    var acc = 0.0;
    if (r.kept != 0u) {
        let t = tc / p.k;
        let s = r.expert * p.capacity + r.position;
        for (var j = 0u; j < p.cols; j++) { acc += dy[t * p.cols + j] * slots[s * p.cols + j]; }
    }
    return acc;
}

// The gates' gradients and the router's backward in one launch: token t's gate gradients stay in
// registers instead of a [T, K] array another launch writes.
@compute @workgroup_size(256)
fn gate_router_backward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let t = index(gid, groups);
    if (t >= p.tokens) { return; }
    var gate2 = 0.0;
    if (p.k == 2u) { gate2 = gate_grad_of(t * 2u + 1u); }
    router_grad(t, gate_grad_of(t * p.k), gate2);
}
