// Optimizer steps and gradient accumulation, in place (src/kernels/optim.rs): Adam, SGD and
// `param += grad`. Follows flat_common.wgsl.

struct Params {
    len: u32,   // elements updated
    lr: f32,
    beta1: f32, // adam
    beta2: f32,
    eps: f32,
    scale: f32, // adam: the gradient is read as grad * scale
    bias1: f32, // adam: 1 / (1 - beta1^step), written at run time
    bias2: f32, // adam: 1 / (1 - beta2^step)
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(23) var<storage, read_write> param: array<f32>;
@group(0) @binding(24) var<storage, read_write> m1: array<f32>;
@group(0) @binding(25) var<storage, read_write> m2: array<f32>;
@group(0) @binding(26) var<storage, read> grad: array<f32>;

// One bias-corrected Adam step, in place: m1, m2 the first and second moments; the gradient is
// read as grad * scale (1 for a plain step, 1/G for a step averaged over G routing groups).
@compute @workgroup_size(256)
fn adam(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = index(gid, groups);
    if (i >= p.len) { return; }
    let g = grad[i] * p.scale;
    let m = p.beta1 * m1[i] + (1.0 - p.beta1) * g;
    let v = p.beta2 * m2[i] + (1.0 - p.beta2) * g * g;
    m1[i] = m;
    m2[i] = v;
    param[i] = param[i] - p.lr * (m * p.bias1) / (sqrt(v * p.bias2) + p.eps);
}

// param -= lr * grad: one SGD step.
@compute @workgroup_size(256)
fn sgd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = index(gid, groups);
    if (i >= p.len) { return; }
    param[i] = param[i] - p.lr * grad[i];
}

// param += grad: gradient accumulation over microbatches (or routing groups).
@compute @workgroup_size(256)
fn accumulate(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = index(gid, groups);
    if (i >= p.len) { return; }
    param[i] = param[i] + grad[i];
}
