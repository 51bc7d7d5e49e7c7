// C = Aᵀ · B with the register blocking of matmul_vec4.wgsl, no workgroup memory: A [K, M],
// B [K, N] (or [G, K, N]; rows offsets[g]..offsets[g+1] of C are columns of A and use B[g], as in
// matmul_naive.wgsl): the weight gradient of a linear layer. Each invocation computes 8 rows × 8
// columns as outer products of 8 of A's values in row k and two vec4s of B's (8 rows rather than
// 4 for the reason matmul_vec4.wgsl gives). Needs N % 4 == 0;
// any M and K (rows past a group's end read its last row and are never written).
// Every output sums over k in ascending order, whatever M is or however the rows are split into
// groups: N devices holding a split of the rows compute the same bits as one device.
// The entry point and the loads of A's values come from matmul_rows_own.wgsl (`vec4`) or
// matmul_rows_subgroup.wgsl (`subgroup`), as for matmul_vec4.wgsl.
// Operands arrive through `acc4`/`acc1` and are summed in `Acc`: f32, or f16 where the call asks
// for f16 sums (both from matmul.rs); `Elem4` is the prelude's packed form of four elements.

@group(0) @binding(1) var<storage, read> a: array<Elem>;
@group(0) @binding(2) var<storage, read> b: array<Elem4>;

alias AVal = Acc;

fn a_at(i: u32) -> AVal {
    return acc1(a[i]);
}

fn block(gid: vec3<u32>, lane: u32) {
    let g = gid.z;
    let n4 = p.n / 4u;
    let row0 = offsets[g];
    let rows = min(offsets[g + 1u] - row0, p.max_group_rows);
    let r = gid.y * 8u;
    if (r >= rows) {
        return;
    }
    // Column vectors past N read the last one, and lanes past N go on to the end (a subgroup's
    // loads need them); neither is written.
    let in_n = gid.x * 2u < n4;
    let col4 = min(gid.x * 2u, n4 - 1u);
    let last = rows - 1u;
    let i0 = row0 + r;
    let a_rows = block_rows(row0, r, last, 1u);
    let mine = row0 + min(r + (lane & 7u), last);
    let has_hi = col4 + 1u < n4;
    let b_lo = weight(g) * p.k * n4 + col4;
    let b_hi = b_lo + select(0u, 1u, has_hi);

    var c0 = vec4<Acc>(0.0);
    var c1 = vec4<Acc>(0.0);
    var c2 = vec4<Acc>(0.0);
    var c3 = vec4<Acc>(0.0);
    var c4 = vec4<Acc>(0.0);
    var c5 = vec4<Acc>(0.0);
    var c6 = vec4<Acc>(0.0);
    var c7 = vec4<Acc>(0.0);
    var d0 = vec4<Acc>(0.0);
    var d1 = vec4<Acc>(0.0);
    var d2 = vec4<Acc>(0.0);
    var d3 = vec4<Acc>(0.0);
    var d4 = vec4<Acc>(0.0);
    var d5 = vec4<Acc>(0.0);
    var d6 = vec4<Acc>(0.0);
    var d7 = vec4<Acc>(0.0);
    let k_end = k_extent(g, r, p.k);
    for (var kk = 0u; kk < k_end; kk++) {
        let ak = kk * p.m;
        let v = load_a8(a_rows, mine, ak);
        let x = vec4<Acc>(v[0], v[1], v[2], v[3]);
        let y = vec4<Acc>(v[4], v[5], v[6], v[7]);
        let lo = acc4(b[b_lo + kk * n4]);
        let up = acc4(b[b_hi + kk * n4]);
        c0 += x.x * lo;
        c1 += x.y * lo;
        c2 += x.z * lo;
        c3 += x.w * lo;
        c4 += y.x * lo;
        c5 += y.y * lo;
        c6 += y.z * lo;
        c7 += y.w * lo;
        d0 += x.x * up;
        d1 += x.y * up;
        d2 += x.z * up;
        d3 += x.w * up;
        d4 += y.x * up;
        d5 += y.y * up;
        d6 += y.z * up;
        d7 += y.w * up;
    }
    if (!in_n) {
        return;
    }
    let col = col4 * 4u;
    let rs = array<vec4<Acc>, 8>(c0, c1, c2, c3, c4, c5, c6, c7);
    let ds = array<vec4<Acc>, 8>(d0, d1, d2, d3, d4, d5, d6, d7);
    for (var i = 0u; i < 8u; i++) {
        if (r + i < rows) {
            store(i0 + i, col, vec4<f32>(rs[i]));
            if (has_hi) { store(i0 + i, col + 4u, vec4<f32>(ds[i])); }
        }
    }
}
