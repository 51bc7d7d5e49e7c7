// The byte embedding of context windows and its gradient (src/kernels/embedding.rs). Follows
// flat_common.wgsl.

struct Params {
    rows: u32,    // T, context windows
    context: u32, // C, ids per window
    cols: u32,    // d_e, embedding width
    vocab: u32,   // V, rows of the table
    vocab2: u32,  // rows of the second table (embed_gather_sum, embed_grad)
    pad0: u32,
    pad1: u32,
    pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> ctx: array<u32>;
@group(0) @binding(2) var<storage, read> table: array<f32>;
@group(0) @binding(3) var<storage, read_write> embedded: array<f32>;
@group(0) @binding(4) var<storage, read> d_embedded: array<f32>;
@group(0) @binding(5) var<storage, read_write> d_table: array<f32>;
@group(0) @binding(6) var<storage, read> ctx2: array<u32>;
@group(0) @binding(7) var<storage, read> table2: array<f32>;

// x[t, c*d_e + j] = table[ctx[t*C + c], j]; an id past the vocabulary reads as a zero row (the
// host checks ids; a shader cannot report an error).
@compute @workgroup_size(256)
fn embed_gather(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = index(gid, groups);
    if (i >= p.rows * p.context * p.cols) { return; }
    let id = ctx[i / p.cols];
    var v = 0.0;
    if (id < p.vocab) { v = table[id * p.cols + i % p.cols]; }
    embedded[i] = v;
}

// x[t, c*d_e + j] = table[ctx[t*C + c], j] + table2[ctx2[t*C + c], j]: two embeddings of the
// same positions (a token's and its position's) summed, in one launch instead of three. The sum
// is the one f32 add the separate gathers and add would make, so the bits are theirs.
@compute @workgroup_size(256)
fn embed_gather_sum(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = index(gid, groups);
    if (i >= p.rows * p.context * p.cols) { return; }
    let q = i / p.cols;
    let j = i % p.cols;
    let a = ctx[q];
    let b = ctx2[q];
    var x = 0.0;
    if (a < p.vocab) { x = table[a * p.cols + j]; }
    var y = 0.0;
    if (b < p.vocab2) { y = table2[b * p.cols + j]; }
    embedded[i] = x + y;
}

// d_table[v, j] = sum over positions q with ctx[q] == v of d_embedded[q, j]. Written, not added;
// each output adds its positions in ascending order, from zero.
//
// One workgroup per block of EG_IDS ids. Scanning every position once per id was most of the
// kernel's time (V scans of T·C ids), so a block scans once: tile by tile, its invocations each
// count the block's positions in a contiguous chunk, place them in order in a list, and then the
// owner of each (id, column) output adds that id's rows from the list. The list holds only the
// block's positions, so each output filters EG_IDS ids' worth of them: EG_IDS trades the scans
// (V / EG_IDS of them) against that filtering (EG_IDS per output). At `train moe`'s sizes
// (V = 256, d_e = 16, 2048 positions) 8 ran fastest of 4, 8 and 16, at 0.55x the old kernel.
const EG_WG: u32 = 64u;
const EG_IDS: u32 = 8u;
const EG_TILE: u32 = 1024u;
var<workgroup> eg_counts: array<u32, 64>;
var<workgroup> eg_list: array<u32, 1024>;

// The second table's gradient (ids ctx2, vocab2 rows): written by the same launch, so that a
// token's and its position's embeddings take one launch between them. Bound to the device's
// unused buffer, and ctx2 to ctx, when there is no second table (vocab2 = 0: no block of it).
@group(0) @binding(8) var<storage, read_write> d_table2: array<f32>;

// Position q's id in the first table or the second.
fn eg_id(q: u32, second: bool) -> u32 {
    if (second) { return ctx2[q]; }
    return ctx[q];
}

fn eg_load(at: u32, second: bool) -> f32 {
    if (second) { return d_table2[at]; }
    return d_table[at];
}

fn eg_store(at: u32, v: f32, second: bool) {
    if (second) { d_table2[at] = v; } else { d_table[at] = v; }
}

// Launched over ceil(V / EG_IDS) + ceil(vocab2 / EG_IDS) workgroups folded into a 2-D grid
// (`grid_1d`'s): the first table's blocks, then the second's. Which table, and extra workgroups'
// early return, are the same for a whole workgroup, so the barriers below stay in uniform
// control flow.
@compute @workgroup_size(64)
fn embed_grad(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) i: u32,
) {
    let block = wid.x + wid.y * groups.x;
    let first_blocks = (p.vocab + EG_IDS - 1u) / EG_IDS;
    let second = block >= first_blocks;
    var v0 = block * EG_IDS;
    var vocab = p.vocab;
    if (second) {
        v0 = (block - first_blocks) * EG_IDS;
        vocab = p.vocab2;
    }
    if (v0 >= vocab) { return; }
    let n = p.rows * p.context;
    let cols = p.cols;
    let outputs = EG_IDS * cols;
    for (var o = i; o < outputs; o += EG_WG) {
        let v = v0 + o / cols;
        if (v < vocab) { eg_store(v * cols + o % cols, 0.0, second); }
    }
    for (var t0 = 0u; t0 < n; t0 += EG_TILE) {
        let len = min(EG_TILE, n - t0);
        let chunk = (len + EG_WG - 1u) / EG_WG;
        let lo = t0 + min(i * chunk, len);
        let hi = t0 + min(i * chunk + chunk, len);
        // `id - v0 < EG_IDS` is v0 <= id < v0 + EG_IDS (below v0 wraps past it). Ids past the
        // vocabulary may enter the list; no output owns them.
        var mine = 0u;
        for (var q = lo; q < hi; q++) {
            if (eg_id(q, second) - v0 < EG_IDS) { mine++; }
        }
        eg_counts[i] = mine;
        workgroupBarrier();
        var at = 0u;
        var total = 0u;
        for (var j = 0u; j < EG_WG; j++) {
            let c = eg_counts[j];
            if (j < i) { at += c; }
            total += c;
        }
        for (var q = lo; q < hi; q++) {
            if (eg_id(q, second) - v0 < EG_IDS) {
                eg_list[at] = q;
                at++;
            }
        }
        workgroupBarrier();
        // Each output has one owner, the same in every tile, so its running sum needs no barrier.
        for (var o = i; o < outputs; o += EG_WG) {
            let v = v0 + o / cols;
            let j = o % cols;
            if (v < vocab) {
                var acc = eg_load(v * cols + j, second);
                for (var s = 0u; s < total; s++) {
                    let q = eg_list[s];
                    if (eg_id(q, second) == v) { acc += d_embedded[q * cols + j]; }
                }
                eg_store(v * cols + j, acc, second);
            }
        }
        // The next tile rewrites the counts and the list.
        workgroupBarrier();
    }
}
