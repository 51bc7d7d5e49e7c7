// Training kernels of the byte-level MoE language model (src/moe) that matmul, relu, add and
// dispatch/combine do not cover: the embedding and its gradient, the cross-entropy loss, the
// backward of combine/dispatch and of the router, per-expert weight gradients and the Adam step.
//
// Every binding number is used by one meaning only, so each entry point's auto layout holds exactly
// the bindings it names. One thread per output element (or row), on a 2-D grid of 256-thread
// workgroups so that long arrays fit under the per-dimension workgroup limit. No float atomics:
// every output element has exactly one writer.

struct Params {
    rows: u32,      // tokens (T), or elements (adam), or rows of a row-wise op
    cols: u32,      // row width: d_e, d, V or E
    context: u32,   // embed: C
    k: u32,         // router choices per token
    capacity: u32,  // slots per expert; expert_weight_grad: rows per summed block (0: all)
    experts: u32,   // embed_grad: V; expert_weight_grad: groups
    normalize: u32, // router_backward: 1 when top-2 gates were renormalised
    inner: u32,     // expert_weight_grad: K of the per-group A^T B (columns of A)
    alpha: f32,     // aux loss weight; cross_entropy: gradient scale 1/T
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
// embed_gather / embed_grad
@group(0) @binding(1) var<storage, read> ctx: array<u32>;
@group(0) @binding(2) var<storage, read> table: array<f32>;
@group(0) @binding(3) var<storage, read_write> embedded: array<f32>;
@group(0) @binding(4) var<storage, read> d_embedded: array<f32>;
@group(0) @binding(5) var<storage, read_write> d_table: array<f32>;
// cross_entropy / row_logsumexp
@group(0) @binding(6) var<storage, read> logits: array<f32>;
@group(0) @binding(7) var<storage, read> targets: array<u32>;
@group(0) @binding(8) var<storage, read_write> row_out: array<f32>;
@group(0) @binding(9) var<storage, read_write> d_logits: array<f32>;
// gate_grad / combine_backward_slots / dispatch_backward / router_backward
@group(0) @binding(10) var<storage, read> routes: array<Route>;
@group(0) @binding(11) var<storage, read> dy: array<f32>;
@group(0) @binding(12) var<storage, read> slots: array<f32>;
@group(0) @binding(13) var<storage, read_write> d_gate: array<f32>;
@group(0) @binding(14) var<storage, read_write> d_slots: array<f32>;
@group(0) @binding(15) var<storage, read> d_slots_in: array<f32>;
@group(0) @binding(16) var<storage, read_write> d_tokens: array<f32>;
@group(0) @binding(17) var<storage, read> d_gate_in: array<f32>;
@group(0) @binding(18) var<storage, read> stats: array<ExpertStat>;
@group(0) @binding(19) var<storage, read_write> d_router: array<f32>;
// expert_weight_grad
@group(0) @binding(20) var<storage, read> wa: array<f32>;
@group(0) @binding(21) var<storage, read> wb: array<f32>;
@group(0) @binding(22) var<storage, read_write> wc: array<f32>;
@group(0) @binding(27) var<storage, read> offsets: array<u32>;
// adam
@group(0) @binding(23) var<storage, read_write> param: array<f32>;
@group(0) @binding(24) var<storage, read_write> m1: array<f32>;
@group(0) @binding(25) var<storage, read_write> m2: array<f32>;
@group(0) @binding(26) var<storage, read> grad: array<f32>;

const WG: u32 = 256u;

fn index(gid: vec3<u32>, groups: vec3<u32>) -> u32 {
    return gid.x + gid.y * groups.x * WG;
}

// x[t, c*d_e + j] = table[ctx[t*C + c], j]; an id past the vocabulary reads as a zero row (the
// host checks ids; a shader cannot report an error).
@compute @workgroup_size(256)
fn embed_gather(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = index(gid, groups);
    if (i >= p.rows * p.context * p.cols) { return; }
    let id = ctx[i / p.cols];
    var v = 0.0;
    if (id < p.experts) { v = table[id * p.cols + i % p.cols]; }
    embedded[i] = v;
}

// d_table[v, j] = sum over positions q with ctx[q] == v of d_embedded[q, j]. Written, not added.
@compute @workgroup_size(256)
fn embed_grad(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = index(gid, groups);
    if (i >= p.experts * p.cols) { return; }
    let v = i / p.cols;
    let j = i % p.cols;
    var acc = 0.0;
    for (var q = 0u; q < p.rows * p.context; q++) {
        if (ctx[q] == v) { acc += d_embedded[q * p.cols + j]; }
    }
    d_table[i] = acc;
}

fn row_max(row: u32) -> f32 {
    var m = logits[row * p.cols];
    for (var j = 1u; j < p.cols; j++) { m = max(m, logits[row * p.cols + j]); }
    return m;
}

// Per row t: loss[t] = logsumexp(logits[t]) - logits[t, y[t]] and
// d_logits[t] = alpha * (softmax(logits[t]) - onehot(y[t])), alpha = 1/T for the mean over rows.
// A target past the row width marks an ignored row: loss 0, gradient 0.
@compute @workgroup_size(256)
fn cross_entropy(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let t = index(gid, groups);
    if (t >= p.rows) { return; }
    let base = t * p.cols;
    let y = targets[t];
    if (y >= p.cols) {
        row_out[t] = 0.0;
        for (var j = 0u; j < p.cols; j++) { d_logits[base + j] = 0.0; }
        return;
    }
    let m = row_max(t);
    var s = 0.0;
    for (var j = 0u; j < p.cols; j++) { s += exp(logits[base + j] - m); }
    row_out[t] = m + log(s) - logits[base + y];
    for (var j = 0u; j < p.cols; j++) {
        let onehot = select(0.0, 1.0, j == y);
        d_logits[base + j] = p.alpha * (exp(logits[base + j] - m) / s - onehot);
    }
}

// out[t] = logsumexp(logits[t]): the router z-loss is z_loss * mean(out^2).
@compute @workgroup_size(256)
fn row_logsumexp(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let t = index(gid, groups);
    if (t >= p.rows) { return; }
    let m = row_max(t);
    var s = 0.0;
    for (var j = 0u; j < p.cols; j++) { s += exp(logits[t * p.cols + j] - m); }
    row_out[t] = m + log(s);
}

fn slot_row(r: Route) -> u32 {
    return r.expert * p.capacity + r.position;
}

// d_gate[t*K + c] = dot(dy[t], slots[slot of (t, c)]) for kept choices, 0 for dropped ones.
@compute @workgroup_size(256)
fn gate_grad(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let tc = index(gid, groups);
    if (tc >= p.rows * p.k) { return; }
    let r = routes[tc];
    var acc = 0.0;
    if (r.kept != 0u) {
        let t = tc / p.k;
        let s = slot_row(r);
        for (var j = 0u; j < p.cols; j++) { acc += dy[t * p.cols + j] * slots[s * p.cols + j]; }
    }
    d_gate[tc] = acc;
}

// d_slots[slot of (t, c)] = gate * dy[t] for kept choices. Each slot has one writer; slots no
// token filled are left alone, so the launcher clears the output first.
@compute @workgroup_size(256)
fn combine_backward_slots(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = index(gid, groups);
    if (i >= p.rows * p.k * p.cols) { return; }
    let tc = i / p.cols;
    let j = i % p.cols;
    let r = routes[tc];
    if (r.kept == 0u) { return; }
    let t = tc / p.k;
    d_slots[slot_row(r) * p.cols + j] = r.gate * dy[t * p.cols + j];
}

// d_tokens[t] = sum over kept choices of d_slots_in[slot of (t, c)]: the backward of dispatch.
@compute @workgroup_size(256)
fn dispatch_backward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = index(gid, groups);
    if (i >= p.rows * p.cols) { return; }
    let t = i / p.cols;
    let j = i % p.cols;
    var acc = 0.0;
    for (var c = 0u; c < p.k; c++) {
        let r = routes[t * p.k + c];
        if (r.kept != 0u) { acc += d_slots_in[slot_row(r) * p.cols + j]; }
    }
    d_tokens[i] = acc;
}

