// Losses (src/kernels/loss.rs): cross-entropy with its gradient (also with its row losses at the
// front of a statistics pack), the row logsumexp the router's z-loss needs, and the mean squared
// error's gradient. Follows flat_common.wgsl (which declares `logits` and `row_max`).

struct Params {
    rows: u32,  // rows of logits (cross_entropy, row_logsumexp), or values (mse_grad)
    cols: u32,  // row width
    alpha: f32, // gradient scale: 1/T (cross_entropy), 2/n (mse_grad)
    _pad: u32,
    // cross_entropy_pack: the words of each extra input packed after the row losses (0: none).
    extra_len: vec4<u32>,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(7) var<storage, read> targets: array<u32>;
@group(0) @binding(8) var<storage, read_write> row_out: array<f32>;
@group(0) @binding(9) var<storage, read_write> d_logits: array<f32>;
// cross_entropy_pack: the pack, and the inputs copied into it after the row losses (an absent
// one is bound to the targets, and its length is 0).
@group(0) @binding(10) var<storage, read_write> pack_out: array<u32>;
@group(0) @binding(11) var<storage, read> extra0: array<u32>;
@group(0) @binding(12) var<storage, read> extra1: array<u32>;
@group(0) @binding(13) var<storage, read> extra2: array<u32>;
@group(0) @binding(14) var<storage, read> extra3: array<u32>;
// mse_grad
@group(0) @binding(28) var<storage, read> values: array<f32>;
@group(0) @binding(29) var<storage, read> wanted: array<f32>;
@group(0) @binding(30) var<storage, read_write> d_values: array<f32>;

// Per row t: loss[t] = logsumexp(logits[t]) - logits[t, y[t]] and
// d_logits[t] = alpha * (softmax(logits[t]) - onehot(y[t])), alpha = 1/T for the mean over rows.
// A target past the row width marks an ignored row: loss 0, gradient 0. Writes the row's
// gradient and returns its loss.
fn cross_entropy_row(t: u32) -> f32 {
    let base = t * p.cols;
    let y = targets[t];
    if (y >= p.cols) {
        for (var j = 0u; j < p.cols; j++) { d_logits[base + j] = 0.0; }
        return 0.0;
    }
    let m = row_max(t, p.cols);
    var s = 0.0;
    for (var j = 0u; j < p.cols; j++) { s += exp(logits[base + j] - m); }
    for (var j = 0u; j < p.cols; j++) {
        let onehot = select(0.0, 1.0, j == y);
        d_logits[base + j] = p.alpha * (exp(logits[base + j] - m) / s - onehot);
    }
    return m + log(s) - logits[base + y];
}

@compute @workgroup_size(256)
fn cross_entropy(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let t = index(gid, groups);
    if (t >= p.rows) { return; }
    row_out[t] = cross_entropy_row(t);
}

// cross_entropy, its row losses as the first `rows` words of the pack, then each extra input's
// words: the statistics pack a step reads back, without a copy launch after it. Every thread of
// the grid copies the words at its index, one grid's width apart.
@compute @workgroup_size(256)
fn cross_entropy_pack(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let t = index(gid, groups);
    let stride = groups.x * groups.y * WG;
    var at = p.rows;
    for (var i = t; i < p.extra_len.x; i += stride) { pack_out[at + i] = extra0[i]; }
    at += p.extra_len.x;
    for (var i = t; i < p.extra_len.y; i += stride) { pack_out[at + i] = extra1[i]; }
    at += p.extra_len.y;
    for (var i = t; i < p.extra_len.z; i += stride) { pack_out[at + i] = extra2[i]; }
    at += p.extra_len.z;
    for (var i = t; i < p.extra_len.w; i += stride) { pack_out[at + i] = extra3[i]; }
    if (t >= p.rows) { return; }
    pack_out[t] = bitcast<u32>(cross_entropy_row(t));
}

// out[t] = logsumexp(logits[t]): the router z-loss is z_loss * mean(out^2).
@compute @workgroup_size(256)
fn row_logsumexp(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let t = index(gid, groups);
    if (t >= p.rows) { return; }
    let m = row_max(t, p.cols);
    var s = 0.0;
    for (var j = 0u; j < p.cols; j++) { s += exp(logits[t * p.cols + j] - m); }
    row_out[t] = m + log(s);
}

// d_values = alpha * (values - wanted) over `rows` values, alpha = 2 / n: the gradient of
// mean((values - wanted)^2).
@compute @workgroup_size(256)
fn mse_grad(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = index(gid, groups);
    if (i >= p.rows) { return; }
    d_values[i] = p.alpha * (values[i] - wanted[i]);
}
