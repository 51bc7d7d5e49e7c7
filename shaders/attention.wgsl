// Multi-head self-attention, forward and backward, FlashAttention-style: softmax(scale·QKᵀ)·V is
// computed one tile of keys at a time with an online (running max, running sum) softmax, so the
// T×T score matrix never exists in memory. The backward recomputes the probabilities from the
// saved row logsumexp (FlashAttention-2): after a pass for each row's delta, one launch whose
// first layer of workgroups makes dQ (a thread per query row) and whose second makes dK and dV (a
// thread per key row), so every output element has exactly one writer (no atomics).
//
// Layout: q, k, v, out and their gradients are [B, T, H, Dh] (row-major; what a [B·T, H·Dh]
// projection gives, so no transposes between the projections and attention); the row logsumexp
// is [B, T, H]. Each workgroup takes rows of one (batch, head) pair (grid y = b·H + h): the
// forward and the backward BLOCK_ROWS, two rows per thread (queries, or keys for dK/dV). It steps
// through the other side TILE rows at a time, held in workgroup memory as vec4s. With `causal`,
// query t sees keys 0..=t.
//
// The tiled kernels are specialised per head dimension: the launcher rewrites the `const D4` line
// (vec4s per head row, ceil(Dh / 4), at most 32) before compiling, so every loop over a row has a
// constant trip count and every loop over a tile runs TILE times with masking: compilers unroll
// them and keep the rows in registers instead of indexing private arrays (which CPU drivers turn
// into gathers and scatters). Lanes past Dh hold zeros.
//
// `attention_naive` is the baseline the bench compares against: a thread per query row, three
// passes over the keys straight from storage (max, sum, weighted sum), no tiling.
//
// q, k, v, the output and the gradients are `Elem` (f32, or f16 where the adapter has it); every
// sum, the softmax statistics and the workgroup tiles are f32, so f16 only narrows storage.
//
// Every binding number has one meaning, so each entry point's auto layout holds exactly the
// bindings it names (at most 7 storage buffers, under WebGPU's default limit of 8).

