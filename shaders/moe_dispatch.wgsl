// Moving tokens between token order and the expert-major layout [experts * capacity, d].
//   dispatch: token t's choice c goes to row expert * capacity + position, if it was kept.
//   combine:  out[t] = sum over kept choices of gate * expert_out[row]; dropped choices add zero
//             (combine_add: plus addend[t]).
// The router's routes decide everything, so both are exact inverses of each other on kept slots.
// dispatch expects its destination cleared, so unfilled capacity slots stay zero.

struct Params {
    tokens: u32,
    k: u32,
    capacity: u32,
    d: u32,
}

struct Route {
    expert: u32,
    position: u32,
    gate: f32,
    kept: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> routes: array<Route>;
@group(0) @binding(2) var<storage, read> src: array<f32>;
@group(0) @binding(3) var<storage, read_write> dst: array<f32>;
@group(0) @binding(4) var<storage, read> addend: array<f32>;

@compute @workgroup_size(64, 1, 1)
fn dispatch(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let col = gid.x;
    if (col >= p.d) {
        return;
    }
    for (var tc = gid.y; tc < p.tokens * p.k; tc += nwg.y) {
        let r = routes[tc];
        if (r.kept != 0u) {
            let t = tc / p.k;
            dst[(r.expert * p.capacity + r.position) * p.d + col] = src[t * p.d + col];
        }
    }
}

// Token t's column col: the sum over its kept choices of gate * expert_out[slot].
fn combined(t: u32, col: u32) -> f32 {
    var acc = 0.0;
    for (var c = 0u; c < p.k; c++) {
        let r = routes[t * p.k + c];
        if (r.kept != 0u) {
            acc += r.gate * src[(r.expert * p.capacity + r.position) * p.d + col];
        }
    }
    return acc;
}

@compute @workgroup_size(64, 1, 1)
fn combine(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let col = gid.x;
    if (col >= p.d) {
        return;
    }
    for (var t = gid.y; t < p.tokens; t += nwg.y) {
        dst[t * p.d + col] = combined(t, col);
    }
}

// combine, added to `addend` (a residual connection) as it stores: the one f32 add a separate
// add kernel would make, in one launch instead of two.
@compute @workgroup_size(64, 1, 1)
fn combine_add(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let col = gid.x;
    if (col >= p.d) {
        return;
    }
    for (var t = gid.y; t < p.tokens; t += nwg.y) {
        dst[t * p.d + col] = addend[t * p.d + col] + combined(t, col);
    }
}
