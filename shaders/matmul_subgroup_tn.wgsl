// C = Aᵀ · B as matmul_vec4_tn.wgsl computes it (8 rows x 8 columns per invocation, the same
// sums in the same order), but A's 8 values in row k are loaded once per subgroup: lane j (j < 8)
// loads the value of row j and subgroupBroadcast hands it to every lane. One row of 32
// invocations per workgroup, as in matmul_subgroup.wgsl, and no lane returns before the
// broadcasts. Needs subgroups of at least 8 lanes and N % 4 == 0; any M and K.

@group(0) @binding(1) var<storage, read> a: array<Elem>;
@group(0) @binding(2) var<storage, read> b: array<vec4<Elem>>;

@compute @workgroup_size(32, 1, 1)
fn main(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    let g = gid.z;
    let n4 = p.n / 4u;
    let row0 = offsets[g];
    let rows = min(offsets[g + 1u] - row0, p.max_group_rows);
    let r = gid.y * 8u;
    // The same for the whole workgroup, so no subgroup is split by it.
    if (r >= rows) {
        return;
    }
    let in_n = gid.x * 2u < n4;
    let col4 = min(gid.x * 2u, n4 - 1u);
    let last = rows - 1u;
    let i0 = row0 + r;
    let mine = row0 + min(r + (lane & 7u), last);
    let has_hi = col4 + 1u < n4;
    let b_lo = g * p.k * n4 + col4;
    let b_hi = b_lo + select(0u, 1u, has_hi);

    var c0 = vec4<f32>(0.0);
    var c1 = vec4<f32>(0.0);
    var c2 = vec4<f32>(0.0);
    var c3 = vec4<f32>(0.0);
    var c4 = vec4<f32>(0.0);
    var c5 = vec4<f32>(0.0);
    var c6 = vec4<f32>(0.0);
    var c7 = vec4<f32>(0.0);
    var d0 = vec4<f32>(0.0);
    var d1 = vec4<f32>(0.0);
    var d2 = vec4<f32>(0.0);
    var d3 = vec4<f32>(0.0);
    var d4 = vec4<f32>(0.0);
    var d5 = vec4<f32>(0.0);
    var d6 = vec4<f32>(0.0);
    var d7 = vec4<f32>(0.0);
    for (var kk = 0u; kk < p.k; kk++) {
        let ak = kk * p.m;
        let v = f32(a[ak + mine]);
        let x = vec4<f32>(
            subgroupBroadcast(v, 0u), subgroupBroadcast(v, 1u),
            subgroupBroadcast(v, 2u), subgroupBroadcast(v, 3u),
        );
        let y = vec4<f32>(
            subgroupBroadcast(v, 4u), subgroupBroadcast(v, 5u),
            subgroupBroadcast(v, 6u), subgroupBroadcast(v, 7u),
        );
        let lo = vec4<f32>(b[b_lo + kk * n4]);
        let up = vec4<f32>(b[b_hi + kk * n4]);
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
    let rs = array<vec4<f32>, 8>(c0, c1, c2, c3, c4, c5, c6, c7);
    let ds = array<vec4<f32>, 8>(d0, d1, d2, d3, d4, d5, d6, d7);
    for (var i = 0u; i < 8u; i++) {
        if (r + i < rows) {
            store(i0 + i, col, rs[i]);
            if (has_hi) { store(i0 + i, col + 4u, ds[i]); }
        }
    }
}