struct Params {
    batch: u32,
    seq: u32,
    heads: u32,
    head_dim: u32,
    causal: u32,
    _pad0: u32,
    scale: f32,
    _pad1: f32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<Elem>;
@group(0) @binding(2) var<storage, read> k: array<Elem>;
@group(0) @binding(3) var<storage, read> v: array<Elem>;
// forward: the output and its rows' logsumexp
@group(0) @binding(4) var<storage, read_write> out: array<Elem>;
@group(0) @binding(5) var<storage, read_write> lse: array<f32>;
// backward_delta: reads the forward's output and logsumexp, writes (lse, rowsum(dO∘O)) pairs
@group(0) @binding(6) var<storage, read> o_in: array<Elem>;
@group(0) @binding(7) var<storage, read> d_out: array<Elem>;
@group(0) @binding(8) var<storage, read> lse_in: array<f32>;
@group(0) @binding(9) var<storage, read_write> stats: array<f32>;
@group(0) @binding(10) var<storage, read> stats_in: array<f32>;
@group(0) @binding(11) var<storage, read_write> dq: array<Elem>;
@group(0) @binding(12) var<storage, read_write> dk: array<Elem>;
@group(0) @binding(13) var<storage, read_write> dv: array<Elem>;

const ROWS: u32 = 32u;
const TILE: u32 = 16u;
const MAX_D: u32 = 128u;
const LOWEST: f32 = -3.0e38;
// vec4s per head row; the launcher sets it per head dimension (this default is MAX_D / 4).
const D4: u32 = 32u;

// TILE × D4 vec4s each: at most 16 KiB together, WebGPU's default workgroup storage limit
// (the launcher keeps TILE × D4 ≤ 512 when it specialises them).
var<workgroup> tile_a: array<vec4<f32>, TILE * D4>;
var<workgroup> tile_b: array<vec4<f32>, TILE * D4>;

// Index of (b·H + h, t) in the [B, T, H] statistics.
fn stat_at(bh: u32, t: u32) -> u32 {
    let b = bh / p.heads;
    let h = bh % p.heads;
    return (b * p.seq + t) * p.heads + h;
}

// Offset of row (b·H + h, t) in a [B, T, H, Dh] array.
fn row_at(bh: u32, t: u32) -> u32 {
    return stat_at(bh, t) * p.head_dim;
}

// How many keys query t attends to.
fn keys_of(t: u32) -> u32 {
    if (p.causal != 0u) {
        return min(t + 1u, p.seq);
    }
    return p.seq;
}

// Keys a block of query rows starting at row0 needs: the same for the whole workgroup.
fn keys_of_block(row0: u32) -> u32 {
    return keys_of(min(row0 + BLOCK_ROWS, p.seq) - 1u);
}

// Which of the 4 lanes of vec4 c4 of a row lie inside the head dimension.
fn lanes(c4: u32) -> vec4<bool> {
    let c = 4u * c4;
    return vec4<bool>(c < p.head_dim, c + 1u < p.head_dim, c + 2u < p.head_dim, c + 3u < p.head_dim);
}

// vec4 c4 of a row at `at` of q, k, v or d_out, zeros past the head dimension. (One function
// per array: WGSL functions cannot take storage pointers.)
fn q4(at: u32, c4: u32) -> vec4<f32> {
    let i = at + 4u * c4;
    let m = lanes(c4);
    return vec4<f32>(select(0.0, f32(q[i]), m.x), select(0.0, f32(q[i + 1u]), m.y), select(0.0, f32(q[i + 2u]), m.z), select(0.0, f32(q[i + 3u]), m.w));
}
fn k4(at: u32, c4: u32) -> vec4<f32> {
    let i = at + 4u * c4;
    let m = lanes(c4);
    return vec4<f32>(select(0.0, f32(k[i]), m.x), select(0.0, f32(k[i + 1u]), m.y), select(0.0, f32(k[i + 2u]), m.z), select(0.0, f32(k[i + 3u]), m.w));
}
fn v4(at: u32, c4: u32) -> vec4<f32> {
    let i = at + 4u * c4;
    let m = lanes(c4);
    return vec4<f32>(select(0.0, f32(v[i]), m.x), select(0.0, f32(v[i + 1u]), m.y), select(0.0, f32(v[i + 2u]), m.z), select(0.0, f32(v[i + 3u]), m.w));
}
fn g4(at: u32, c4: u32) -> vec4<f32> {
    let i = at + 4u * c4;
    let m = lanes(c4);
    return vec4<f32>(select(0.0, f32(d_out[i]), m.x), select(0.0, f32(d_out[i + 1u]), m.y), select(0.0, f32(d_out[i + 2u]), m.z), select(0.0, f32(d_out[i + 3u]), m.w));
}

// Writes the lanes of `x` inside the head dimension to row `at` of out, dq, dk or dv.
fn store_out(at: u32, c4: u32, x: vec4<f32>) {
    let m = lanes(c4);
    let i = at + 4u * c4;
    if (m.x) { out[i] = Elem(x.x); }
    if (m.y) { out[i + 1u] = Elem(x.y); }
    if (m.z) { out[i + 2u] = Elem(x.z); }
    if (m.w) { out[i + 3u] = Elem(x.w); }
}
fn store_dq(at: u32, c4: u32, x: vec4<f32>) {
    let m = lanes(c4);
    let i = at + 4u * c4;
    if (m.x) { dq[i] = Elem(x.x); }
    if (m.y) { dq[i + 1u] = Elem(x.y); }
    if (m.z) { dq[i + 2u] = Elem(x.z); }
    if (m.w) { dq[i + 3u] = Elem(x.w); }
}
fn store_dk(at: u32, c4: u32, x: vec4<f32>) {
    let m = lanes(c4);
    let i = at + 4u * c4;
    if (m.x) { dk[i] = Elem(x.x); }
    if (m.y) { dk[i + 1u] = Elem(x.y); }
    if (m.z) { dk[i + 2u] = Elem(x.z); }
    if (m.w) { dk[i + 3u] = Elem(x.w); }
}
fn store_dv(at: u32, c4: u32, x: vec4<f32>) {
    let m = lanes(c4);
    let i = at + 4u * c4;
    if (m.x) { dv[i] = Elem(x.x); }
    if (m.y) { dv[i + 1u] = Elem(x.y); }
    if (m.z) { dv[i + 2u] = Elem(x.z); }
    if (m.w) { dv[i + 3u] = Elem(x.w); }
}

// Keys row0.. of (bh) into tile_a, their values into tile_b; zeros past the sequence.
fn load_keys(bh: u32, row0: u32, lid: u32) {
    for (var e = lid; e < TILE * D4; e += ROWS) {
        let j = e / D4;
        var kk = vec4<f32>(0.0);
        var vv = vec4<f32>(0.0);
        if (row0 + j < p.seq) {
            let at = row_at(bh, row0 + j);
            kk = k4(at, e % D4);
            vv = v4(at, e % D4);
        }
        tile_a[e] = kk;
        tile_b[e] = vv;
    }
}

// Queries row0.. of (bh) into tile_a, their output gradients into tile_b.
fn load_queries(bh: u32, row0: u32, lid: u32) {
    for (var e = lid; e < TILE * D4; e += ROWS) {
        let j = e / D4;
        var qq = vec4<f32>(0.0);
        var gg = vec4<f32>(0.0);
        if (row0 + j < p.seq) {
            let at = row_at(bh, row0 + j);
            qq = q4(at, e % D4);
            gg = g4(at, e % D4);
        }
        tile_a[e] = qq;
        tile_b[e] = gg;
    }
}

fn sum4(x: vec4<f32>) -> f32 {
    return x.x + x.y + x.z + x.w;
}

// A tiled kernel's workgroup takes BLOCK_ROWS rows: each invocation two, `lid` and `lid + ROWS`
// of the block, so every row it loads from the tiles serves both (the tiles are workgroup
// memory, and on a CPU driver a load is what a multiply-add waits for: this took the forward
// from 4.5 to 7 GFLOP/s on lavapipe).
const BLOCK_ROWS: u32 = 2u * ROWS;

// One query's running softmax state: its max and sum.
struct Running {
    m: f32,
    l: f32,
}

@compute @workgroup_size(32)
fn attention_forward(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let bh = wg.y;
    let row0 = wg.x * BLOCK_ROWS;
    let ta = row0 + lid;
    let tb = ta + ROWS;
    var qa: array<vec4<f32>, D4>;
    var qb: array<vec4<f32>, D4>;
    var acc_a: array<vec4<f32>, D4>;
    var acc_b: array<vec4<f32>, D4>;
    var mine_a = 0u;
    var mine_b = 0u;
    if (ta < p.seq) {
        let at = row_at(bh, ta);
        for (var c4 = 0u; c4 < D4; c4++) {
            qa[c4] = q4(at, c4) * p.scale;
        }
        mine_a = keys_of(ta);
    }
    if (tb < p.seq) {
        let at = row_at(bh, tb);
        for (var c4 = 0u; c4 < D4; c4++) {
            qb[c4] = q4(at, c4) * p.scale;
        }
        mine_b = keys_of(tb);
    }
    var ra = Running(LOWEST, 0.0);
    var rb = Running(LOWEST, 0.0);
    let end = keys_of_block(row0);
    for (var k0 = 0u; k0 < end; k0 += TILE) {
        load_keys(bh, k0, lid);
        workgroupBarrier();
        let count_a = min(TILE, mine_a - min(mine_a, k0));
        let count_b = min(TILE, mine_b - min(mine_b, k0));
        // Query b is the later one: it sees at least as many keys as query a.
        if (count_b > 0u || count_a > 0u) {
            // Every key of the tile, the ones past each query's count masked to probability 0.
            var sa: array<f32, TILE>;
            var sb: array<f32, TILE>;
            var max_a = LOWEST;
            var max_b = LOWEST;
            for (var j = 0u; j < TILE; j++) {
                var dot_a = vec4<f32>(0.0);
                var dot_b = vec4<f32>(0.0);
                for (var c4 = 0u; c4 < D4; c4++) {
                    let key = tile_a[j * D4 + c4];
                    dot_a += qa[c4] * key;
                    dot_b += qb[c4] * key;
                }
                sa[j] = select(LOWEST, sum4(dot_a), j < count_a);
                sb[j] = select(LOWEST, sum4(dot_b), j < count_b);
                max_a = max(max_a, sa[j]);
                max_b = max(max_b, sb[j]);
            }
            let m_a = max(ra.m, max_a);
            let m_b = max(rb.m, max_b);
            let fix_a = exp(ra.m - m_a);
            let fix_b = exp(rb.m - m_b);
            ra.l *= fix_a;
            rb.l *= fix_b;
            for (var c4 = 0u; c4 < D4; c4++) {
                acc_a[c4] *= fix_a;
                acc_b[c4] *= fix_b;
            }
            for (var j = 0u; j < TILE; j++) {
                let pa = select(0.0, exp(sa[j] - m_a), j < count_a);
                let pb = select(0.0, exp(sb[j] - m_b), j < count_b);
                ra.l += pa;
                rb.l += pb;
                for (var c4 = 0u; c4 < D4; c4++) {
                    let value = tile_b[j * D4 + c4];
                    acc_a[c4] += pa * value;
                    acc_b[c4] += pb * value;
                }
            }
            ra.m = m_a;
            rb.m = m_b;
        }
        workgroupBarrier();
    }
    if (ta < p.seq) {
        let at = row_at(bh, ta);
        let inv = 1.0 / ra.l;
        for (var c4 = 0u; c4 < D4; c4++) {
            store_out(at, c4, acc_a[c4] * inv);
        }
        lse[stat_at(bh, ta)] = ra.m + log(ra.l);
    }
    if (tb < p.seq) {
        let at = row_at(bh, tb);
        let inv = 1.0 / rb.l;
        for (var c4 = 0u; c4 < D4; c4++) {
            store_out(at, c4, acc_b[c4] * inv);
        }
        lse[stat_at(bh, tb)] = rb.m + log(rb.l);
    }
}

@compute @workgroup_size(64)
fn attention_naive(@builtin(global_invocation_id) gid: vec3<u32>) {
    let t = gid.x;
    let bh = gid.y;
    if (t >= p.seq) {
        return;
    }
    let d = p.head_dim;
    let qa = row_at(bh, t);
    let n = keys_of(t);
    var m = LOWEST;
    for (var j = 0u; j < n; j++) {
        let ka = row_at(bh, j);
        var dot = 0.0;
        for (var c = 0u; c < d; c++) {
            dot += f32(q[qa + c]) * f32(k[ka + c]);
        }
        m = max(m, dot * p.scale);
    }
    var l = 0.0;
    for (var j = 0u; j < n; j++) {
        let ka = row_at(bh, j);
        var dot = 0.0;
        for (var c = 0u; c < d; c++) {
            dot += f32(q[qa + c]) * f32(k[ka + c]);
        }
        l += exp(dot * p.scale - m);
    }
    var acc: array<f32, MAX_D>;
    for (var j = 0u; j < n; j++) {
        let ka = row_at(bh, j);
        var dot = 0.0;
        for (var c = 0u; c < d; c++) {
            dot += f32(q[qa + c]) * f32(k[ka + c]);
        }
        let pj = exp(dot * p.scale - m) / l;
        for (var c = 0u; c < d; c++) {
            acc[c] += pj * f32(v[ka + c]);
        }
    }
    for (var c = 0u; c < d; c++) {
        out[qa + c] = Elem(acc[c]);
    }
    lse[stat_at(bh, t)] = m + log(l);
}

// stats[2r] = lse[r], stats[2r + 1] = Σ_c dO[r, c]·O[r, c]: what both backward passes read per
// query row (the softmax backward's row term).
@compute @workgroup_size(256)
fn attention_backward_delta(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
) {
    let r = gid.x + gid.y * groups.x * 256u;
    if (r >= p.batch * p.seq * p.heads) {
        return;
    }
    let d = p.head_dim;
    var delta = 0.0;
    for (var c = 0u; c < d; c++) {
        delta += f32(d_out[r * d + c]) * f32(o_in[r * d + c]);
    }
    stats[2u * r] = lse_in[r];
    stats[2u * r + 1u] = delta;
}

// What dQ needs of one query beside its rows: its logsumexp, delta and how many keys it sees.
struct DqRow {
    lse: f32,
    delta: f32,
    keys: u32,
}

// dQ[t] = scale · Σ_j P[t,j] (dO[t]·V[j] − delta[t]) K[j], with P recomputed from the saved lse.
// Two queries per thread, as in the forward.
fn backward_dq(wg: vec3<u32>, lid: u32) {
    let bh = wg.y;
    let row0 = wg.x * BLOCK_ROWS;
    let ta = row0 + lid;
    let tb = ta + ROWS;
    var qa: array<vec4<f32>, D4>;
    var qb: array<vec4<f32>, D4>;
    var ga: array<vec4<f32>, D4>;
    var gb: array<vec4<f32>, D4>;
    var acc_a: array<vec4<f32>, D4>;
    var acc_b: array<vec4<f32>, D4>;
    var ra = DqRow(0.0, 0.0, 0u);
    var rb = DqRow(0.0, 0.0, 0u);
    if (ta < p.seq) {
        let at = row_at(bh, ta);
        for (var c4 = 0u; c4 < D4; c4++) {
            qa[c4] = q4(at, c4) * p.scale;
            ga[c4] = g4(at, c4);
        }
        let st = stat_at(bh, ta);
        ra = DqRow(stats_in[2u * st], stats_in[2u * st + 1u], keys_of(ta));
    }
    if (tb < p.seq) {
        let at = row_at(bh, tb);
        for (var c4 = 0u; c4 < D4; c4++) {
            qb[c4] = q4(at, c4) * p.scale;
            gb[c4] = g4(at, c4);
        }
        let st = stat_at(bh, tb);
        rb = DqRow(stats_in[2u * st], stats_in[2u * st + 1u], keys_of(tb));
    }
    let end = keys_of_block(row0);
    for (var k0 = 0u; k0 < end; k0 += TILE) {
        load_keys(bh, k0, lid);
        workgroupBarrier();
        let count_a = min(TILE, ra.keys - min(ra.keys, k0));
        let count_b = min(TILE, rb.keys - min(rb.keys, k0));
        if (count_a > 0u || count_b > 0u) {
            for (var j = 0u; j < TILE; j++) {
                var s_a = vec4<f32>(0.0);
                var s_b = vec4<f32>(0.0);
                var dp_a = vec4<f32>(0.0);
                var dp_b = vec4<f32>(0.0);
                for (var c4 = 0u; c4 < D4; c4++) {
                    let key = tile_a[j * D4 + c4];
                    let value = tile_b[j * D4 + c4];
                    s_a += qa[c4] * key;
                    s_b += qb[c4] * key;
                    dp_a += ga[c4] * value;
                    dp_b += gb[c4] * value;
                }
                let ds_a = select(0.0, exp(sum4(s_a) - ra.lse) * (sum4(dp_a) - ra.delta), j < count_a);
                let ds_b = select(0.0, exp(sum4(s_b) - rb.lse) * (sum4(dp_b) - rb.delta), j < count_b);
                for (var c4 = 0u; c4 < D4; c4++) {
                    let key = tile_a[j * D4 + c4];
                    acc_a[c4] += ds_a * key;
                    acc_b[c4] += ds_b * key;
                }
            }
        }
        workgroupBarrier();
    }
    if (ta < p.seq) {
        let at = row_at(bh, ta);
        for (var c4 = 0u; c4 < D4; c4++) {
            store_dq(at, c4, acc_a[c4] * p.scale);
        }
    }
    if (tb < p.seq) {
        let at = row_at(bh, tb);
        for (var c4 = 0u; c4 < D4; c4++) {
            store_dq(at, c4, acc_b[c4] * p.scale);
        }
    }
}

// dV[j] = Σ_t P[t,j] dO[t];  dK[j] = scale · Σ_t P[t,j] (dO[t]·V[j] − delta[t]) Q[t].
// Two keys per thread: each query and output gradient loaded from the tiles serves both.
fn backward_dkdv(wg: vec3<u32>, lid: u32) {
    let bh = wg.y;
    let row0 = wg.x * BLOCK_ROWS;
    let ja = row0 + lid;
    let jb = ja + ROWS;
    var ka: array<vec4<f32>, D4>;
    var kb: array<vec4<f32>, D4>;
    var va: array<vec4<f32>, D4>;
    var vb: array<vec4<f32>, D4>;
    var dk_a: array<vec4<f32>, D4>;
    var dk_b: array<vec4<f32>, D4>;
    var dv_a: array<vec4<f32>, D4>;
    var dv_b: array<vec4<f32>, D4>;
    if (ja < p.seq) {
        let at = row_at(bh, ja);
        for (var c4 = 0u; c4 < D4; c4++) {
            ka[c4] = k4(at, c4) * p.scale;
            va[c4] = v4(at, c4);
        }
    }
    if (jb < p.seq) {
        let at = row_at(bh, jb);
        for (var c4 = 0u; c4 < D4; c4++) {
            kb[c4] = k4(at, c4) * p.scale;
            vb[c4] = v4(at, c4);
        }
    }
    // Causal: queries before the block's first key see none of its keys.
    var start = 0u;
    if (p.causal != 0u) {
        start = row0 - row0 % TILE;
    }
    for (var q0 = start; q0 < p.seq; q0 += TILE) {
        load_queries(bh, q0, lid);
        workgroupBarrier();
        if (ja < p.seq) {
            for (var i = 0u; i < TILE; i++) {
                let t = q0 + i;
                // Past the sequence, or a query before the key under the causal mask.
                let seen_a = t < p.seq && (p.causal == 0u || t >= ja);
                let seen_b = t < p.seq && jb < p.seq && (p.causal == 0u || t >= jb);
                let st = stat_at(bh, min(t, p.seq - 1u));
                let row_lse = stats_in[2u * st];
                let delta = stats_in[2u * st + 1u];
                var s_a = vec4<f32>(0.0);
                var s_b = vec4<f32>(0.0);
                var dp_a = vec4<f32>(0.0);
                var dp_b = vec4<f32>(0.0);
                for (var c4 = 0u; c4 < D4; c4++) {
                    let query = tile_a[i * D4 + c4];
                    let grad = tile_b[i * D4 + c4];
                    s_a += ka[c4] * query;
                    s_b += kb[c4] * query;
                    dp_a += va[c4] * grad;
                    dp_b += vb[c4] * grad;
                }
                let p_a = select(0.0, exp(sum4(s_a) - row_lse), seen_a);
                let p_b = select(0.0, exp(sum4(s_b) - row_lse), seen_b);
                let ds_a = p_a * (sum4(dp_a) - delta);
                let ds_b = p_b * (sum4(dp_b) - delta);
                for (var c4 = 0u; c4 < D4; c4++) {
                    let query = tile_a[i * D4 + c4];
                    let grad = tile_b[i * D4 + c4];
                    dv_a[c4] += p_a * grad;
                    dv_b[c4] += p_b * grad;
                    dk_a[c4] += ds_a * query;
                    dk_b[c4] += ds_b * query;
                }
            }
        }
        workgroupBarrier();
    }
    if (ja < p.seq) {
        let at = row_at(bh, ja);
        for (var c4 = 0u; c4 < D4; c4++) {
            store_dk(at, c4, dk_a[c4] * p.scale);
            store_dv(at, c4, dv_a[c4]);
        }
    }
    if (jb < p.seq) {
        let at = row_at(bh, jb);
        for (var c4 = 0u; c4 < D4; c4++) {
            store_dk(at, c4, dk_b[c4] * p.scale);
            store_dv(at, c4, dv_b[c4]);
        }
    }
}

// dQ, and dK with dV, in one launch: the grid's first z layer of workgroups takes query blocks,
// the second key blocks. Neither reads what the other writes (both read the delta pass's stats),
// and a workgroup's role is the same for all its invocations, so its barriers stay in uniform
// control flow; the two share the tiles' workgroup memory.
@compute @workgroup_size(32)
fn attention_backward_grads(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    if (wg.z == 0u) {
        backward_dq(wg, lid);
    } else {
        backward_dkdv(wg, lid);
    }
}
