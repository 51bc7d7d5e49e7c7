// C = A * B with register blocking: each invocation computes 8 rows x 8 columns straight from
// global memory with vec4 loads, 4 deep in K. No workgroup memory: on CPU drivers (llvmpipe)
// "shared" memory is ordinary memory, and fewer, wider loads per multiply-add is what counts.
// A CPU driver runs neighbouring invocations as SIMD lanes: the rows of A are the same for all
// of them (one address), the columns of B differ per lane (a gather each), so 8 rows rather than
// 4 halve the gathers per multiply-add (1.3-1.5x at 1024 on lavapipe).
// The entry point and the loads of A's rows come from matmul_rows_own.wgsl (the `vec4` variant)
// or matmul_rows_subgroup.wgsl (`subgroup`): the sums are the same, so are the bits.
// Needs N % 4 == 0, K % 4 == 0 and no transposes (the launcher checks); any M.
// Layouts and the grouped form are as in matmul_naive.wgsl.
// Operands arrive through `acc4`/`acc1` and are summed in `Acc`: f32, or f16 where the call asks
// for f16 sums (both from matmul.rs); `Elem4` is the prelude's packed form of four elements.

@group(0) @binding(1) var<storage, read> a: array<Elem4>;
@group(0) @binding(2) var<storage, read> b: array<Elem4>;
@group(0) @binding(3) var<storage, read_write> c: array<vec4<Elem>>;

alias AVal = vec4<Acc>;

fn a_at(i: u32) -> AVal {
    return acc4(a[i]);
}

fn block(gid: vec3<u32>, lane: u32) {
    let g = gid.z;
    let n4 = p.n / 4u;
    let k4 = p.k / 4u;
    let row0 = offsets[g];
    let rows = min(offsets[g + 1u] - row0, p.max_group_rows);
    let r = gid.y * 8u;
    if (r >= rows) {
        return;
    }
    // Rows past the group's end read its last row, and column vectors past N read the last one:
    // always valid, never written. Lanes past N go on to the end (a subgroup's loads need them).
    let in_n = gid.x * 2u < n4;
    let col4 = min(gid.x * 2u, n4 - 1u);
    let last = rows - 1u;
    let a_rows = block_rows(row0, r, last, k4);
    let mine = (row0 + min(r + (lane & 7u), last)) * k4;
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
    let k_end = k_extent(g, r, k4);
    for (var kq = 0u; kq < k_end; kq++) {
        let bo = kq * 4u * n4;
        let b0 = acc4(b[b_lo + bo]);
        let b1 = acc4(b[b_lo + bo + n4]);
        let b2 = acc4(b[b_lo + bo + 2u * n4]);
        let b3 = acc4(b[b_lo + bo + 3u * n4]);
        let e0 = acc4(b[b_hi + bo]);
        let e1 = acc4(b[b_hi + bo + n4]);
        let e2 = acc4(b[b_hi + bo + 2u * n4]);
        let e3 = acc4(b[b_hi + bo + 3u * n4]);
        let x = load_a8(a_rows, mine, kq);
        let x0 = x[0];
        let x1 = x[1];
        let x2 = x[2];
        let x3 = x[3];
        let x4 = x[4];
        let x5 = x[5];
        let x6 = x[6];
        let x7 = x[7];
        c0 += x0.x * b0 + x0.y * b1 + x0.z * b2 + x0.w * b3;
        c1 += x1.x * b0 + x1.y * b1 + x1.z * b2 + x1.w * b3;
        c2 += x2.x * b0 + x2.y * b1 + x2.z * b2 + x2.w * b3;
        c3 += x3.x * b0 + x3.y * b1 + x3.z * b2 + x3.w * b3;
        c4 += x4.x * b0 + x4.y * b1 + x4.z * b2 + x4.w * b3;
        c5 += x5.x * b0 + x5.y * b1 + x5.z * b2 + x5.w * b3;
        c6 += x6.x * b0 + x6.y * b1 + x6.z * b2 + x6.w * b3;
        c7 += x7.x * b0 + x7.y * b1 + x7.z * b2 + x7.w * b3;
        d0 += x0.x * e0 + x0.y * e1 + x0.z * e2 + x0.w * e3;
        d1 += x1.x * e0 + x1.y * e1 + x1.z * e2 + x1.w * e3;
        d2 += x2.x * e0 + x2.y * e1 + x2.z * e2 + x2.w * e3;
        d3 += x3.x * e0 + x3.y * e1 + x3.z * e2 + x3.w * e3;
        d4 += x4.x * e0 + x4.y * e1 + x4.z * e2 + x4.w * e3;
        d5 += x5.x * e0 + x5.y * e1 + x5.z * e2 + x5.w * e3;
        d6 += x6.x * e0 + x6.y * e1 + x6.z * e2 + x6.w * e3;
        d7 += x7.x * e0 + x7.y * e1 + x7.z * e2 + x7.w * e3;
    }
    if (!in_n) {
        return;
    }
    let out = (row0 + r) * n4 + col4;
    {
        c[out] = epi4(4u * (out), vec4<Elem>(c0));
        if (has_hi) { c[out + 1u] = epi4(4u * (out + 1u), vec4<Elem>(d0)); }
    }
    if (r + 1u < rows) {
        c[out + n4] = epi4(4u * (out + n4), vec4<Elem>(c1));
        if (has_hi) { c[out + n4 + 1u] = epi4(4u * (out + n4 + 1u), vec4<Elem>(d1)); }
    }
    if (r + 2u < rows) {
        c[out + 2u * n4] = epi4(4u * (out + 2u * n4), vec4<Elem>(c2));
        if (has_hi) { c[out + 2u * n4 + 1u] = epi4(4u * (out + 2u * n4 + 1u), vec4<Elem>(d2)); }
    }
    if (r + 3u < rows) {
        c[out + 3u * n4] = epi4(4u * (out + 3u * n4), vec4<Elem>(c3));
        if (has_hi) { c[out + 3u * n4 + 1u] = epi4(4u * (out + 3u * n4 + 1u), vec4<Elem>(d3)); }
    }
    if (r + 4u < rows) {
        c[out + 4u * n4] = epi4(4u * (out + 4u * n4), vec4<Elem>(c4));
        if (has_hi) { c[out + 4u * n4 + 1u] = epi4(4u * (out + 4u * n4 + 1u), vec4<Elem>(d4)); }
    }
    if (r + 5u < rows) {
        c[out + 5u * n4] = epi4(4u * (out + 5u * n4), vec4<Elem>(c5));
        if (has_hi) { c[out + 5u * n4 + 1u] = epi4(4u * (out + 5u * n4 + 1u), vec4<Elem>(d5)); }
    }
    if (r + 6u < rows) {
        c[out + 6u * n4] = epi4(4u * (out + 6u * n4), vec4<Elem>(c6));
        if (has_hi) { c[out + 6u * n4 + 1u] = epi4(4u * (out + 6u * n4 + 1u), vec4<Elem>(d6)); }
    }
    if (r + 7u < rows) {
        c[out + 7u * n4] = epi4(4u * (out + 7u * n4), vec4<Elem>(c7));
        if (has_hi) { c[out + 7u * n4 + 1u] = epi4(4u * (out + 7u * n4 + 1u), vec4<Elem>(d7)); }
    }
}