// Per token t, the gradient of the router logits r[t] (cols = E) from
//   the gates: g_c = p[e_c] (times 1/(p[e_1] + p[e_2]) when normalised), kept choices only;
//   the aux loss alpha * E * sum_i f_i * P_i, P_i = mean_t p[t][i] (f_i carries no gradient);
//   the z-loss z_loss * mean_t logsumexp(r[t])^2;
// through the softmax: dr_j = p_j * (dp_j - sum_i p_i dp_i).
@compute @workgroup_size(256)
fn router_backward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let t = index(gid, groups);
    if (t >= p.rows) { return; }
    let base = t * p.cols;
    let m = row_max(t);
    var s = 0.0;
    for (var j = 0u; j < p.cols; j++) { s += exp(logits[base + j] - m); }
    let lse = m + log(s);
    let n = f32(p.rows);
    let aux = p.alpha * f32(p.cols) / n;

    // dp at the chosen experts from the gates.
    let r1 = routes[t * p.k];
    let e1 = r1.expert;
    var e2 = 0u;
    var c1 = 0.0;
    var c2 = 0.0;
    let g1 = select(0.0, d_gate_in[t * p.k], r1.kept != 0u);
    if (p.k == 2u) {
        let r2 = routes[t * p.k + 1u];
        e2 = r2.expert;
        let g2 = select(0.0, d_gate_in[t * p.k + 1u], r2.kept != 0u);
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
    for (var j = 0u; j < p.cols; j++) {
        var dp = aux * stats[j].fraction;
        if (j == e1) { dp += c1; }
        if (p.k == 2u && j == e2) { dp += c2; }
        dot += exp(logits[base + j] - m) / s * dp;
    }
    let z = 2.0 * p.z_loss * lse / n;
    for (var j = 0u; j < p.cols; j++) {
        var dp = aux * stats[j].fraction;
        if (j == e1) { dp += c1; }
        if (p.k == 2u && j == e2) { dp += c2; }
        let pj = exp(logits[base + j] - m) / s;
        d_router[base + j] = pj * (dp - dot) + z * pj;
    }
}

