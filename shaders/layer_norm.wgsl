// Layer normalisation over the last dimension and its backward:
//   y = (x − mean) · rstd · gamma + beta,   rstd = 1 / sqrt(var + eps)   (biased variance)
// x, y, dy, dx are [R, D]; gamma, beta and their gradients [D]; stats [R, 2] = (mean, rstd).
//
// One thread per row for the forward and dx (mean and variance in two passes, for stability), one
// thread per column for dgamma and dbeta (a sum over the rows in row order), the backward's in one
// launch. Every output element
// has one writer, and every sum runs in a fixed order. A 2-D grid of 256-thread workgroups, folded
// back into one index, so long arrays fit under the per-dimension workgroup limit. Every binding
// number has one meaning, so each entry point's auto layout holds exactly the bindings it names.

struct Params {
    rows: u32,
    cols: u32,
    eps: f32,
    _pad: f32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> gamma: array<f32>;
@group(0) @binding(3) var<storage, read> beta: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<storage, read_write> stats: array<f32>;
@group(0) @binding(6) var<storage, read> stats_in: array<f32>;
@group(0) @binding(7) var<storage, read> dy: array<f32>;
@group(0) @binding(8) var<storage, read_write> dx: array<f32>;
@group(0) @binding(9) var<storage, read_write> d_gamma: array<f32>;
@group(0) @binding(10) var<storage, read_write> d_beta: array<f32>;
@group(0) @binding(11) var<storage, read> addend: array<f32>;

fn index(gid: vec3<u32>, groups: vec3<u32>) -> u32 {
    return gid.x + gid.y * groups.x * 256u;
}

@compute @workgroup_size(256)
fn layer_norm_forward(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
) {
    let r = index(gid, groups);
    if (r >= p.rows) {
        return;
    }
    let base = r * p.cols;
    var sum = 0.0;
    for (var c = 0u; c < p.cols; c++) {
        sum += x[base + c];
    }
    let mean = sum / f32(p.cols);
    var sq = 0.0;
    for (var c = 0u; c < p.cols; c++) {
        let d = x[base + c] - mean;
        sq += d * d;
    }
    let rstd = inverseSqrt(sq / f32(p.cols) + p.eps);
    for (var c = 0u; c < p.cols; c++) {
        y[base + c] = (x[base + c] - mean) * rstd * gamma[c] + beta[c];
    }
    stats[2u * r] = mean;
    stats[2u * r + 1u] = rstd;
}

// dx = rstd · (g − mean(g) − x̂ · mean(g · x̂)),  g = dy · gamma,  x̂ = (x − mean) · rstd.
// Row r's two sums, Σ g and Σ g · x̂.
fn dx_sums(r: u32) -> vec2<f32> {
    let base = r * p.cols;
    let mean = stats_in[2u * r];
    let rstd = stats_in[2u * r + 1u];
    var g_sum = 0.0;
    var gx_sum = 0.0;
    for (var c = 0u; c < p.cols; c++) {
        let g = dy[base + c] * gamma[c];
        g_sum += g;
        gx_sum += g * (x[base + c] - mean) * rstd;
    }
    return vec2<f32>(g_sum, gx_sum);
}

// dx[r, c] from the row's sums.
fn dx_at(r: u32, c: u32, sums: vec2<f32>) -> f32 {
    let at = r * p.cols + c;
    let mean = stats_in[2u * r];
    let rstd = stats_in[2u * r + 1u];
    let n = f32(p.cols);
    let g = dy[at] * gamma[c];
    let xhat = (x[at] - mean) * rstd;
    return rstd * (g - sums.x / n - xhat * sums.y / n);
}

// Row r of dx.
fn dx_row(r: u32) {
    let sums = dx_sums(r);
    for (var c = 0u; c < p.cols; c++) {
        dx[r * p.cols + c] = dx_at(r, c, sums);
    }
}

// Row r of dx + addend: the gradient of a residual branch added to the norm's, in the launch that
// makes the norm's (the one f32 add a separate accumulate would make).
fn dx_row_add(r: u32) {
    let sums = dx_sums(r);
    for (var c = 0u; c < p.cols; c++) {
        let at = r * p.cols + c;
        dx[at] = addend[at] + dx_at(r, c, sums);
    }
}

// d_gamma[c] = Σ_r dy[r, c] · x̂[r, c];  d_beta[c] = Σ_r dy[r, c].
fn params_column(c: u32) {
    var dg = 0.0;
    var db = 0.0;
    for (var r = 0u; r < p.rows; r++) {
        let at = r * p.cols + c;
        dg += dy[at] * (x[at] - stats_in[2u * r]) * stats_in[2u * r + 1u];
        db += dy[at];
    }
    d_gamma[c] = dg;
    d_beta[c] = db;
}

// Thread i ≥ rows of the backward: column i − rows of the parameters' gradients, if there is one.
fn params_after_rows(i: u32) {
    if (i - p.rows < p.cols) { params_column(i - p.rows); }
}

// The whole backward in one launch of rows + cols threads: the first `rows` each write a row of
// dx, the next `cols` each a column of d_gamma and d_beta. Neither reads what the other writes,
// so no barrier is needed between them.
@compute @workgroup_size(256)
fn layer_norm_backward(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
) {
    let i = index(gid, groups);
    if (i < p.rows) { dx_row(i); } else { params_after_rows(i); }
}

// layer_norm_backward with dx + addend.
@compute @workgroup_size(256)
fn layer_norm_backward_add(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
) {
    let i = index(gid, groups);
    if (i < p.rows) { dx_row_add(i); } else { params_after_rows(i); }
}
