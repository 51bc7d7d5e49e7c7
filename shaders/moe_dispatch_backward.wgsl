// The backward of dispatch and combine (src/kernels/moe_dispatch/backward.rs): the gates'
// gradient, the slots' gradient, and the tokens' gradient from the slots'. Follows
// flat_common.wgsl.

struct Params {
    tokens: u32,   // T
    cols: u32,     // d, row width
    k: u32,        // choices per token
    capacity: u32, // slots per expert
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(10) var<storage, read> routes: array<Route>;
@group(0) @binding(11) var<storage, read> dy: array<f32>;
@group(0) @binding(12) var<storage, read> slots: array<f32>;
@group(0) @binding(13) var<storage, read_write> d_gate: array<f32>;
@group(0) @binding(14) var<storage, read_write> d_slots: array<f32>;
@group(0) @binding(15) var<storage, read> d_slots_in: array<f32>;
@group(0) @binding(16) var<storage, read_write> d_tokens: array<f32>;
@group(0) @binding(17) var<storage, read> d_addend: array<f32>;

fn slot_row(r: Route) -> u32 {
    return r.expert * p.capacity + r.position;
}

// d_gate[t*K + c] = dot(dy[t], slots[slot of (t, c)]) for kept choices, 0 for dropped ones.
@compute @workgroup_size(256)
fn gate_grad(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let tc = index(gid, groups);
    if (tc >= p.tokens * p.k) { return; }
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
    if (i >= p.tokens * p.k * p.cols) { return; }
    let tc = i / p.cols;
    let j = i % p.cols;
    let r = routes[tc];
    if (r.kept == 0u) { return; }
    let t = tc / p.k;
    d_slots[slot_row(r) * p.cols + j] = r.gate * dy[t * p.cols + j];
}

// Token t's column j of the backward of dispatch: the sum over its kept choices of
// d_slots_in[slot of (t, c)].
fn dispatched_back(t: u32, j: u32) -> f32 {
    var acc = 0.0;
    for (var c = 0u; c < p.k; c++) {
        let r = routes[t * p.k + c];
        if (r.kept != 0u) { acc += d_slots_in[slot_row(r) * p.cols + j]; }
    }
    return acc;
}

// d_tokens[t] = the backward of dispatch of token t.
@compute @workgroup_size(256)
fn dispatch_backward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = index(gid, groups);
    if (i >= p.tokens * p.cols) { return; }
    d_tokens[i] = dispatched_back(i / p.cols, i % p.cols);
}

// d_tokens[t] = addend[t] + the backward of dispatch of token t: the gradient reaching the
// same rows by another path, added in this launch (the one f32 add an accumulate would make).
@compute @workgroup_size(256)
fn dispatch_backward_add(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = index(gid, groups);
    if (i >= p.tokens * p.cols) { return; }
    d_tokens[i] = d_addend[i] + dispatched_back(i / p.cols, i % p.cols);
}
