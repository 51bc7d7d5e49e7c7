// Multi-head self-attention, forward and backward, FlashAttention-style: softmax(scale·QKᵀ)·V is
// computed one tile of keys at a time with an online (running max, running sum) softmax, so the
// T×T score matrix never exists in memory. The backward recomputes the probabilities from the
// saved row logsumexp (FlashAttention-2): one pass for dQ (a thread per query row) and one for dK
// and dV (a thread per key row), so every output element has exactly one writer (no atomics).
//
// Layout: q, k, v, out and their gradients are [B, T, H, Dh] (row-major; what a [B·T, H·Dh]
// projection gives, so no transposes between the projections and attention); the row logsumexp
// is [B, T, H]. Each workgroup takes ROWS rows of one (batch, head) pair (grid y = b·H + h) and
// steps through the other side TILE rows at a time, held in workgroup memory. Head dimensions up
// to MAX_D. With `causal`, query t sees keys 0..=t.
//
// `attention_naive` is the baseline the bench compares against: a thread per query row, three
// passes over the keys straight from storage (max, sum, weighted sum), no tiling.
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
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
// forward: the output and its rows' logsumexp
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
@group(0) @binding(5) var<storage, read_write> lse: array<f32>;
// backward_delta: reads the forward's output and logsumexp, writes (lse, rowsum(dO∘O)) pairs
@group(0) @binding(6) var<storage, read> o_in: array<f32>;
@group(0) @binding(7) var<storage, read> d_out: array<f32>;
@group(0) @binding(8) var<storage, read> lse_in: array<f32>;
@group(0) @binding(9) var<storage, read_write> stats: array<f32>;
@group(0) @binding(10) var<storage, read> stats_in: array<f32>;
@group(0) @binding(11) var<storage, read_write> dq: array<f32>;
@group(0) @binding(12) var<storage, read_write> dk: array<f32>;
@group(0) @binding(13) var<storage, read_write> dv: array<f32>;

const ROWS: u32 = 32u;
const TILE: u32 = 16u;
const MAX_D: u32 = 128u;
const LOWEST: f32 = -3.0e38;

// TILE × MAX_D each: 16 KiB together, WebGPU's default workgroup storage limit.
var<workgroup> tile_a: array<f32, 2048>;
var<workgroup> tile_b: array<f32, 2048>;

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
    return keys_of(min(row0 + ROWS, p.seq) - 1u);
}

// Keys row0.. of (bh) into tile_a, their values into tile_b; zeros past the sequence.
fn load_keys(bh: u32, row0: u32, lid: u32) {
    let d = p.head_dim;
    for (var e = lid; e < TILE * d; e += ROWS) {
        let j = e / d;
        let c = e % d;
        var kk = 0.0;
        var vv = 0.0;
        if (row0 + j < p.seq) {
            let at = row_at(bh, row0 + j) + c;
            kk = k[at];
            vv = v[at];
        }
        tile_a[j * MAX_D + c] = kk;
        tile_b[j * MAX_D + c] = vv;
    }
}

// Queries row0.. of (bh) into tile_a, their output gradients into tile_b (load_keys over other
// arrays: WGSL functions cannot take storage pointers).
fn load_queries(bh: u32, row0: u32, lid: u32) {
    let d = p.head_dim;
    for (var e = lid; e < TILE * d; e += ROWS) {
        let j = e / d;
        let c = e % d;
        var qq = 0.0;
        var gg = 0.0;
        if (row0 + j < p.seq) {
            let at = row_at(bh, row0 + j) + c;
            qq = q[at];
            gg = d_out[at];
        }
        tile_a[j * MAX_D + c] = qq;
        tile_b[j * MAX_D + c] = gg;
    }
}

@compute @workgroup_size(32)
fn attention_forward(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let bh = wg.y;
    let row0 = wg.x * ROWS;
    let t = row0 + lid;
    let live = t < p.seq;
    let d = p.head_dim;
    var qr: array<f32, MAX_D>;
    var acc: array<f32, MAX_D>;
    var mine = 0u;
    if (live) {
        let at = row_at(bh, t);
        for (var c = 0u; c < d; c++) {
            qr[c] = q[at + c] * p.scale;
        }
        mine = keys_of(t);
    }
    var m = LOWEST;
    var l = 0.0;
    let end = keys_of_block(row0);
    for (var k0 = 0u; k0 < end; k0 += TILE) {
        load_keys(bh, k0, lid);
        workgroupBarrier();
        let count = min(TILE, mine - min(mine, k0));
        if (count > 0u) {
            var s: array<f32, TILE>;
            var tile_max = LOWEST;
            for (var j = 0u; j < count; j++) {
                var dot = 0.0;
                for (var c = 0u; c < d; c++) {
                    dot += qr[c] * tile_a[j * MAX_D + c];
                }
                s[j] = dot;
                tile_max = max(tile_max, dot);
            }
            let m_new = max(m, tile_max);
            let correction = exp(m - m_new);
            l *= correction;
            for (var c = 0u; c < d; c++) {
                acc[c] *= correction;
            }
            for (var j = 0u; j < count; j++) {
                let pj = exp(s[j] - m_new);
                l += pj;
                for (var c = 0u; c < d; c++) {
                    acc[c] += pj * tile_b[j * MAX_D + c];
                }
            }
            m = m_new;
        }
        workgroupBarrier();
    }
    if (live) {
        let at = row_at(bh, t);
        let inv = 1.0 / l;
        for (var c = 0u; c < d; c++) {
            out[at + c] = acc[c] * inv;
        }
        lse[stat_at(bh, t)] = m + log(l);
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
            dot += q[qa + c] * k[ka + c];
        }
        m = max(m, dot * p.scale);
    }
    var l = 0.0;
    for (var j = 0u; j < n; j++) {
        let ka = row_at(bh, j);
        var dot = 0.0;
        for (var c = 0u; c < d; c++) {
            dot += q[qa + c] * k[ka + c];
        }
        l += exp(dot * p.scale - m);
    }
    var acc: array<f32, MAX_D>;
    for (var j = 0u; j < n; j++) {
        let ka = row_at(bh, j);
        var dot = 0.0;
        for (var c = 0u; c < d; c++) {
            dot += q[qa + c] * k[ka + c];
        }
        let pj = exp(dot * p.scale - m) / l;
        for (var c = 0u; c < d; c++) {
            acc[c] += pj * v[ka + c];
        }
    }
    for (var c = 0u; c < d; c++) {
        out[qa + c] = acc[c];
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
        delta += d_out[r * d + c] * o_in[r * d + c];
    }
    stats[2u * r] = lse_in[r];
    stats[2u * r + 1u] = delta;
}