// wc[g] = wa[g]^T * wb[g], where wa[g] and wb[g] are rows offsets[g] .. offsets[g+1] of wa
// [rows, inner] and wb [rows, cols]: the weight gradient of each expert from its own rows (the
// grouped matmul's row groups). Rows past `rows` are never read, whatever the offsets say.
@compute @workgroup_size(256)
fn expert_weight_grad(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = index(gid, groups);
    let per = p.inner * p.cols;
    if (i >= p.experts * per) { return; }
    let g = i / per;
    let a = (i % per) / p.cols;
    let b = i % p.cols;
    // Rows are summed in blocks of `capacity` (0: the whole group as one block), each block's
    // partial sum then added in order: a group made of D devices' slot blocks sums exactly as
    // one device summing each block in its own step and accumulating the steps.
    let start = offsets[g];
    let end = min(offsets[g + 1u], p.rows);
    let block = max(select(end - start, p.capacity, p.capacity > 0u), 1u);
    var acc = 0.0;
    for (var b0 = start; b0 < end; b0 += block) {
        var part = 0.0;
        let stop = min(b0 + block, end);
        for (var r = b0; r < stop; r++) {
            part += wa[r * p.inner + a] * wb[r * p.cols + b];
        }
        acc += part;
    }
    wc[i] = acc;
}

// One bias-corrected Adam step, in place: m1, m2 the first and second moments.
@compute @workgroup_size(256)
fn adam(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = index(gid, groups);
    if (i >= p.rows) { return; }
    let g = grad[i];
    let m = p.beta1 * m1[i] + (1.0 - p.beta1) * g;
    let v = p.beta2 * m2[i] + (1.0 - p.beta2) * g * g;
    m1[i] = m;
    m2[i] = v;
    param[i] = param[i] - p.lr * (m * p.bias1) / (sqrt(v * p.bias2) + p.eps);
}
