// Losses (src/kernels/loss.rs): cross-entropy with its gradient, the row logsumexp the router's
// z-loss needs, and the mean squared error's gradient. Follows flat_common.wgsl (which declares
// `logits` and `row_max`).

struct Params {
    rows: u32,  // rows of logits (cross_entropy, row_logsumexp), or values (mse_grad)
    cols: u32,  // row width
    alpha: f32, // gradient scale: 1/T (cross_entropy), 2/n (mse_grad)
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(7) var<storage, read> targets: array<u32>;
@group(0) @binding(8) var<storage, read_write> row_out: array<f32>;
@group(0) @binding(9) var<storage, read_write> d_logits: array<f32>;
// mse_grad
@group(0) @binding(28) var<storage, read> values: array<f32>;
@group(0) @binding(29) var<storage, read> wanted: array<f32>;
@group(0) @binding(30) var<storage, read_write> d_values: array<f32>;

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
    let m = row_max(t, p.cols);
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