// dQ[t] = scale · Σ_j P[t,j] (dO[t]·V[j] − delta[t]) K[j], with P recomputed from the saved lse.
@compute @workgroup_size(32)
fn attention_backward_dq(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let bh = wg.y;
    let row0 = wg.x * ROWS;
    let t = row0 + lid;
    let live = t < p.seq;
    let d = p.head_dim;
    var qr: array<f32, MAX_D>;
    var gr: array<f32, MAX_D>;
    var acc: array<f32, MAX_D>;
    var mine = 0u;
    var row_lse = 0.0;
    var delta = 0.0;
    if (live) {
        let at = row_at(bh, t);
        for (var c = 0u; c < d; c++) {
            qr[c] = q[at + c] * p.scale;
            gr[c] = d_out[at + c];
        }
        mine = keys_of(t);
        let st = stat_at(bh, t);
        row_lse = stats_in[2u * st];
        delta = stats_in[2u * st + 1u];
    }
    let end = keys_of_block(row0);
    for (var k0 = 0u; k0 < end; k0 += TILE) {
        load_keys(bh, k0, lid);
        workgroupBarrier();
        let count = min(TILE, mine - min(mine, k0));
        for (var j = 0u; j < count; j++) {
            var s = 0.0;
            var dp = 0.0;
            for (var c = 0u; c < d; c++) {
                s += qr[c] * tile_a[j * MAX_D + c];
                dp += gr[c] * tile_b[j * MAX_D + c];
            }
            let ds = exp(s - row_lse) * (dp - delta);
            for (var c = 0u; c < d; c++) {
                acc[c] += ds * tile_a[j * MAX_D + c];
            }
        }
        workgroupBarrier();
    }
    if (live) {
        let at = row_at(bh, t);
        for (var c = 0u; c < d; c++) {
            dq[at + c] = acc[c] * p.scale;
        }
    }
}

// dV[j] = Σ_t P[t,j] dO[t];  dK[j] = scale · Σ_t P[t,j] (dO[t]·V[j] − delta[t]) Q[t].
@compute @workgroup_size(32)
fn attention_backward_dkdv(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let bh = wg.y;
    let row0 = wg.x * ROWS;
    let j = row0 + lid;
    let live = j < p.seq;
    let d = p.head_dim;
    var kr: array<f32, MAX_D>;
    var vr: array<f32, MAX_D>;
    var dk_acc: array<f32, MAX_D>;
    var dv_acc: array<f32, MAX_D>;
    if (live) {
        let at = row_at(bh, j);
        for (var c = 0u; c < d; c++) {
            kr[c] = k[at + c] * p.scale;
            vr[c] = v[at + c];
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
        if (live) {
            let n = min(TILE, p.seq - q0);
            for (var i = 0u; i < n; i++) {
                let t = q0 + i;
                if (p.causal != 0u && t < j) {
                    continue;
                }
                let st = stat_at(bh, t);
                var s = 0.0;
                var dp = 0.0;
                for (var c = 0u; c < d; c++) {
                    s += kr[c] * tile_a[i * MAX_D + c];
                    dp += vr[c] * tile_b[i * MAX_D + c];
                }
                let pt = exp(s - stats_in[2u * st]);
                let ds = pt * (dp - stats_in[2u * st + 1u]);
                for (var c = 0u; c < d; c++) {
                    dv_acc[c] += pt * tile_b[i * MAX_D + c];
                    dk_acc[c] += ds * tile_a[i * MAX_D + c];
                }
            }
        }
        workgroupBarrier();
    }
    if (live) {
        let at = row_at(bh, j);
        for (var c = 0u; c < d; c++) {
            dk[at + c] = dk_acc[c] * p.scale;
            dv[at + c] = dv_acc[c];
        }
    }
}
