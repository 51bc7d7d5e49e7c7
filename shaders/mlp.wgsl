// The small kernels MLP training needs beside matmul and relu: the relu backward, the MSE loss
// gradient, gradient accumulation and the SGD step. One thread per element; the grid is 2-D so
// arrays past 65535 workgroups fit. Each entry point uses only the bindings it names, and auto
// pipeline layouts hold exactly those.

struct Params {
    len: u32,
    _pad: u32,
    // mse_grad: 2 / n; sgd: the learning rate.
    scale: f32,
    _pad2: f32,
};

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<Elem>;
@group(0) @binding(2) var<storage, read> z: array<Elem>;
@group(0) @binding(3) var<storage, read_write> y: array<Elem>;

const WG: u32 = 256u;

fn index(gid: vec3<u32>, groups: vec3<u32>) -> u32 {
    return gid.x + gid.y * groups.x * WG;
}

// y = x * (z > 0): x the gradient of a relu's output, z the relu's output (or input).
@compute @workgroup_size(256)
fn relu_backward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = index(gid, groups);
    if (i >= p.len) { return; }
    y[i] = select(Elem(0), x[i], z[i] > Elem(0));
}

// y = scale * (x - z) with scale = 2 / n: the gradient of mean((x - z)^2) over n values.
@compute @workgroup_size(256)
fn mse_grad(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = index(gid, groups);
    if (i >= p.len) { return; }
    y[i] = Elem(p.scale) * (x[i] - z[i]);
}

// y += x, in place.
@compute @workgroup_size(256)
fn accumulate(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = index(gid, groups);
    if (i >= p.len) { return; }
    y[i] = y[i] + x[i];
}

// y -= scale * x, in place: the SGD step w -= lr * g.
@compute @workgroup_size(256)
fn sgd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = index(gid, groups);
    if (i >= p.len) { return; }
    y[i] = y[i] - Elem(p.scale) * x[i];
}
