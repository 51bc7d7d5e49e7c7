// Optimizer steps and gradient accumulation, in place (src/kernels/optim.rs): SGD and
// `param += grad` (Adam is adam.wgsl). Follows flat_common.wgsl.

struct Params {
    len: u32, // elements updated
    lr: f32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(23) var<storage, read_write> param: array<f32>;
@group(0) @binding(26) var<storage, read> grad: array<f32>;

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
