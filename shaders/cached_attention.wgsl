// Causal attention of new rows against a key/value cache (src/kernels/cached_attention.rs): a
// decoder's prefill (every row of a prompt, from position 0) and its decode steps (one row a
// sequence) in one kernel. Follows flat_common.wgsl.
//
// B sequences of P new rows each; the cache holds T rows a sequence. New row r of sequence b
// sits at position positions[b*P + r], and a sequence's new rows are consecutive positions from
// its first, `first`. Each new row writes its key and value into cache row `pos`, and its query
// attends to positions 0..=pos: those before `first` from the cache, the rest (this call's own
// rows) from the new keys and values, so no invocation reads a cache row another one writes.

struct Params {
    batch: u32,    // B
    rows: u32,     // P, new rows a sequence
    capacity: u32, // T, cache rows a sequence
    heads: u32,    // H
    head_dim: u32, // Dh
    pad0: u32,
    pad1: u32,
    scale: f32,
}

// The widest head an invocation holds (kernels::attention::MAX_HEAD_DIM).
const MAX_DH: u32 = 128u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k_new: array<f32>;
@group(0) @binding(3) var<storage, read> v_new: array<f32>;
@group(0) @binding(4) var<storage, read> positions: array<u32>;
@group(0) @binding(5) var<storage, read_write> k_cache: array<f32>;
@group(0) @binding(6) var<storage, read_write> v_cache: array<f32>;
@group(0) @binding(7) var<storage, read_write> out: array<f32>;

// One invocation per (new row, head): it stores its key and value, then runs an online softmax
// over its keys (a running maximum and sum, as the attention kernel's forward), all in f32.
@compute @workgroup_size(256)
fn cached_attention(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = index(gid, groups);
    if (i >= p.batch * p.rows * p.heads) { return; }
    let h = i % p.heads;
    let row = i / p.heads;
    let b = row / p.rows;
    let width = p.heads * p.head_dim;
    let col = h * p.head_dim;
    let first = positions[b * p.rows];
    let pos = positions[row];
    // The host checks positions; a shader cannot report an error, so a bad one writes nothing.
    if (pos >= p.capacity || pos < first) { return; }
    let at = row * width + col;
    let slot = (b * p.capacity + pos) * width + col;
    var qv: array<f32, MAX_DH>;
    var acc: array<f32, MAX_DH>;
    for (var j = 0u; j < p.head_dim; j += 1u) {
        k_cache[slot + j] = k_new[at + j];
        v_cache[slot + j] = v_new[at + j];
        qv[j] = q[at + j];
        acc[j] = 0.0;
    }
    var m = -3.4028235e38;
    var l = 0.0;
    for (var s = 0u; s <= pos; s += 1u) {
        let fresh = s >= first;
        var key = (b * p.capacity + s) * width + col;
        if (fresh) { key = (b * p.rows + (s - first)) * width + col; }
        var dot = 0.0;
        for (var j = 0u; j < p.head_dim; j += 1u) {
            var kj = k_cache[key + j];
            if (fresh) { kj = k_new[key + j]; }
            dot += qv[j] * kj;
        }
        let score = dot * p.scale;
        let m_next = max(m, score);
        let keep = exp(m - m_next);
        let w = exp(score - m_next);
        l = l * keep + w;
        for (var j = 0u; j < p.head_dim; j += 1u) {
            var vj = v_cache[key + j];
            if (fresh) { vj = v_new[key + j]; }
            acc[j] = acc[j] * keep + w * vj;
        }
        m = m_next;
    }
    for (var j = 0u; j < p.head_dim; j += 1u) {
        out[at + j] = acc[j] / l;
    }
}
