// C = op(A) * op(B), one invocation per output element. The baseline every faster variant is
// measured against. `Elem` (f32 or f16) is declared by the prelude the launcher prepends.
//
// Grouped form: C rows [offsets[g], offsets[g+1]) use weights B[g / blocks] (matmul_common.wgsl);
// plain matmul is one group.
// A is [M, K] (or [K, M] when trans_a), B is [groups, K, N] (or [groups, N, K] when trans_b).

@group(0) @binding(1) var<storage, read> a: array<Elem>;
@group(0) @binding(2) var<storage, read> b: array<Elem>;
@group(0) @binding(3) var<storage, read_write> c: array<Elem>;

@compute @workgroup_size(8, 8, 1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let g = gid.z;
    let col = gid.x;
    let row = offsets[g] + gid.y;
    if (col >= p.n || gid.y >= p.max_group_rows || row >= offsets[g + 1u]) {
        return;
    }
    let b_base = weight(g) * p.k * p.n;
    var acc = 0.0;
    let k_end = k_extent(g, gid.y, p.k);
    for (var kk = 0u; kk < k_end; kk++) {
        var av: Elem;
        if (p.trans_a != 0u) { av = a[kk * p.m + row]; } else { av = a[row * p.k + kk]; }
        var bv: Elem;
        if (p.trans_b != 0u) { bv = b[b_base + col * p.k + kk]; } else { bv = b[b_base + kk * p.n + col]; }
        acc += f32(av) * f32(bv);
    }
    c[row * p.n + col] = epi(row * p.n + col, Elem(acc));
}
