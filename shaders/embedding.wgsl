// The byte embedding of context windows and its gradient (src/kernels/embedding.rs). Follows
// flat_common.wgsl.

@group(0) @binding(1) var<storage, read> ctx: array<u32>;
@group(0) @binding(2) var<storage, read> table: array<f32>;
@group(0) @binding(3) var<storage, read_write> embedded: array<f32>;
@group(0) @binding(4) var<storage, read> d_embedded: array<f32>;
@group(0) @binding(5) var<storage, read_write> d_table: array<f32>;

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
