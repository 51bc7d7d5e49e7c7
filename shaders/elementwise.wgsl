// Elementwise ops over flat arrays: the small kernels programs chain together (relu and GELU with
// their backwards among them), and the row sum. One thread per element; the grid is 2-D so arrays
// past 65535 workgroups fit.

struct Params {
    len: u32,
    // affine: how many times y = x * scale + shift is applied (a fused chain of computations).
    repeat: u32,
    // sum_rows: how many rows of `len` values are summed.
    rows: u32,
    _pad: u32,
    scale: f32,
    shift: f32,
    _pad2: vec2<f32>,
};

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<Elem>;
@group(0) @binding(2) var<storage, read_write> y: array<Elem>;
@group(0) @binding(3) var<storage, read> z: array<Elem>;

const WG: u32 = 256u;

fn index(gid: vec3<u32>, groups: vec3<u32>) -> u32 {
    return gid.x + gid.y * groups.x * WG;
}

@compute @workgroup_size(256)
fn affine(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = index(gid, groups);
    if (i >= p.len) { return; }
    var v = x[i];
    for (var r = 0u; r < p.repeat; r++) {
        v = v * Elem(p.scale) + Elem(p.shift);
    }
    y[i] = v;
}

@compute @workgroup_size(256)
fn relu(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = index(gid, groups);
    if (i >= p.len) { return; }
    y[i] = max(x[i], Elem(0));
}

// y = z * (x > 0): z is the gradient of a relu's output, x its output (or input: both are positive
// at the same places).
@compute @workgroup_size(256)
fn relu_backward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = index(gid, groups);
    if (i >= p.len) { return; }
    y[i] = select(Elem(0), z[i], x[i] > Elem(0));
}

// GELU (gelu_common.wgsl).
@compute @workgroup_size(256)
fn gelu(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = index(gid, groups);
    if (i >= p.len) { return; }
    y[i] = Elem(gelu_of(f32(x[i])));
}

// y = z * gelu'(x): z is the gradient of GELU's output.
@compute @workgroup_size(256)
fn gelu_backward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = index(gid, groups);
    if (i >= p.len) { return; }
    y[i] = Elem(f32(z[i]) * gelu_grad(f32(x[i])));
}

@compute @workgroup_size(256)
fn add(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = index(gid, groups);
    if (i >= p.len) { return; }
    y[i] = x[i] + z[i];
}

@compute @workgroup_size(256)
fn sum_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = index(gid, groups);
    if (i >= p.len) { return; }
    var acc = Elem(0);
    for (var r = 0u; r < p.rows; r++) {
        acc += x[r * p.len + i];
    }
    y[i] = acc;
}
