// C = A · Bᵀ with the register blocking of matmul_vec4.wgsl, no workgroup memory: A [M, K], B
// [N, K] (or [G, N, K] per row group, as in matmul_naive.wgsl): the input gradient of a linear
// layer. Each invocation computes 8 rows × 8 columns as dot products of vec4s along K. Needs
// K % 4 == 0; any M and N (edge rows and columns are read clamped and never written).
// The entry point and the loads of A's rows come from matmul_rows_own.wgsl (`vec4`) or
// matmul_rows_subgroup.wgsl (`subgroup`), as for matmul_vec4.wgsl.
// Every output sums over k in ascending order, whatever M is or however the rows are split into
// groups: N devices holding a split of the rows compute the same bits as one device.
// Operands arrive through `acc4`/`acc1` and are summed in `Acc`: f32, or f16 where the call asks
// for f16 sums (both from matmul.rs); `Elem4` is the prelude's packed form of four elements.

@group(0) @binding(1) var<storage, read> a: array<Elem4>;
@group(0) @binding(2) var<storage, read> b: array<Elem4>;

alias AVal = vec4<Acc>;

fn a_at(i: u32) -> AVal {
    return acc4(a[i]);
}

fn block(gid: vec3<u32>, lane: u32) {
    let g = gid.z;
    let k4 = p.k / 4u;
    let col = gid.x * 8u;
    let row0 = offsets[g];
    let rows = min(offsets[g + 1u] - row0, p.max_group_rows);
    let r = gid.y * 8u;
    if (r >= rows) {
        return;
    }
    // Rows past the group's end and columns past N read the last valid one: always in bounds,
    // never written. Lanes past N go on to the end (a subgroup's loads need them).
    let last = rows - 1u;
    let a_rows = block_rows(row0, r, last, k4);
    let mine = (row0 + min(r + (lane & 7u), last)) * k4;
    let nb = weight(g) * p.n;
    let b0 = (nb + min(col + 0u, p.n - 1u)) * k4;
    let b1 = (nb + min(col + 1u, p.n - 1u)) * k4;
    let b2 = (nb + min(col + 2u, p.n - 1u)) * k4;
    let b3 = (nb + min(col + 3u, p.n - 1u)) * k4;
    let b4 = (nb + min(col + 4u, p.n - 1u)) * k4;
    let b5 = (nb + min(col + 5u, p.n - 1u)) * k4;
    let b6 = (nb + min(col + 6u, p.n - 1u)) * k4;
    let b7 = (nb + min(col + 7u, p.n - 1u)) * k4;

    var c0 = vec4<Acc>(0.0);
    var d0 = vec4<Acc>(0.0);
    var c1 = vec4<Acc>(0.0);
    var d1 = vec4<Acc>(0.0);
    var c2 = vec4<Acc>(0.0);
    var d2 = vec4<Acc>(0.0);
    var c3 = vec4<Acc>(0.0);
    var d3 = vec4<Acc>(0.0);
    var c4 = vec4<Acc>(0.0);
    var d4 = vec4<Acc>(0.0);
    var c5 = vec4<Acc>(0.0);
    var d5 = vec4<Acc>(0.0);
    var c6 = vec4<Acc>(0.0);
    var d6 = vec4<Acc>(0.0);
    var c7 = vec4<Acc>(0.0);
    var d7 = vec4<Acc>(0.0);
    let k_end = k_extent(g, r, k4);
    for (var kq = 0u; kq < k_end; kq++) {
        let y0 = acc4(b[b0 + kq]);
        let y1 = acc4(b[b1 + kq]);
        let y2 = acc4(b[b2 + kq]);
        let y3 = acc4(b[b3 + kq]);
        let y4 = acc4(b[b4 + kq]);
        let y5 = acc4(b[b5 + kq]);
        let y6 = acc4(b[b6 + kq]);
        let y7 = acc4(b[b7 + kq]);
        let x = load_a8(a_rows, mine, kq);
        let x0 = x[0];
        c0 += vec4<Acc>(dot(x0, y0), dot(x0, y1), dot(x0, y2), dot(x0, y3));
        d0 += vec4<Acc>(dot(x0, y4), dot(x0, y5), dot(x0, y6), dot(x0, y7));
        let x1 = x[1];
        c1 += vec4<Acc>(dot(x1, y0), dot(x1, y1), dot(x1, y2), dot(x1, y3));
        d1 += vec4<Acc>(dot(x1, y4), dot(x1, y5), dot(x1, y6), dot(x1, y7));
        let x2 = x[2];
        c2 += vec4<Acc>(dot(x2, y0), dot(x2, y1), dot(x2, y2), dot(x2, y3));
        d2 += vec4<Acc>(dot(x2, y4), dot(x2, y5), dot(x2, y6), dot(x2, y7));
        let x3 = x[3];
        c3 += vec4<Acc>(dot(x3, y0), dot(x3, y1), dot(x3, y2), dot(x3, y3));
        d3 += vec4<Acc>(dot(x3, y4), dot(x3, y5), dot(x3, y6), dot(x3, y7));
        let x4 = x[4];
        c4 += vec4<Acc>(dot(x4, y0), dot(x4, y1), dot(x4, y2), dot(x4, y3));
        d4 += vec4<Acc>(dot(x4, y4), dot(x4, y5), dot(x4, y6), dot(x4, y7));
        let x5 = x[5];
        c5 += vec4<Acc>(dot(x5, y0), dot(x5, y1), dot(x5, y2), dot(x5, y3));
        d5 += vec4<Acc>(dot(x5, y4), dot(x5, y5), dot(x5, y6), dot(x5, y7));
        let x6 = x[6];
        c6 += vec4<Acc>(dot(x6, y0), dot(x6, y1), dot(x6, y2), dot(x6, y3));
        d6 += vec4<Acc>(dot(x6, y4), dot(x6, y5), dot(x6, y6), dot(x6, y7));
        let x7 = x[7];
        c7 += vec4<Acc>(dot(x7, y0), dot(x7, y1), dot(x7, y2), dot(x7, y3));
        d7 += vec4<Acc>(dot(x7, y4), dot(x7, y5), dot(x7, y6), dot(x7, y7));
    }
    if (col >= p.n) {
        return;
    }
    let has_hi = col + 4u < p.n;
    let rs = array<vec4<Acc>, 8>(c0, c1, c2, c3, c4, c5, c6, c7);
    let ds = array<vec4<Acc>, 8>(d0, d1, d2, d3, d4, d5, d6, d7);
    for (var i = 0u; i < 8u; i++) {
        if (r + i < rows) {
            store(row0 + r + i, col, vec4<f32>(rs[i]));
            if (has_hi) { store(row0 + r + i, col + 4u, vec4<f32>(ds[i])); }
        }
    }
}
