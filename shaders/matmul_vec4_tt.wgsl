// C = Aᵀ · Bᵀ with the register blocking of matmul_vec4_nt.wgsl, no workgroup memory: A [K, M]
// (rows offsets[g]..offsets[g+1] of C are columns of A, as in matmul_vec4_tn.wgsl), B [N, K] (or
// [G, N, K] per row group). Each invocation computes 4 rows × 4 columns as dot products along K:
// B's rows load as vec4s, A's four columns as scalars, four k at a time. Needs K % 4 == 0; any M
// and N (edge rows and columns are read clamped and never written).
// Every output sums over k in ascending order, whatever M is or however the rows are split into
// groups: N devices holding a split of the rows compute the same bits as one device.

@group(0) @binding(1) var<storage, read> a: array<Elem>;
@group(0) @binding(2) var<storage, read> b: array<vec4<Elem>>;

// Column `i` of A at rows 4·kq .. 4·kq + 3.
fn a_column(i: u32, kq: u32) -> vec4<f32> {
    let at = 4u * kq * p.m + i;
    return vec4<f32>(f32(a[at]), f32(a[at + p.m]), f32(a[at + 2u * p.m]), f32(a[at + 3u * p.m]));
}

@compute @workgroup_size(16, 4, 1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let g = gid.z;
    let k4 = p.k / 4u;
    let col = gid.x * 4u;
    let row0 = offsets[g];
    let rows = min(offsets[g + 1u] - row0, p.max_group_rows);
    let r = gid.y * 4u;
    if (col >= p.n || r >= rows) {
        return;
    }
    let last = rows - 1u;
    let i0 = row0 + r;
    let i1 = row0 + min(r + 1u, last);
    let i2 = row0 + min(r + 2u, last);
    let i3 = row0 + min(r + 3u, last);
    let nb = weight(g) * p.n;
    let b0 = (nb + col) * k4;
    let b1 = (nb + min(col + 1u, p.n - 1u)) * k4;
    let b2 = (nb + min(col + 2u, p.n - 1u)) * k4;
    let b3 = (nb + min(col + 3u, p.n - 1u)) * k4;

    var c0 = vec4<f32>(0.0);
    var c1 = vec4<f32>(0.0);
    var c2 = vec4<f32>(0.0);
    var c3 = vec4<f32>(0.0);
    let k_end = k_extent(g, r, k4);
    for (var kq = 0u; kq < k_end; kq++) {
        let y0 = vec4<f32>(b[b0 + kq]);
        let y1 = vec4<f32>(b[b1 + kq]);
        let y2 = vec4<f32>(b[b2 + kq]);
        let y3 = vec4<f32>(b[b3 + kq]);
        let x0 = a_column(i0, kq);
        let x1 = a_column(i1, kq);
        let x2 = a_column(i2, kq);
        let x3 = a_column(i3, kq);
        c0 += vec4<f32>(dot(x0, y0), dot(x0, y1), dot(x0, y2), dot(x0, y3));
        c1 += vec4<f32>(dot(x1, y0), dot(x1, y1), dot(x1, y2), dot(x1, y3));
        c2 += vec4<f32>(dot(x2, y0), dot(x2, y1), dot(x2, y2), dot(x2, y3));
        c3 += vec4<f32>(dot(x3, y0), dot(x3, y1), dot(x3, y2), dot(x3, y3));
    }
    store(i0, col, c0);
    if (r + 1u < rows) { store(i0 + 1u, col, c1); }
    if (r + 2u < rows) { store(i0 + 2u, col, c2); }
    if (r + 3u < rows) { store(i0 + 3u, col, c3); }
}
