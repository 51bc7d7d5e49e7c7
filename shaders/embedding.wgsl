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
// Each invocation sums 4 columns of one id (edge columns read clamped, never written), so the
// scan of every position's id, which is most of the work, runs once per 4 columns instead of
// once per column; each output still adds its positions in ascending order.
@compute @workgroup_size(256)
fn embed_grad(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = index(gid, groups);
    let tiles = (p.cols + 3u) / 4u;
    if (i >= p.experts * tiles) { return; }
    let v = i / tiles;
    let j = (i % tiles) * 4u;
    let last = p.cols - 1u;
    let js = vec4<u32>(j, min(j + 1u, last), min(j + 2u, last), min(j + 3u, last));
    var acc = vec4<f32>(0.0);
    for (var q = 0u; q < p.rows * p.context; q++) {
        if (ctx[q] == v) {
            let at = q * p.cols;
            acc += vec4<f32>(
                d_embedded[at + js.x], d_embedded[at + js.y],
                d_embedded[at + js.z], d_embedded[at + js.w]
            );
        }
    }
    let out = v * p.cols + j;
    d_table[out] = acc.x;
    if (j + 1u < p.cols) { d_table[out + 1u] = acc.y; }
    if (j + 2u < p.cols) { d_table[out + 2u] = acc.z; }
    if (j + 3u < p.cols) { d_table[out + 3u] = acc.w; }
}
